"""What ``cupygraph.linalg``'s products refuse, the same on the host reference as on the GPU
(``tests/gpu/test_linalg_arguments_gpu.py``): a ``c`` that does not broadcast to the result is named,
and an ``out`` that overlaps ``c`` without being it is refused (the GPU cannot read c while writing out);
``tensordot`` takes NumPy integer axes as NumPy does, and ``scalar`` names a ``like`` that is no operand."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cupygraph as cg

L = cg.linalg


def operands() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((3, 4)), rng.standard_normal((4, 5))


@pytest.mark.parametrize("c_shape", [(2, 5), (2, 3, 5), (3, 4)])
def test_gemm_names_a_c_that_does_not_broadcast_to_the_result(c_shape):
    a, b = operands()
    words = f"gemm: argument 'c' has shape {c_shape}, which does not broadcast to the result's (3, 5)"
    with pytest.raises(ValueError, match=re.escape(words)):
        L.gemm(a, b, np.ones(c_shape), beta=1.0)


def test_gemm_reads_no_c_when_beta_is_the_number_zero_and_broadcasts_a_row():
    a, b = operands()
    np.testing.assert_array_equal(L.gemm(a, b, np.full((7, 7), np.nan), beta=0.0), a @ b)  # not read: BLAS
    row = np.arange(5.0)
    np.testing.assert_allclose(L.gemm(a, b, row, beta=2.0), a @ b + 2 * row)


def test_gemm_batched_names_a_c_matrix_of_another_shape():
    a, b = operands()
    with pytest.raises(ValueError, match=r"gemm_batched: argument 'c\[0\]' has shape \(2, 2\)"):
        L.gemm_batched([a], [b], [np.ones((2, 2))], beta=1.0)


@pytest.mark.parametrize("beta", [1.0, "array"])
def test_gemm_refuses_an_out_that_overlaps_c_without_being_it(beta):
    a, b = operands()
    buffer = np.zeros((3, 6))
    scale = L.scalar(1.0, like=a) if beta == "array" else beta
    with pytest.raises(ValueError, match="out overlaps c without being c; pass out=c"):
        L.gemm(a, b, buffer[:, 1:], beta=scale, out=buffer[:, :-1])
    c = np.ones((3, 5))
    assert L.gemm(a, b, c, beta=scale, out=c) is c  # out=c: c updated in place
    np.testing.assert_allclose(c, a @ b + 1)


def test_tensordot_takes_numpy_integer_axes_as_numpy_does():
    rng = np.random.default_rng(1)
    a, b, c = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 4, 5)), rng.standard_normal((4, 3, 5))
    cases = [(b, np.int64(2)), (c, (np.int64(2), np.int32(0))), (c, ([np.int64(1), 2], [np.int64(1), 0]))]
    for other, axes in cases:
        np.testing.assert_allclose(L.tensordot(a, other, axes), np.tensordot(a, other, axes), rtol=1e-12)


@pytest.mark.parametrize("like", [[1.0], np.ones(2, dtype=np.int64)])
def test_scalar_names_a_like_that_is_no_operand(like):
    with pytest.raises(TypeError, match="scalar: like must be an operand array"):
        L.scalar(1.0, like=like)
