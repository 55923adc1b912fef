"""The corpus of real CuPy/cupyx code that ``tools/corpus.py`` runs under ``cupygraph.jit`` (issue 20).

Each case is what a numeric-pipeline user writes (``fn``) and, where a fallback reason suggests one,
the capturable replacement (``instead``, with the config it needs). Inputs are fresh random data
with the batch axis first and exactly a capture size (8 rows), so no padding changes the result.
Needs CuPy (imported here at load time): only the GPU runs this file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

import cupy as cp
import cupyx
import cupyx.scipy.ndimage as ndi
import cupyx.scipy.signal as sig
import cupyx.scipy.special as sp
import numpy as np

import cupygraph as cg
import cupygraph.linalg as la

ROWS = 8


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    family: str
    fn: Callable[..., Any]
    inputs: str = "x"
    instead: Optional[Callable[..., Any]] = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Config of the replacement run (``host_uploads="auto"`` where the reason says so)."""
    tolerance: Optional[float] = None
    """rtol between the replacement and the original (another algorithm); None: 1e-5."""
    reproducible: bool = True
    """False where eager CuPy itself differs from run to run: the original's fallback runs are then
    compared with eager within ``tolerance``, not bit for bit (its replacement's replays still are,
    against the replacement run eagerly)."""
    routed_rtol: Optional[float] = None
    """rtol between the original's replays and eager CuPy where its library call is routed to another
    cuSOLVER / cuSPARSE routine than CuPy's (docs/ROUTING.md says by how much they may differ); None:
    bit for bit."""


def make_inputs(kind: str, seed: int) -> tuple[Any, ...]:
    """Fresh random data of one kind (never zeros)."""
    rng = np.random.default_rng(seed)
    if kind == "x":
        return (cp.asarray(rng.standard_normal((ROWS, 64)).astype(np.float32)),)
    if kind == "pos":
        return (cp.asarray((np.abs(rng.standard_normal((ROWS, 64))) + 0.5).astype(np.float32)),)
    if kind == "int":
        return (cp.asarray(rng.integers(0, 16, (ROWS, 64)).astype(np.int32)),)
    if kind == "img":
        return (cp.asarray(rng.standard_normal((ROWS, 32, 32)).astype(np.float32)),)
    if kind == "sig":
        return (cp.asarray(rng.standard_normal((ROWS, 256)).astype(np.float32)),)
    if kind == "sq":
        return (cp.asarray(rng.standard_normal((ROWS, ROWS))),)
    if kind == "spd":
        a = rng.standard_normal((ROWS, ROWS))
        return (cp.asarray(a @ a.T + ROWS * np.eye(ROWS)),)
    if kind == "sq_rhs":
        a = rng.standard_normal((ROWS, ROWS)) + ROWS * np.eye(ROWS)
        return cp.asarray(a), cp.asarray(rng.standard_normal((ROWS, 3)))
    if kind == "xw":
        return (cp.asarray(rng.standard_normal((ROWS, 64)).astype(np.float32)),
                cp.asarray(rng.standard_normal((64, 16)).astype(np.float32)))
    raise ValueError(kind)


WEIGHTS = np.linspace(-1.0, 1.0, 64).astype(np.float32)
KERNEL = cp.asarray(np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], np.float32)[None])
SAVGOL = sig.savgol_coeffs(7, 2).astype(cp.float32)  # computed once, eagerly: what the hint says to do
SPARSE = cupyx.scipy.sparse.random(16, 64, density=0.1, format="csr", dtype=np.float32, random_state=3)
SPARSE_RIGHT = cupyx.scipy.sparse.random(64, 16, density=0.1, format="csr", dtype=np.float32, random_state=4)


def _mask_assign(x):
    y = x * 2
    y[y < 0] = 0
    return y


def _masked_mean(x):
    return x[x > 0].mean()


def _branch(x):
    if x.max() > 0:
        return x * 2
    return x


def _host_scalar(x):
    return x / float(x.sum())


def _upload_weights(x):
    return x * cp.asarray(WEIGHTS)


def _upload_list(x):
    return x + cp.array([0.5] * 64, dtype=cp.float32)


def _set_scratch(x):
    scratch = cp.empty(64, dtype=cp.float32)
    scratch.set(WEIGHTS)
    return x - scratch


CASES: list[Case] = [
    # -- elementwise ufuncs and cupyx.scipy.special ------------------------------------------------------
    Case("add", "elementwise", lambda x: x + 1.5),
    Case("multiply", "elementwise", lambda x: x * x),
    Case("exp", "elementwise", lambda x: cp.exp(x)),
    Case("log1p", "elementwise", lambda x: cp.log1p(x), "pos"),
    Case("sqrt", "elementwise", lambda x: cp.sqrt(x), "pos"),
    Case("sin", "elementwise", lambda x: cp.sin(x)),
    Case("tanh", "elementwise", lambda x: cp.tanh(x)),
    Case("abs", "elementwise", lambda x: cp.abs(x)),
    Case("maximum", "elementwise", lambda x: cp.maximum(x, 0)),
    Case("clip", "elementwise", lambda x: cp.clip(x, -0.5, 0.5)),
    Case("where", "elementwise", lambda x: cp.where(x > 0, x, 0.1 * x)),
    Case("power", "elementwise", lambda x: cp.power(x, 3)),
    Case("floor", "elementwise", lambda x: cp.floor(x * 4)),
    Case("sign", "elementwise", lambda x: cp.sign(x)),
    Case("arctan2", "elementwise", lambda x: cp.arctan2(x, x + 1)),
    Case("hypot", "elementwise", lambda x: cp.hypot(x, 2 * x)),
    Case("nan_to_num", "elementwise", lambda x: cp.nan_to_num(cp.log(x))),
    Case("logaddexp", "elementwise", lambda x: cp.logaddexp(x, -x)),
    Case("erf", "special", lambda x: sp.erf(x)),
    Case("expit", "special", lambda x: sp.expit(x)),
    Case("gammaln", "special", lambda x: sp.gammaln(x), "pos"),
    Case("i0", "special", lambda x: sp.i0(x)),
    Case("softmax", "special", lambda x: sp.softmax(x, axis=1)),
    Case("logsumexp", "special", lambda x: sp.logsumexp(x, axis=1),
         instead=lambda x: _logsumexp(x, axis=1)),
    Case("elementwise_kernel", "elementwise",
         lambda x: cp.ElementwiseKernel("T x", "T y", "y = x * x + 1", "corpus_sq")(x)),
    # -- reductions --------------------------------------------------------------------------------------
    Case("sum", "reduction", lambda x: x.sum(axis=1)),
    Case("mean", "reduction", lambda x: x.mean(axis=0)),
    Case("std", "reduction", lambda x: x.std(axis=1)),
    Case("var", "reduction", lambda x: cp.var(x, axis=0)),
    Case("max", "reduction", lambda x: x.max(axis=1)),
    Case("argmax", "reduction", lambda x: cp.argmax(x, axis=1)),
    Case("min", "reduction", lambda x: cp.amin(x)),
    Case("prod", "reduction", lambda x: cp.prod(1 + 0.01 * x, axis=1)),
    Case("cumsum", "reduction", lambda x: cp.cumsum(x, axis=1)),
    Case("any_all", "reduction", lambda x: cp.stack([cp.any(x > 2, axis=1), cp.all(x > -2, axis=1)])),
    Case("norm", "reduction", lambda x: cp.linalg.norm(x, axis=1)),
    Case("count_nonzero", "reduction", lambda x: cp.count_nonzero(x > 0, axis=1)),
    Case("average", "reduction", lambda x: cp.average(x, axis=0)),
    Case("sum_total", "reduction", lambda x: x.sum()),
    # -- shapes and data movement ------------------------------------------------------------------------
    Case("reshape_transpose", "manipulation", lambda x: x.reshape(ROWS, 8, 8).transpose(0, 2, 1).copy()),
    Case("concatenate", "manipulation", lambda x: cp.concatenate([x, 2 * x], axis=1)),
    Case("stack", "manipulation", lambda x: cp.stack([x, -x])),
    Case("flip", "manipulation", lambda x: cp.flip(x, axis=1)),
    Case("roll", "manipulation", lambda x: cp.roll(x, 3, axis=1)),
    Case("pad", "manipulation", lambda x: cp.pad(x, ((0, 0), (2, 2)), mode="reflect")),
    Case("tile", "manipulation", lambda x: cp.tile(x, (1, 2))),
    Case("repeat", "manipulation", lambda x: cp.repeat(x, 2, axis=1)),
    Case("take", "manipulation", lambda x: cp.take(x, cp.arange(0, 64, 2), axis=1)),
    Case("sort", "manipulation", lambda x: cp.sort(x, axis=1)),
    Case("argsort", "manipulation", lambda x: cp.argsort(x, axis=1)),
    Case("triu", "manipulation", lambda x: cp.triu(x[:, :8])),
    Case("diff", "manipulation", lambda x: cp.diff(x, axis=1)),
    Case("searchsorted", "manipulation", lambda x: cp.searchsorted(cp.linspace(-2, 2, 9), x)),
    Case("take_along_axis", "manipulation", lambda x: cp.take_along_axis(x, cp.argsort(x, axis=1), axis=1)),
    # -- FFT -----------------------------------------------------------------------------------------------
    Case("fft", "fft", lambda x: cp.fft.fft(x, axis=1)),
    Case("ifft", "fft", lambda x: cp.fft.ifft(x.astype(cp.complex64), axis=1)),
    Case("rfft", "fft", lambda x: cp.fft.rfft(x, axis=1), "sig"),
    Case("irfft", "fft", lambda x: cp.fft.irfft(cp.fft.rfft(x, axis=1), axis=1), "sig"),
    Case("fft2", "fft", lambda x: cp.fft.fft2(x), "img"),
    Case("fftshift", "fft", lambda x: cp.fft.fftshift(cp.fft.fft(x, axis=1), axes=1)),
    # -- products (cuBLAS through CuPy: replacements on cupygraph.matmul) --------------------------------------
    Case("matmul", "blas", lambda x, w: x @ w, "xw", instead=lambda x, w: cg.matmul(x, w)),
    Case("dot", "blas", lambda x, w: cp.dot(x, w), "xw", instead=lambda x, w: cg.matmul(x, w)),
    Case("gram", "blas", lambda x: x @ x.T, instead=lambda x: cg.matmul(x, x.T)),
    Case("tensordot", "blas", lambda x, w: cp.tensordot(x, w, axes=1), "xw",
         instead=lambda x, w: la.tensordot(x, w, axes=1)),
    Case("einsum", "blas", lambda x, w: cp.einsum("ij,jk->ik", x, w), "xw",
         instead=lambda x, w: la.einsum("ij,jk->ik", x, w)),
    Case("einsum_batched", "blas", lambda x: cp.einsum("bij,bkj->bik", x.reshape(ROWS, 8, 8), x.reshape(ROWS, 8, 8)),
         instead=lambda x: la.einsum("bij,bkj->bik", x.reshape(ROWS, 8, 8), x.reshape(ROWS, 8, 8))),
    Case("inner", "blas", lambda x: cp.inner(x, x), instead=lambda x: cg.matmul(x, x.T)),
    Case("outer", "blas", lambda x: cp.outer(x[0], x[1])),
    Case("matvec", "blas", lambda x, w: x @ w[:, 0], "xw", instead=lambda x, w: cg.matmul(x, w[:, 0])),
    # -- dense solvers (cuSOLVER through CuPy: replacements on cupygraph.linalg) -----------------------------------
    Case("solve", "solver", lambda a, b: cp.linalg.solve(a, b), "sq_rhs", instead=lambda a, b: la.solve(a, b)),
    Case("inv", "solver", lambda a: cp.linalg.inv(a), "spd", instead=lambda a: la.inv(a)),
    Case("cholesky", "solver", lambda a: cp.linalg.cholesky(a), "spd", instead=lambda a: la.cholesky(a)),
    Case("qr", "solver", lambda a: tuple(cp.abs(m) for m in cp.linalg.qr(a)), "sq",
         instead=lambda a: tuple(cp.abs(m) for m in la.qr(a))),
    # Routed to XsyevBatched / gesvdjBatched / getrf where CuPy runs Xsyevd / gesvd / cuBLAS getrfBatched:
    Case("eigh", "solver", lambda a: cp.linalg.eigh(a)[0], "spd", instead=lambda a: la.eigh(a)[0],
         routed_rtol=1e-10),
    Case("svd", "solver", lambda a: cp.linalg.svd(a)[1], "sq", instead=lambda a: la.svd(a)[1], routed_rtol=1e-10),
    Case("eigh_vectors", "solver", lambda a: cp.abs(cp.linalg.eigh(a)[1]), "spd",
         instead=lambda a: cp.abs(la.eigh(a)[1]), tolerance=1e-8, routed_rtol=1e-8),
    Case("svd_vectors", "solver", lambda a: tuple(cp.abs(m) for m in cp.linalg.svd(a, full_matrices=False)), "sq",
         instead=lambda a: tuple(cp.abs(m) for m in la.svd(a, full_matrices=False)), tolerance=1e-8,
         routed_rtol=1e-8),
    Case("det", "solver", lambda a: cp.linalg.det(a), "spd", instead=lambda a: la.det(a), tolerance=1e-8,
         routed_rtol=1e-10),
    Case("lstsq", "solver", lambda a, b: cp.linalg.lstsq(a, b)[0], "sq_rhs", instead=lambda a, b: la.solve(a, b),
         tolerance=1e-6, routed_rtol=1e-8),
    # -- device-to-host reads and data-dependent shapes -------------------------------------------------------
    Case("mask_assign", "host_read", _mask_assign, instead=lambda x: cp.where(x * 2 < 0, 0, x * 2)),
    Case("masked_mean", "host_read", _masked_mean,
         instead=lambda x: cp.where(x > 0, x, 0).sum() / (x > 0).sum(dtype=x.dtype)),
    Case("branch_on_data", "host_read", _branch,
         instead=lambda x: cp.where(x.max() > 0, x * 2, x)),
    Case("host_scalar", "host_read", _host_scalar, instead=lambda x: x / x.sum()),
    Case("bincount", "host_read", lambda x: cp.bincount(x.ravel(), minlength=16), "int",
         instead=lambda x: cupyx.scatter_add(cp.zeros(16, cp.int64), x.ravel(), 1)),
    Case("nonzero", "host_read", lambda x: cp.nonzero(x > 0)[1]),
    Case("unique", "host_read", lambda x: cp.unique(x), "int"),
    Case("boolean_index", "host_read", lambda x: x[x > 1.0]),
    # -- host uploads (cupyx and user code): replacements under host_uploads="auto" --------------------------
    Case("asarray_numpy", "upload", _upload_weights, instead=_upload_weights, config={"host_uploads": "auto"}),
    Case("array_list", "upload", _upload_list, instead=_upload_list, config={"host_uploads": "auto"}),
    Case("ndarray_set", "upload", _set_scratch, instead=_set_scratch, config={"host_uploads": "auto"}),
    Case("gaussian_filter", "ndimage", lambda x: ndi.gaussian_filter(x, 1.5), "img",
         instead=lambda x: ndi.gaussian_filter(x, 1.5), config={"host_uploads": "auto"}),
    Case("gaussian_filter1d", "ndimage", lambda x: ndi.gaussian_filter1d(x, 2.0, axis=-1), "img",
         instead=lambda x: ndi.gaussian_filter1d(x, 2.0, axis=-1), config={"host_uploads": "auto"}),
    Case("sobel", "ndimage", lambda x: ndi.sobel(x, axis=-1), "img",
         instead=lambda x: ndi.sobel(x, axis=-1), config={"host_uploads": "auto"}),
    Case("laplace", "ndimage", lambda x: ndi.laplace(x), "img",
         instead=lambda x: ndi.laplace(x), config={"host_uploads": "auto"}),
    Case("uniform_filter", "ndimage", lambda x: ndi.uniform_filter(x, 3), "img",
         instead=lambda x: ndi.uniform_filter(x, 3), config={"host_uploads": "auto"}),
    Case("median_filter", "ndimage", lambda x: ndi.median_filter(x, size=3), "img",
         instead=lambda x: ndi.median_filter(x, size=3), config={"host_uploads": "auto"}),
    Case("maximum_filter", "ndimage", lambda x: ndi.maximum_filter(x, size=3), "img",
         instead=lambda x: ndi.maximum_filter(x, size=3), config={"host_uploads": "auto"}),
    Case("convolve_weights", "ndimage", lambda x: ndi.convolve(x, KERNEL), "img"),
    Case("zoom", "ndimage", lambda x: ndi.zoom(x, (1, 2, 2), order=1), "img",
         instead=lambda x: ndi.zoom(x, (1, 2, 2), order=1), config={"host_uploads": "auto"}),
    Case("shift_order1", "ndimage", lambda x: ndi.shift(x, (0, 1.5, -0.5), order=1), "img",
         instead=lambda x: ndi.shift(x, (0, 1.5, -0.5), order=1), config={"host_uploads": "auto"}),
    Case("shift_order3", "ndimage", lambda x: ndi.shift(x, (0, 1.5, -0.5), order=3), "img",
         instead=lambda x: ndi.shift(x, (0, 1.5, -0.5), order=3), config={"host_uploads": "auto"}),
    Case("percentile", "statistics", lambda x: cp.percentile(x, 90, axis=1),
         instead=lambda x: cp.percentile(x, 90, axis=1), config={"host_uploads": "auto"}),
    Case("median", "statistics", lambda x: cp.median(x, axis=1)),
    Case("histogram_range", "statistics", lambda x: cp.histogram(x, bins=8, range=(-3, 3))[0],
         instead=lambda x: cp.histogram(x, bins=8, range=(-3, 3))[0], config={"host_uploads": "auto"}),
    Case("corrcoef", "statistics", lambda x: cp.corrcoef(x),
         instead=lambda x: _corrcoef(x.astype(cp.float64)), tolerance=1e-10),
    # -- signal --------------------------------------------------------------------------------------------
    Case("convolve", "signal", lambda x: sig.convolve(x.ravel(), cp.ones(5, cp.float32) / 5, mode="same"), "sig"),
    Case("fftconvolve", "signal", lambda x: sig.fftconvolve(x, cp.ones((1, 9), cp.float32), mode="same", axes=1),
         "sig"),
    Case("savgol_filter", "signal", lambda x: sig.savgol_filter(x, 7, 2, axis=1, mode="mirror"), "sig",
         instead=lambda x: ndi.convolve1d(x, SAVGOL, axis=1, mode="mirror")),
    Case("correlate", "signal", lambda x: sig.correlate(x.ravel(), x[0, :16], mode="valid"), "sig"),
    # -- sparse --------------------------------------------------------------------------------------------
    # Routed to cuSPARSE SpMM on row-major operands, where CuPy's runs on column-major ones:
    Case("csr_matmul", "sparse", lambda x: SPARSE @ x.T, instead=lambda x: la.spmm(SPARSE, x.T), routed_rtol=1e-5),
    Case("csr_matmul_wide", "sparse", lambda x: SPARSE @ cp.tile(x.T, (1, 4)),
         instead=lambda x: la.spmm(SPARSE, cp.tile(x.T, (1, 4))), routed_rtol=1e-5),
    # CuPy's own ``dense @ csr`` differs from run to run in the last bits (H100, 2026-11-26).
    Case("dense_matmul_csr", "sparse", lambda x: x @ SPARSE_RIGHT, instead=lambda x: la.spmm(x, SPARSE_RIGHT),
         reproducible=False, routed_rtol=1e-5),
]


def _logsumexp(x: Any, axis: int) -> Any:
    top = x.max(axis=axis, keepdims=True)
    return (top + cp.log(cp.exp(x - top).sum(axis=axis, keepdims=True))).squeeze(axis)


def _corrcoef(x: Any) -> Any:
    centred = x - x.mean(axis=1, keepdims=True)
    cov = cg.matmul(centred, centred.T)
    d = cp.sqrt(cp.diagonal(cov))
    return cov / d[:, None] / d[None, :]
