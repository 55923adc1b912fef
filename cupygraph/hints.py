"""What to write instead of an op a graph cannot hold: the "use ..." part of a fallback reason.

A reason says what was refused and where (``frames``); this module adds the capturable
replacement where one exists, from the library function the user's line called and the line's
own code: ``y[y < 0] = 0`` gets "use `y = cupy.where(y < 0, 0, y)`", ``cupy.linalg.solve`` gets
"use `cupygraph.linalg.solve`". Only replacements that exist are named
(``tests/unit/test_hints.py`` checks every ``cupygraph.*`` name against the package).

Layer 0: imports only ``frames``.
"""

from __future__ import annotations

import ast
from types import FrameType
from typing import Optional

from .frames import call_site_in_stack

__all__ = ["HOST_UPLOAD_HINT", "LINALG_REPLACEMENTS", "replacement", "where_and_instead"]

# cupy.linalg / numpy.linalg functions with a capturable cupygraph.linalg twin (cuSOLVER/cuBLAS).
LINALG_REPLACEMENTS = frozenset({"solve", "inv", "cholesky", "qr", "eigh", "svd", "det", "slogdet", "tensordot",
                                 "einsum", "spmm"})
_PRODUCTS = frozenset({"matmul", "dot", "__matmul__", "__rmatmul__", "inner", "vdot", "__imatmul__"})
HOST_UPLOAD_HINT = ('make the array with `asarray(...)` in the function (host_uploads="auto", the default, bakes it '
                    'into the graph when its bytes never change; "constant" freezes it unchecked), or pass the data '
                    'as an argument')
_CONTROL_HINT = ("keep it an array: `{xp}.where(cond, a, b)` for values, `cupygraph.cond` / "
                 "`cupygraph.while_loop` for control flow")
_MASK_READ_HINT = ("keep the shape: `{xp}.where(mask, x, 0)` then reduce (a masked mean is "
                   "`{xp}.where(mask, x, 0).sum() / mask.sum()`)")


def _statement(code: str) -> Optional[ast.stmt]:
    try:
        body = ast.parse(code.strip()).body
    except SyntaxError:  # one line of a longer statement
        return None
    return body[0] if len(body) == 1 else None


def _mask_assignment(code: str, xp: str) -> Optional[str]:
    """``y[m] = v`` -> ``y = xp.where(m, v, y)``; None when the line is not such an assignment."""
    stmt = _statement(code)
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    target = stmt.targets[0]
    if not isinstance(target, ast.Subscript) or isinstance(target.slice, (ast.Slice, ast.Tuple, ast.Constant)):
        return None
    array, mask, value = ast.unparse(target.value), ast.unparse(target.slice), ast.unparse(stmt.value)
    return (f"use `{array}[...] = {xp}.where({mask}, {value}, {array})` (or `{xp}.copyto({array}, {value}, "
            f"where={mask})`), which keeps the shape")


def _has_mask_read(code: str) -> bool:
    stmt = _statement(code)
    if stmt is None:
        return False
    return any(isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Compare) for node in ast.walk(stmt))


_DATA_SHAPED = frozenset({"nonzero", "argwhere", "flatnonzero", "unique", "compress", "extract", "_nonzero",
                          "trim_zeros", "setdiff1d", "intersect1d", "union1d"})


def _library(called: str, xp: str) -> Optional[str]:
    module, _, name = called.rpartition(".")  # ``called`` is a library frame's: no user function
    if module.split(".", 1)[0] == "cupygraph":  # a cupygraph function failed: naming it again helps nobody
        return None
    if "sparse" in module and name in ("__rmatmul__", "__rmul__", "_rmatmul_dispatch"):  # dense @ csr
        return "use `cupygraph.linalg.spmm(dense, csr)`, which captures (cuSPARSE SpMM)"
    if "sparse" in module and name in _PRODUCTS | {"__mul__", "_mul_sparse_matrix", "spmm", "csrmm2"}:
        return ("use `cupygraph.linalg.spmm(csr, dense)` (or `spmm(dense, csr)` for dense @ csr), which captures "
                "(cuSPARSE SpMM)")
    if "linalg" in module and name in ("eigh", "svd"):  # the size is linalg._spectral_routines.CAPTURE_MAX
        return (f"use `cupygraph.linalg.{name}`, which captures for matrices up to 32x32 (cuSOLVER's batched "
                "routines; larger ones run eagerly)")
    if "linalg" in module and name in LINALG_REPLACEMENTS:
        return f"use `cupygraph.linalg.{name}`, which captures (cuSOLVER/cuBLAS with preallocated workspaces)"
    if name in ("tensordot", "einsum"):
        return f"use `cupygraph.linalg.{name}`, which captures (one cuBLAS GEMM)"
    if name in _PRODUCTS:
        return "use `cupygraph.matmul` (or `cupygraph.linalg.gemm` / `tensordot`), which capture"
    if name == "logsumexp":  # cupyx checks for infinities on the host
        return ("use `m = x.max(axis, keepdims=True); (m + cupy.log(cupy.exp(x - m).sum(axis, keepdims=True)))"
                ".squeeze(axis)`, which captures")
    if name == "savgol_filter":  # its coefficients come from a least-squares solve on every call
        return ("compute `c = cupyx.scipy.signal.savgol_coeffs(window, order)` once, outside the function, and use "
                "`cupyx.scipy.ndimage.convolve1d(x, c, axis=axis, mode=\"mirror\")` (savgol_filter's mode=\"mirror\")")
    if name == "lstsq":
        return "for a square a of full rank, use `cupygraph.linalg.solve(a, b)`, which captures"
    if name in ("corrcoef", "cov"):
        return ("compute it with `cupygraph.matmul`: `c = x - x.mean(axis=1, keepdims=True)`, then "
                "`cupygraph.matmul(c, c.T) / (n - 1)`, which captures")
    if name in _DATA_SHAPED:
        return ("its output's shape depends on the data, which a graph cannot hold: keep a fixed shape "
                f"(`{xp}.where(mask, x, fill)`, `{xp}.sort`) or call it outside the graphed function")
    if name == "bincount":
        return "with a known length n, use `cupyx.scatter_add(cupy.zeros(n, cupy.int64), x, 1)`, which captures"
    return None


def replacement(reason: str, called: str = "", code: str = "", xp: str = "cupy") -> str:
    """``"; use ..."`` naming what captures instead, or ``""`` when nothing does.

    ``reason`` is a ``FallbackReason`` value, ``called`` the library function the user's line
    called (``module.function``), ``code`` that line, ``xp`` the array module to name.
    """
    hint = _mask_assignment(code, xp) if reason in ("device_to_host_read", "data_dependent_shape") else None
    if hint is None:
        hint = _library(called, xp) if called else None
    if hint is None and reason == "host_upload":
        hint = HOST_UPLOAD_HINT
    if hint is None and reason in ("device_to_host_read", "data_dependent_shape") and _has_mask_read(code):
        hint = _MASK_READ_HINT.format(xp=xp)
    if hint is None and reason == "device_to_host_read":
        hint = _CONTROL_HINT.format(xp=xp)
    return f"; {hint}" if hint else ""


def where_and_instead(frame: Optional[FrameType], reason: str, called: str = "", xp: str = "np") -> str:
    """`` (at file:line: code); use ...`` for a refusal raised in ``frame``: the user's line from there
    outwards and the replacement (``called`` names the library function where the stack cannot)."""
    site = call_site_in_stack(frame)
    if site is None:
        return ""
    return site.location() + replacement(reason, called or site.called, site.code, xp)
