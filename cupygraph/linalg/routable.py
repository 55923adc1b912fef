"""Which ``cupy.linalg`` / ``numpy.linalg`` calls and CSR products run capture-safe, by their arguments.

The one owner of that rule. While a function is recorded with ``route_library_calls`` on, the GPU
router (``routes/cupy_linalg.py``) runs cupygraph's cuSOLVER / cuSPARSE implementations for exactly the
calls this module accepts, and the host reference's router (``routes/numpy_linalg.py``) runs the same
NumPy / SciPy calls, so both backends graph the same keys; every other call is left as it is, and
fails the capture (GPU) or is refused (host) as before, naming the user's line.

``solve``, ``inv``, ``det``, ``slogdet`` and the ``qr`` and ``cholesky`` of one matrix are accepted
as CuPy's own code (``RoutedCall.own_code``): on the GPU CuPy's ``cupy.linalg`` runs them, its cuSOLVER
and cuBLAS calls routed at the library boundary (``routes/cupy_libraries.py``), so the result is CuPy's
bit for bit, for any dtype CuPy takes; the host runs NumPy's own. Other calls are accepted when
cupygraph has a faithful capture-safe route for their arguments: float32 or float64
operands (integers, float16 and complex are left to CuPy); the shapes, batch and options
below; ``eigh``, ``svd`` and what is built on the SVD only up to ``CAPTURE_MAX`` rows and columns
(``_spectral_routines``: larger matrices run routines that fail under stream capture). Plain Python
on shapes, dtypes and option values: no CuPy, no array data read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from ..backends.guards.host_refusal import svd_norm
from ._spectral_routines import CAPTURE_MAX

__all__ = ["ROUTED_FUNCTIONS", "SPARSE_LABEL", "SPARSE_PRODUCTS", "RoutedCall", "linalg_call", "routed_targets",
           "sparse_call"]

_DEFAULT = object()
"""An option the caller left out (the defaults differ: ``pinv``'s rcond is 1e-15 in CuPy, None in NumPy 2)."""

_SIGNATURES: dict[str, tuple[tuple[str, ...], dict[str, Any], frozenset[str]]] = {
    # name: (array parameters, options in positional order with their CuPy defaults, keyword-only options);
    # NumPy's and CuPy's parameters together (``upper``, ``hermitian``: NumPy's; routed only as False).
    "solve": (("a", "b"), {}, frozenset()),
    "inv": (("a",), {}, frozenset()),
    "cholesky": (("a",), {"upper": False}, frozenset({"upper"})),
    "qr": (("a",), {"mode": "reduced"}, frozenset()),
    "eigh": (("a",), {"UPLO": "L"}, frozenset()),
    "eigvalsh": (("a",), {"UPLO": "L"}, frozenset()),
    "svd": (("a",), {"full_matrices": True, "compute_uv": True, "hermitian": False}, frozenset()),
    "det": (("a",), {}, frozenset()),
    "slogdet": (("a",), {}, frozenset()),
    "norm": (("x",), {"ord": None, "axis": None, "keepdims": False}, frozenset()),
    "lstsq": (("a", "b"), {"rcond": None}, frozenset()),
    "pinv": (("a",), {"rcond": 1e-15, "hermitian": False}, frozenset()),
}
ROUTED_FUNCTIONS = tuple(_SIGNATURES)
"""The ``cupy.linalg`` / ``numpy.linalg`` functions routed for some arguments."""

SPARSE_PRODUCTS: dict[str, bool] = {"__matmul__": False, "__rmatmul__": True, "dot": False, "__mul__": False,
                                    "__rmul__": True}
"""The CSR matrix methods that multiply (``__mul__`` / ``__rmul__``: of ``csr_matrix`` only, whose ``*`` is a
product), by whether the dense operand comes first (``x @ csr`` calls ``csr.__rmatmul__(x)``)."""


SPARSE_LABEL = "sparse."
"""How an interception labels a CSR class's method (``sparse.__matmul__``): the routers tell them apart by it."""


def routed_targets(linalg: Any, sparse: Any) -> list[tuple[Any, str, str]]:
    """(owner, attribute, label) of what a router replaces: the routed functions of ``linalg``
    (``cupy.linalg`` or ``numpy.linalg``) and the products of ``sparse``'s CSR classes (cupyx's or SciPy's;
    None where the module was never imported: a CSR matrix exists only where it was)."""
    targets = [(linalg, name, name) for name in ROUTED_FUNCTIONS if hasattr(linalg, name)]
    for cls in (getattr(sparse, "csr_matrix", None), getattr(sparse, "csr_array", None)):
        if cls is None:
            continue
        # csr_array's ``*`` multiplies element-wise (array semantics): only csr_matrix's is a product.
        products = SPARSE_PRODUCTS if cls.__name__ == "csr_matrix" else ("__matmul__", "__rmatmul__", "dot")
        targets += [(cls, method, SPARSE_LABEL + method) for method in products if hasattr(cls, method)]
    return targets


@dataclasses.dataclass(frozen=True)
class RoutedCall:
    """One call to run capture-safe."""

    name: str
    """The function (``"solve"``, ...), or ``"spmm"`` for a CSR product."""
    library: str
    """``"cuSOLVER"`` or ``"cuSPARSE"``: the routed call is noted as this and the user's line."""
    arrays: tuple[Any, ...]
    """The array operands, in the function's order (for ``spmm``: the CSR matrix, then the dense one)."""
    options: Mapping[str, Any]
    """Every option, the caller's or CuPy's default (the GPU route computes with these)."""
    given: Mapping[str, Any]
    """The options the caller passed (the host route calls NumPy's own function with these)."""
    own_code: bool = False
    """Computed by the library's own code (CuPy's, its library calls routed; NumPy's on the host), not by
    cupygraph.linalg: CuPy's result bit for bit, and its behaviour on a failed matrix."""


def _bind(name: str, args: tuple[Any, ...],
          kwargs: Mapping[str, Any]) -> Optional[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(arrays, options given) as the function would bind them, or None for anything else (too many
    arguments, an unknown or repeated keyword: the function itself raises on those)."""
    arrays, options, keyword_only = _SIGNATURES[name]
    positional = list(arrays) + [o for o in options if o not in keyword_only]
    if len(args) > len(positional):
        return None
    bound = dict(zip(positional, args))
    for key, value in kwargs.items():
        if key in bound or (key not in options and key not in arrays):
            return None
        bound[key] = value
    if any(a not in bound for a in arrays):
        return None
    return tuple(bound[a] for a in arrays), {k: v for k, v in bound.items() if k in options}


def _float_arrays(*arrays: Any) -> bool:
    """float32 / float64 arrays (other dtypes are left to the library)."""
    for x in arrays:
        dtype, shape = getattr(x, "dtype", None), getattr(x, "shape", None)
        if dtype is None or not isinstance(shape, tuple) or getattr(dtype, "char", "") not in ("f", "d"):
            return False
    return True


def _square_stack(a: Any) -> bool:
    return bool(a.ndim >= 2 and a.shape[-1] == a.shape[-2] and a.size > 0)


def _spectral_matrix(a: Any) -> bool:
    """One matrix the batched Jacobi / XsyevBatched routines capture (``_spectral_routines``)."""
    return bool(a.ndim == 2 and 0 < min(a.shape) and max(a.shape) <= CAPTURE_MAX)


def _real(value: Any) -> bool:
    """A real number (not a bool, not an array: CuPy and NumPy broadcast an array ``rcond``)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _matrix_axes(x: Any, axis: Any) -> Optional[tuple[int, int]]:
    """The (row, column) axes of a 2-D ``x`` a matrix norm reduces, or None."""
    if x.ndim != 2:
        return None
    if axis is None:
        return 0, 1
    if not isinstance(axis, tuple) or len(axis) != 2 or not all(type(v) is int for v in axis):
        return None
    row, col = (v + 2 if v < 0 else v for v in axis)
    return (row, col) if {row, col} == {0, 1} else None


def _accepted(name: str, arrays: tuple[Any, ...], options: Mapping[str, Any]) -> bool:
    a = arrays[0]
    if name in ("solve", "lstsq"):
        b = arrays[1]
        if name == "lstsq":  # m <= n: residuals are empty whatever the rank (their shape would depend on it)
            m, n = a.shape if a.ndim == 2 else (0, 0)
            rcond = options["rcond"]
            return (_spectral_matrix(a) and m <= n and b.ndim in (1, 2) and b.shape[0] == m and b.size > 0
                    and b.dtype == a.dtype and (rcond is None or (_real(rcond) and (rcond < 0 or 0 < rcond < 1))))
        vector = b.ndim == 1 and b.shape[0] == a.shape[-1]  # CuPy broadcasts a vector to every matrix
        return _square_stack(a) and (vector or (b.ndim == a.ndim and b.shape[:-1] == a.shape[:-1]))
    if name in ("inv", "det", "slogdet"):
        return _square_stack(a)
    if name == "cholesky":
        return _square_stack(a) and options["upper"] is False
    if name == "qr":
        mode = options["mode"]
        return (a.ndim == 2 and a.size > 0 and isinstance(mode, str)
                and (mode in ("reduced", "r") or (mode == "complete" and a.shape[0] <= a.shape[1])))
    if name in ("eigh", "eigvalsh"):
        return _spectral_matrix(a) and a.shape[0] == a.shape[1] and options["UPLO"] in ("L", "U")
    if name == "svd":
        return _spectral_matrix(a) and options["hermitian"] is False
    if name == "pinv":
        rcond = options["rcond"]
        return _spectral_matrix(a) and options["hermitian"] is False and _real(rcond)
    if name == "norm":
        keepdims = options["keepdims"]
        return (svd_norm((a,), options) and _matrix_axes(a, options["axis"]) is not None
                and _spectral_matrix(a) and isinstance(keepdims, bool))
    return False


_OWN_CODE = ("solve", "inv", "det", "slogdet", "qr", "cholesky")
"""What CuPy computes with only the library calls ``routes/cupy_libraries.py`` routes (``qr`` and ``cholesky``
of one matrix: a batch runs routines that are not routed)."""


def _own_code(name: str, arrays: tuple[Any, ...], options: Mapping[str, Any]) -> bool:
    a = arrays[0]
    if name not in _OWN_CODE or any(getattr(getattr(x, "dtype", None), "kind", "") not in "biufc" for x in arrays):
        return False
    return (a.ndim == 2 or name not in ("qr", "cholesky")) and _accepted(name, arrays, options)


def linalg_call(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Optional[RoutedCall]:
    """``<linalg>.name(*args, **kwargs)`` as a call to run capture-safe, or None when there is no faithful
    route for these arguments (``name`` not routed, another dtype, shape or option)."""
    if name not in _SIGNATURES:
        return None
    bound = _bind(name, args, kwargs)
    if bound is None:
        return None
    arrays, given = bound
    if all(hasattr(x, "dtype") and isinstance(getattr(x, "shape", None), tuple) for x in arrays):
        options = {**_SIGNATURES[name][1], **given}
        if _own_code(name, arrays, options):
            return RoutedCall(name, "cuSOLVER", arrays, options, given, own_code=True)
    if not _float_arrays(*arrays):
        return None
    options = {**_SIGNATURES[name][1], **given}
    if not _accepted(name, arrays, options):
        return None
    return RoutedCall(name, "cuSOLVER", arrays, options, given)


def sparse_call(method: str, matrix: Any, other: Any) -> Optional[RoutedCall]:
    """``matrix.<method>(other)`` (a CSR product with a dense 1-D or 2-D array) as a call to run capture-safe,
    or None: another format, a sparse or scalar ``other``, another dtype, mismatched shapes, sizes over
    cuSPARSE's 32-bit indices."""
    dense_first = SPARSE_PRODUCTS.get(method)
    if dense_first is None or getattr(matrix, "format", None) != "csr" or hasattr(other, "nnz"):
        return None
    shape = getattr(other, "shape", None)
    if not isinstance(shape, tuple) or len(shape) not in (1, 2) or 0 in shape:
        return None
    rows, cols = matrix.shape
    inner = shape[-1] if dense_first else shape[0]
    if inner != (rows if dense_first else cols) or max(rows, cols, matrix.nnz) > 2**31 - 1:
        return None
    if not _float_arrays(matrix, other):
        return None
    return RoutedCall("spmm", "cuSPARSE", (matrix, other), {"dense_first": dense_first}, {})
