"""Random numbers that stay fresh inside CUDA graphs: the generator's state lives on the device.

``default_rng(seed)`` returns a ``Generator`` with NumPy's method names and arguments (``random``,
``standard_normal``, ``normal``, ``uniform``, ``integers``). On the GPU it is CuPy's
``Generator(Philox4x3210(seed))``: every draw is one kernel that reads and advances the state
array in device memory, so a captured graph advances it at every replay (and a ``while_loop``
body at every iteration) without any host work. CuPy's legacy ``cupy.random.*`` functions
(cuRAND's host API) cannot be captured; this can, and while ``jit`` records a function the legacy
calls it can compose are routed to a generator of this kind (``routes/legacy_random.py``). On the
host backend it is NumPy's ``default_rng(seed)`` (PCG64), with the same contract.

What is reproducible:

* the same seed and the same sequence of draws (methods, sizes, dtypes, in order) give the same
  numbers, whether the draws run eagerly or as graph replays: replay k continues the stream exactly
  where replay k-1 left it;
* two generators with one seed, used by the same sequence of calls, agree;
* a jitted function draws what calling it as it is the same number of times draws, for batches of
  a capture size (a replay of a padded batch draws for its padding rows too): the call that
  captures a key runs it as it is (``cache/first_call.py``), and the draws its warm-ups and capture
  run make are given back when the capture ends (``draws_given_back``: the state is copied before
  the first of them, 2 MiB on the GPU, and copied back), so its graph's replays continue the stream
  where that call left it.

What is not: the GPU (Philox) and host (PCG64) streams differ from each other and from
``numpy.random``; CuPy does not promise the same stream across versions; one generator shared by
graphs or threads that run at the same time on different streams races on its state (give each
stream its own generator). A generator created *inside* a captured function is re-seeded by
every replay (as a NumPy generator made inside the function would be): make it outside.

Deviation from NumPy: ``size=None`` returns a 0-d array (as CuPy does), never a Python scalar,
so a draw can stay inside a graph.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np

from .backends.capturing import stream_is_capturing
from .backends.guards.host_capturable import handed_back, plain_array
from .backends.holding import hold, holding_active

__all__ = ["Generator", "default_rng", "draws_given_back"]

_local = threading.local()


@contextmanager
def draws_given_back() -> Iterator[None]:
    """What this thread draws meanwhile from any ``Generator`` is given back when the block ends (a
    capture's warm-ups and capture run: ``cache/recording.py``): each generator's state is kept before
    its first draw here and put back at the end, also when the block raises."""
    saved: dict[int, tuple[Generator, Any]] = {}
    previous = getattr(_local, "saved", None)
    _local.saved = saved
    try:
        yield
    finally:
        _local.saved = previous
        for generator, state in saved.values():
            generator._put_back(state)

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_BACKENDS = ("auto", "cupy", "host")


def _float_dtype(dtype: Any, method: str) -> np.dtype:
    found: np.dtype = np.dtype(dtype)
    if found not in _FLOATS:
        raise TypeError(f"cupygraph.random: {method} supports float32 and float64, got dtype {found}")
    return found


def _draw_shape(method: str, size: Any, *params: Any) -> Any:
    """The shape a draw with array parameters makes: ``size``, which must hold their broadcast shape (NumPy's
    rule: a smaller ``size`` would draw once per element of it and reuse each draw across the parameters'
    extra axes), or that broadcast shape where ``size`` is None."""
    broadcast = np.broadcast_shapes(*(np.shape(p) for p in params))
    if size is None:
        return broadcast
    shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    try:
        fits = np.broadcast_shapes(shape, broadcast) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"cupygraph.random: {method} got size={shape} but its parameters broadcast to {broadcast}; "
                         "size must be that shape or one they broadcast to (NumPy's rule)")
    return size


def _bound(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"cupygraph.random: integers needs Python ints for {name} (CuPy's generator takes no "
                        f"array bounds), got {type(value).__name__}")
    return int(value)


class Generator:
    """Draws from one seeded stream; see the module docstring for what is reproducible.

    Contract: on the GPU the state is a device array made when the generator is made, on the
    device current then; draws must run on that device. A graph that draws from the generator
    holds it (and its state) for as long as the graph lives.
    """

    def __init__(self, seed: Any = None, *, backend: str = "auto", device: Optional[int] = None):
        if backend not in _BACKENDS:
            raise ValueError(f"cupygraph.random: unknown backend {backend!r}; valid: {', '.join(_BACKENDS)}")
        if backend == "auto":
            from .backends import gpu_available

            backend = "cupy" if gpu_available() else "host"
        self.backend = backend
        self.device_id = -1
        if backend == "host":
            self._gen: Any = np.random.default_rng(seed)
            return
        import cupy

        with cupy.cuda.Device(device):
            self.device_id = cupy.cuda.Device().id
            self._gen = cupy.random.Generator(cupy.random.Philox4x3210(seed))

    def __repr__(self) -> str:
        where = "host (NumPy PCG64)" if self.backend == "host" else f"cuda:{self.device_id} (CuPy Philox4x3210)"
        return f"cupygraph.random.Generator({where})"

    # -- the GPU side --------------------------------------------------------------------------------

    def held_regions(self) -> list[tuple[int, int, str]]:
        state = getattr(getattr(self._gen, "bit_generator", None), "_state", None)
        if state is None or not getattr(state, "nbytes", 0):
            return []
        return [(int(state.data.ptr), int(state.nbytes), "a cupygraph.random generator's state, held by the graph")]

    def _enter(self) -> None:
        if self.backend == "cupy":
            import cupy

            current = cupy.cuda.Device().id
            if current != self.device_id:
                raise ValueError(f"cupygraph.random: this generator's state lives on cuda:{self.device_id} but the "
                                 f"current device is cuda:{current}; draw under cupy.cuda.Device({self.device_id}) "
                                 "or make one generator per device")
        if holding_active():
            hold(self)
        saved: Optional[dict[int, tuple[Generator, Any]]] = getattr(_local, "saved", None)
        if saved is not None and id(self) not in saved:
            state = self._kept()
            if state is not None:
                saved[id(self)] = (self, state)

    def _kept(self) -> Any:
        """The state as it is now, to be put back by ``_put_back``; None on a capturing stream, where a
        draw only records a kernel (and a copy would be recorded too, not made)."""
        if self.backend == "host":
            return self._gen.bit_generator.state
        import cupy

        if stream_is_capturing(cupy.cuda.get_current_stream()):
            return None
        return self._gen.bit_generator._state.copy()  # ordered before the draw, on the current stream

    def _put_back(self, state: Any) -> None:
        if self.backend == "host":
            self._gen.bit_generator.state = state
            return
        import cupy

        with cupy.cuda.Device(self.device_id):  # on the current stream: after the draws it undoes
            self._gen.bit_generator._state[...] = state

    def _done(self, value: Any, out: Any = None) -> Any:
        if out is not None:
            return out
        if self.backend == "host":
            value = np.asarray(value)
            return handed_back(value)
        return value

    # -- NumPy's methods -----------------------------------------------------------------------------

    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        """Floats uniform on [0, 1)."""
        dtype = _float_dtype(dtype, "random")
        if out is not None and size is None:
            size = out.shape  # NumPy's rule; CuPy would draw one value and broadcast it into out
        self._enter()
        return self._done(self._gen.random(size=size, dtype=dtype, out=plain_array(out)), out)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Any:
        """Floats from N(0, 1)."""
        dtype = _float_dtype(dtype, "standard_normal")
        if out is not None and size is None:
            size = out.shape
        self._enter()
        return self._done(self._gen.standard_normal(size=size, dtype=dtype, out=plain_array(out)), out)

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None, dtype: Any = np.float64) -> Any:
        """``loc + scale * standard_normal``; ``size=None`` takes the broadcast shape of loc and scale."""
        size = _draw_shape("normal", size, loc, scale)
        return self._done(loc + scale * self.standard_normal(size, dtype))

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = np.float64) -> Any:
        """``low + (high - low) * random``: uniform on [low, high) up to rounding at ``high``."""
        size = _draw_shape("uniform", size, low, high)
        return self._done(low + (high - low) * self.random(size, dtype))

    def integers(self, low: Any, high: Any = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> Any:
        """Integers uniform on [low, high) (``endpoint=True``: [low, high]); ``high=None``: [0, low)."""
        found = np.dtype(dtype)
        if found.kind not in "iu":
            raise TypeError(f"cupygraph.random: integers needs an integer dtype, got {found}")
        low = _bound(low, "low")
        high = None if high is None else _bound(high, "high")
        self._enter()
        return self._done(self._gen.integers(low, high, size=size, dtype=found, endpoint=endpoint))


def default_rng(seed: Any = None, *, backend: str = "auto", device: Optional[int] = None) -> Generator:
    """A ``Generator`` seeded with ``seed`` (an int, a sequence of ints, a ``numpy.random.SeedSequence``
    or None for fresh entropy). ``backend``: "cupy" (device state), "host" (NumPy), or "auto" (the GPU
    where one is usable, as ``jit``'s backend="auto" chooses)."""
    return Generator(seed, backend=backend, device=device)
