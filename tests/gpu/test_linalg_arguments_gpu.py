"""The GPU side of ``tests/unit/test_linalg_arguments.py``: ``cupygraph.linalg``'s products refuse a ``c``
that does not broadcast to the result naming it, refuse an ``out`` overlapping ``c`` without being it, and
read no ``c`` when beta is the number 0, as the host reference does."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

L = cg.linalg


def operands():
    rng = np.random.default_rng(0)
    return cupy.asarray(rng.standard_normal((3, 4))), cupy.asarray(rng.standard_normal((4, 5)))


@pytest.mark.parametrize("c_shape", [(2, 5), (2, 3, 5), (3, 4)])
def test_gemm_names_a_c_that_does_not_broadcast_to_the_result(c_shape):
    a, b = operands()
    words = f"gemm: argument 'c' has shape {c_shape}, which does not broadcast to the result's (3, 5)"
    with pytest.raises(ValueError, match=re.escape(words)):
        L.gemm(a, b, cupy.ones(c_shape), beta=1.0)


def test_gemm_reads_no_c_when_beta_is_the_number_zero_and_broadcasts_a_row():
    a, b = operands()
    expected = cupy.asnumpy(a) @ cupy.asnumpy(b)
    np.testing.assert_allclose(cupy.asnumpy(L.gemm(a, b, cupy.full((7, 7), np.nan), beta=0.0)), expected, rtol=1e-12)
    row = cupy.arange(5.0)
    np.testing.assert_allclose(cupy.asnumpy(L.gemm(a, b, row, beta=2.0)), expected + 2 * np.arange(5.0), rtol=1e-12)


def test_gemm_batched_names_a_c_matrix_of_another_shape():
    a, b = operands()
    with pytest.raises(ValueError, match=r"gemm_batched: argument 'c\[0\]' has shape \(2, 2\)"):
        L.gemm_batched([a], [b], [cupy.ones((2, 2))], beta=1.0)


@pytest.mark.parametrize("beta", [1.0, "array"])
def test_gemm_refuses_an_out_that_overlaps_c_without_being_it(beta):
    a, b = operands()
    buffer = cupy.zeros((3, 6))
    scale = L.scalar(1.0, like=a) if beta == "array" else beta
    with pytest.raises(ValueError, match="out overlaps c without being c; pass out=c"):
        L.gemm(a, b, buffer[:, 1:], beta=scale, out=buffer[:, :-1])
