"""The host backend refuses what CuPy refuses under stream capture.

A host "replay" re-executes the function, so without this the host would happily "capture" work
a CUDA graph cannot hold and return values the GPU never could (a Python float read from the data
is frozen into a GPU graph: a stale result). During the capture run (not the warm-ups) the
function sees its static buffers as ``CaptureArray`` views: NumPy arrays that refuse

* reading data to the host: ``float()``, ``int()``, ``bool()`` / ``if x``, ``__index__``,
  ``.item()``, ``.tolist()``, ``str()`` / ``print``, iteration into Python scalars;
* data-dependent output shapes: boolean-mask indexing (``x[x > 0]``), ``np.nonzero``, one-argument
  ``np.where``, ``np.unique``, ``np.bincount``, ``np.flatnonzero`` and the like; a boolean-mask store
  of one value (``y[y < 0] = 0``) is run as ``np.copyto(y, 0, where=y < 0)`` instead where the GPU
  routes it (``_store_masked_scalar``);
* library calls CuPy cannot capture: ``@`` / ``np.matmul`` / ``np.dot`` / ``np.einsum`` / ...
  (cuBLAS) and ``np.linalg`` (cuSOLVER; not the norms CuPy computes with reduction kernels), except
  what the GPU routes to capture-safe implementations (``backends/routing.py``, with
  ``route_library_calls`` on: the products, noted as routed as the GPU notes them; the routed
  ``np.linalg`` calls never get here: ``routes/numpy_linalg.py`` runs them on plain arrays).
  ``cupygraph.matmul`` / ``cupygraph.linalg`` and ``cupygraph.random`` capture on the GPU, so they run
  here on plain views (``host_capturable``).

Every array derived from a ``CaptureArray`` is one too (ufuncs, array functions, views,
indexing), and results that NumPy would hand back as scalars stay 0-d arrays, as CuPy's do, so
``float(x.sum())`` is caught. Shapes, dtypes and ``len()`` stay readable. A refusal raises
``CaptureError`` naming the op and the user's line; one the function catches still fails the
capture (as an invalidated CUDA capture would). In PIECEWISE mode ``graph_break`` ops run on
plain arrays, as the GPU runs them eagerly between pieces.

``part[0] = x.sum()`` (a device copy in CuPy) is allowed; ``np.asarray(x)`` and legacy ``np.random``
are refused in ``host_escapes``. Not caught: ``x.view(np.ndarray)`` and ``np.float32(x)`` (scalar
types but float64), which NumPy converts without any hook (CuPy refuses both on the GPU).
"""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from ...errors import CaptureError
from ...frames import location_in_stack
from ...pytree import flatten, unflatten
from ...reasons import FallbackReason
from ..graph_breaks import recording_breaks
from ..mask_stores import MASK_STORE, STORABLE_KINDS, mask_store_where, stored_scalar
from ..routing import note_routed, routing_enabled
from .host_refusal import (
    CUBLAS_UFUNCS,
    LIBRARY_HINT,
    SHAPE_HINT,
    SHAPE_ONLY,
    RefusedOp,
    active_guard,
    check_function,
    guard_scope,
    host_read,
    reads_allowed,
    refuse,
    routed_product,
)


def _host_read_unless_stored(what: str) -> None:
    frame = sys._getframe(2)  # NumPy storing it into an element (`part[i] = x.sum()`): CuPy copies on device
    if frame.f_code.co_code[frame.f_lasti] != dis.opmap["STORE_SUBSCR"]:
        host_read(what)


def _plain(value: Any) -> Any:
    return value.view(np.ndarray) if isinstance(value, CaptureArray) else value


def _plain_tree(value: Any) -> Any:
    """``value`` with every CaptureArray in it (in lists, tuples, dicts) as a plain view."""
    if isinstance(value, CaptureArray):
        return value.view(np.ndarray)
    if type(value) in (list, tuple):
        return type(value)(_plain_tree(v) for v in value)
    if type(value) is dict:
        return {k: _plain_tree(v) for k, v in value.items()}
    return value


def _wrap(value: Any) -> Any:
    """Arrays as CaptureArrays; scalars as 0-d CaptureArrays (what CuPy returns); containers deep."""
    if isinstance(value, CaptureArray):
        return value
    if type(value) is np.ndarray:
        return value.view(CaptureArray)
    if isinstance(value, (np.generic, bool, int, float, complex)):
        return np.asarray(value).view(CaptureArray)
    if type(value) in (list, tuple):
        return type(value)(_wrap(v) for v in value)
    return value


def _is_bool_index(component: Any) -> bool:
    if isinstance(component, np.ndarray):
        return bool(component.dtype == np.bool_)
    if isinstance(component, list):
        return any(isinstance(v, (bool, np.bool_)) or _is_bool_index(v) for v in component)
    return False


def _store_masked_scalar(target: CaptureArray, index: Any, value: Any) -> bool:
    """``target[index] = value`` run as ``np.copyto(target, value, where=mask)`` where the GPU routes it
    (``routes/cupy_mask_store.py``: one boolean array as the mask, of the target's shape or leading
    axes, and one value), noted with the GPU's label; False where the store is not that, or routing
    is off, and is checked as any other. An array here is a device array there, whether derived from
    the capture's data or read by address (a closure's); host data reaches a function only through
    the creators ``host_uploads`` rules."""
    if not routing_enabled() or not isinstance(index, np.ndarray) or index.dtype != np.bool_ \
            or target.dtype.kind not in STORABLE_KINDS:
        return False
    where = mask_store_where(target.shape, index.shape)
    # A 0-d array of the capture's data is a device scalar on the GPU, cast there as NumPy casts it here.
    fill = None if where is None else stored_scalar(_plain(value), target.dtype)
    if fill is None:
        return False
    np.copyto(target.view(np.ndarray), fill, where=index.view(np.ndarray).reshape(where))
    note_routed(f"{MASK_STORE}{location_in_stack(sys._getframe(1))}")
    return True


def _check_index(index: Any, what: str) -> None:
    components = index if isinstance(index, tuple) else (index,)
    if any(_is_bool_index(c) for c in components):
        refuse(FallbackReason.DATA_DEPENDENT_SHAPE, f"boolean-mask {what} ({SHAPE_HINT})")
    if any(isinstance(c, list) for c in components):  # CuPy uploads a list index: refused under capture
        refuse(FallbackReason.HOST_UPLOAD, f"{what} with a Python list uploads it (use an index array)")


class CaptureArray(np.ndarray):
    """A static buffer (or an array derived from one) as the function sees it during a host capture;
    outside a capture run it behaves as a plain ndarray."""

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if active_guard() is not None and ufunc.__name__ in CUBLAS_UFUNCS and not routed_product(ufunc.__name__):
            refuse(FallbackReason.LIBRARY_CALL, f"np.{ufunc.__name__} / @ calls cuBLAS, {LIBRARY_HINT}", "numpy.dot")
        out = kwargs.get("out")
        if out is not None:
            kwargs["out"] = tuple(_plain(o) for o in out)
        if "where" in kwargs:
            kwargs["where"] = _plain(kwargs["where"])
        result = getattr(ufunc, method)(*(_plain(x) for x in inputs), **kwargs)
        if out is None:
            return _wrap(result)
        if len(out) == 1:
            return out[0]  # the caller's own array, as NumPy returns it
        return tuple(_wrap(r) if o is None else o for o, r in zip(out, result))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if active_guard() is not None:
            check_function(func, args, kwargs)
        out = kwargs.get("out")
        result = func(*_plain_tree(args), **_plain_tree(kwargs))
        if out is not None and isinstance(result, np.ndarray) and not isinstance(out, tuple):
            return out
        return result if func in SHAPE_ONLY else _wrap(result)

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        return array.view(CaptureArray)  # 0-d results stay arrays: float() of them is caught

    # -- reading data to the host ------------------------------------------------------------------

    def __float__(self) -> float:
        if active_guard() is not None:
            _host_read_unless_stored("float() of an array")
        return float(self.view(np.ndarray))

    def __int__(self) -> int:
        if active_guard() is not None:
            _host_read_unless_stored("int() of an array")
        return int(self.view(np.ndarray))

    def __complex__(self) -> complex:
        if active_guard() is not None:
            host_read("complex() of an array")
        return complex(self.view(np.ndarray))

    def __bool__(self) -> bool:
        if active_guard() is not None:
            _host_read_unless_stored("bool() of an array (an `if`, `and`, `or` or `not` on array data)")
        return bool(self.view(np.ndarray))

    def __index__(self) -> int:
        if active_guard() is not None:
            host_read("an array used as a Python integer (a size, a range, an index)")
        return self.view(np.ndarray).__index__()

    def item(self, *args: Any) -> Any:
        if active_guard() is not None:
            host_read(".item()")
        return self.view(np.ndarray).item(*args)

    def tolist(self) -> Any:
        if active_guard() is not None:
            host_read(".tolist()")
        return self.view(np.ndarray).tolist()

    def tobytes(self, order: Any = "C") -> bytes:
        if active_guard() is not None:
            host_read(".tobytes()")
        return self.view(np.ndarray).tobytes(order)

    def __str__(self) -> str:
        if active_guard() is not None:
            host_read("str() (or printing) of an array")
        return str(self.view(np.ndarray))

    def __format__(self, spec: str) -> str:
        if active_guard() is not None:
            host_read("formatting an array (an f-string or format())")
        return format(self.view(np.ndarray), spec)

    def __repr__(self) -> str:
        if active_guard() is not None:  # debuggers and error messages call repr: describe, do not read
            return f"CaptureArray(shape={self.shape}, dtype={self.dtype}: values unavailable during capture)"
        return repr(self.view(np.ndarray))

    @property
    def flat(self) -> Any:
        if active_guard() is not None:
            host_read(".flat (element-wise iteration)")
        return self.view(np.ndarray).flat

    # -- indexing ------------------------------------------------------------------------------------

    def __getitem__(self, index: Any) -> Any:
        if active_guard() is not None:
            _check_index(index, "indexing")
        return _wrap(np.ndarray.__getitem__(self, _plain_tree(index)))

    def __setitem__(self, index: Any, value: Any) -> None:
        if active_guard() is not None:
            if _store_masked_scalar(self, index, value):
                return
            _check_index(index, "assignment")
            if isinstance(value, (list, tuple)):  # CuPy uploads the values: refused under capture
                refuse(FallbackReason.HOST_UPLOAD, "assigning a Python list or tuple uploads it (assign an array)")
        np.ndarray.__setitem__(self, _plain_tree(index), _plain(value))

    def __iter__(self) -> Iterator[Any]:
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        for i in range(self.shape[0]):
            yield self[i]

    def fill(self, value: Any) -> None:
        np.copyto(self.view(np.ndarray), _plain(value))

    # -- methods NumPy implements without ufuncs -------------------------------------------------------

    def nonzero(self) -> Any:
        if active_guard() is not None:
            refuse(FallbackReason.DATA_DEPENDENT_SHAPE, f".nonzero() ({SHAPE_HINT})")
        return self.view(np.ndarray).nonzero()

    def dot(self, *args: Any, **kwargs: Any) -> Any:
        if active_guard() is not None and not routed_product("dot"):
            refuse(FallbackReason.LIBRARY_CALL, f".dot() calls cuBLAS, {LIBRARY_HINT}", "numpy.dot")
        return _wrap(self.view(np.ndarray).dot(*_plain_tree(args), **kwargs))

    def compress(self, *args: Any, **kwargs: Any) -> Any:
        if active_guard() is not None:
            refuse(FallbackReason.DATA_DEPENDENT_SHAPE, f".compress() ({SHAPE_HINT})")
        return _wrap(self.view(np.ndarray).compress(*_plain_tree(args), **kwargs))


def _returns_arrays(name: str) -> Callable[..., Any]:
    """``ndarray.<name>`` with results that stay CaptureArrays (NumPy returns scalars there)."""
    method = getattr(np.ndarray, name)

    def wrapped(self: CaptureArray, *args: Any, **kwargs: Any) -> Any:
        return _wrap(method(self.view(np.ndarray), *_plain_tree(args), **_plain_tree(kwargs)))

    wrapped.__name__ = name
    return wrapped


# Reductions of float16 and arg-reductions come back as NumPy scalars from these methods: computed
# on the plain view and returned as (0-d) CaptureArrays, so a later float() is still refused.
for _name in ("argmax", "argmin", "take", "trace", "searchsorted", "choose", "sum", "prod", "mean", "std",
              "var", "min", "max", "all", "any", "cumsum", "cumprod", "round", "clip"):
    setattr(CaptureArray, _name, _returns_arrays(_name))


# -- the capture run -------------------------------------------------------------------------------------


class _HostBreaks:
    """PIECEWISE on the host: a graph-break op runs on plain arrays, as the GPU runs it eagerly."""

    def break_at(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with reads_allowed():
            result = fn(*_plain_tree(args), **_plain_tree(kwargs))
        leaves, _ = flatten(result, lambda v: isinstance(v, np.ndarray))
        if not leaves or not all(isinstance(leaf, np.ndarray) for leaf in leaves):
            raise CaptureError(
                f"graph_break op {getattr(fn, '__name__', fn)} returned {type(result).__name__}; it must return "
                "arrays (a host value would be frozen into the graph)"
            )
        return _wrap_tree(result)


def _wrap_tree(tree: Any) -> Any:
    leaves, spec = flatten(tree, lambda v: isinstance(v, np.ndarray))
    return unflatten(spec, [_wrap(leaf) for leaf in leaves])


def guarded(array: Any) -> Any:
    """``array`` as the capture run sees it: a CaptureArray view (no copy) of a NumPy array."""
    return array.view(CaptureArray) if type(array) is np.ndarray else array


@contextmanager
def refusing(piecewise: bool) -> Iterator[Any]:
    """Refusals on for this thread while the capture run executes (graph breaks run plain); yields the
    run's guard (``library_state`` once the run is over: whether the GPU's recording would hold some).

    Raises the first refusal when the run ends, also one the function caught and ignored, as an
    invalidated CUDA capture fails at its end whatever the function did with the error.
    """
    with guard_scope() as guard:
        try:
            with recording_breaks(_HostBreaks()) if piecewise else nullcontext():
                yield guard
        except RefusedOp:
            raise
        except Exception as err:
            if guard.first is not None:  # the function turned a refusal into another error
                raise RefusedOp(*guard.first) from err
            raise
    if guard.first is not None:
        raise RefusedOp(*guard.first)

