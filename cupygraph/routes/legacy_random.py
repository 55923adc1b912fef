"""Legacy global-generator draws routed to a ``cupygraph.random`` generator while a function is recorded.

``cupy.random.rand(3)``, ``np.random.normal(size=n)`` and the other module-level functions draw from
one global generator per device (CuPy: cuRAND's host API, or a seed kept on the host; NumPy: the
global ``RandomState``), which a graph cannot hold. While a function's warm-ups and capture run in a
thread with routing on, the guard that intercepts them (``backends/guards/cupy_legacy_random.py``,
``backends/guards/host_escapes.py`` on the host) hands each call from the user's code to a
``LegacyDraws`` of the recording, which draws the same distribution, shape and dtype from a
``cupygraph.random`` generator instead: its state lives on the device, so every replay of the graph
draws fresh numbers. The GPU router (``cupy_random.py``) and its host twin (``numpy_random.py``) share
this module: both route exactly the calls and arguments below, and refuse the rest.

Routed (CuPy's signatures, which take NumPy's arguments too):

* ``rand``, ``randn``, ``random_sample`` (``random``, ``ranf``, ``sample``), ``standard_normal``;
* ``normal``, ``uniform``, ``lognormal`` (parameters: numbers, or arrays of the recording's backend);
* ``randint`` and ``random_integers`` with integer bounds and an integer dtype;
* ``standard_exponential``, ``exponential`` with a number for ``scale``;
* ``choice`` without ``p``, ``permutation`` and ``shuffle`` of an int or an array (a random
  permutation: the order of one uniform float per element).

Not routed, refused as without routing: every other function (``gamma``, ``beta``, ``binomial``,
``poisson``, ... need more than a composition of uniform, normal and integer draws), ``seed`` (the
program's global state, which a graph cannot set at every replay), and calls whose arguments need
the host: lists or NumPy arrays on the GPU, array bounds of ``randint``, ``choice``'s ``p`` and
``exponential``'s array ``scale`` (CuPy checks their values on the host). ``NotRouted`` says why.

Seeding: each recording makes its generator (one per device) at its first routed draw, in a warm-up
(a draw first made in the capture run is refused: the generator's setup would be recorded into the
graph). Its seed is ``SeedSequence([s, crc32(module.qualname of the function)])``, where ``s`` is taken
from the library's global generator: CuPy's per-device ``RandomState`` hands it out as it hands out
the seeds of its own kernel-drawn distributions (``gamma``, ``beta``, ...), NumPy's global
``RandomState`` draws it. So a program that seeded ``cupy.random.seed(s)`` / ``np.random.seed(s)`` (or
``CUPY_SEED``) replays the same numbers run after run; an unseeded program's global generator has
fresh entropy, and so do its routed draws. The draws differ from the stream eager calls would give.
The warm-ups' and capture run's draws are given back (``random.draws_given_back``), so the first
replay draws what the generator drew first. ``size=None`` gives a 0-d array, as CuPy's legacy
functions do (NumPy's give a Python scalar).
"""

from __future__ import annotations

import math
import operator
import sys
import zlib
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from ..backends.guards.host_capturable import handed_back, plain_array
from ..backends.routing import NotRouted, note_routed
from ..frames import location_in_stack
from ..random import Generator

__all__ = ["ROUTED", "LegacyDraws"]

_NUMBERS = (int, float, np.integer, np.floating)


class _Source:
    """What a composition draws from: the recording's generator (made on demand, so a call refused for
    its arguments consumes no seed) and the backend's array module."""

    def __init__(self, router: LegacyDraws):
        self._router = router
        self.xp = router.xp

    @property
    def rng(self) -> Generator:
        return self._router.generator()

    def param(self, value: Any, what: str) -> Any:
        """A distribution parameter a route takes: a number, or an array of the recording's backend."""
        if self._router.is_array(value):
            return plain_array(value)
        if isinstance(value, _NUMBERS):
            return value
        raise NotRouted(f"its {what} is a {type(value).__name__}, host data a graph cannot hold")

    def array(self, value: Any, what: str) -> Any:
        """An array of the recording's backend with at least one axis (the input of a permutation)."""
        if self._router.is_array(value) and value.ndim >= 1:
            return plain_array(value)
        kind = "a 0-d array" if self._router.is_array(value) else f"a {type(value).__name__}"
        raise NotRouted(f"its {what} is {kind} (routed: an int, or an array of the backend with an axis)")

    def permuted_range(self, n: int) -> Any:
        """A uniformly random permutation of ``range(n)`` (int64): the order of n uniform floats."""
        return self.xp.argsort(plain_array(self.rng.random(n)))


def _integer(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise NotRouted(f"its {what} is a {type(value).__name__} (routed: Python or NumPy ints)")
    return int(value)


def _shape(size: Any, *params: Any) -> tuple[int, ...]:
    """The shape a draw makes: ``size``, or the parameters' broadcast shape where it is None."""
    broadcast = np.broadcast_shapes(*(np.shape(p) for p in params)) if params else ()
    if size is None:
        return broadcast
    shape = (operator.index(size),) if isinstance(size, (int, np.integer)) else tuple(operator.index(n) for n in size)
    if np.broadcast_shapes(shape, broadcast) != shape:
        raise ValueError(f"shape mismatch: parameters of shape {broadcast} cannot be broadcast to size {shape}")
    return shape


def _random_sample(d: _Source, size: Any = None, dtype: Any = float) -> Any:
    return handed_back(plain_array(d.rng.random(_shape(size), dtype)))


def _rand(d: _Source, *size: Any, dtype: Any = float) -> Any:
    return _random_sample(d, size, dtype)


def _standard_normal(d: _Source, size: Any = None, dtype: Any = float) -> Any:
    return handed_back(plain_array(d.rng.standard_normal(_shape(size), dtype)))


def _randn(d: _Source, *size: Any, dtype: Any = float) -> Any:
    return _standard_normal(d, size, dtype)


def _normal(d: _Source, loc: Any = 0.0, scale: Any = 1.0, size: Any = None, dtype: Any = float) -> Any:
    loc, scale = d.param(loc, "loc"), d.param(scale, "scale")
    z = plain_array(d.rng.standard_normal(_shape(size, loc, scale), dtype))
    return handed_back((z * scale + loc).astype(dtype, copy=False))


def _lognormal(d: _Source, mean: Any = 0.0, sigma: Any = 1.0, size: Any = None, dtype: Any = float) -> Any:
    mean, sigma = d.param(mean, "mean"), d.param(sigma, "sigma")
    z = plain_array(d.rng.standard_normal(_shape(size, mean, sigma), dtype))
    return handed_back(d.xp.exp(z * sigma + mean).astype(dtype, copy=False))


def _uniform(d: _Source, low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = float) -> Any:
    low, high = d.param(low, "low"), d.param(high, "high")
    u = plain_array(d.rng.random(_shape(size, low, high), dtype))
    return handed_back((low + u * (high - low)).astype(dtype, copy=False))


def _integer_dtype(dtype: Any) -> np.dtype:
    found: np.dtype = np.dtype(dtype)
    if found.kind not in "iu":
        raise NotRouted(f"its dtype is {found} (routed: integer dtypes)")
    return found


def _randint(d: _Source, low: Any, high: Any = None, size: Any = None, dtype: Any = int) -> Any:
    found = _integer_dtype(dtype)
    bounds = (_integer(low, "low"), None if high is None else _integer(high, "high"))
    return handed_back(plain_array(d.rng.integers(*bounds, size=_shape(size), dtype=found)))


def _random_integers(d: _Source, low: Any, high: Any = None, size: Any = None) -> Any:
    if high is None:
        low, high = 1, low
    bounds = (_integer(low, "low"), _integer(high, "high"))
    return handed_back(plain_array(d.rng.integers(*bounds, size=_shape(size), dtype=np.dtype(int), endpoint=True)))


def _standard_exponential(d: _Source, size: Any = None, dtype: Any = float) -> Any:
    u = plain_array(d.rng.random(_shape(size), dtype))
    return handed_back(-d.xp.log1p(-u))  # 1 - u is in (0, 1]: finite, as NumPy's -log(1 - random())


def _exponential(d: _Source, scale: Any = 1.0, size: Any = None, dtype: Any = float) -> Any:
    if not isinstance(scale, _NUMBERS):
        raise NotRouted(f"its scale is a {type(scale).__name__}, whose sign CuPy checks on the host "
                        "(routed: a number)")
    if scale < 0:
        raise ValueError("scale < 0")
    u = plain_array(d.rng.random(_shape(size), dtype))
    return handed_back((-d.xp.log1p(-u) * scale).astype(dtype, copy=False))


def _choice(d: _Source, a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Any:
    if p is not None:
        raise NotRouted("with p=, whose values CuPy checks on the host")
    values = None if isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)) else d.array(a, "a")
    if values is not None and values.ndim != 1:
        raise NotRouted(f"its a has {values.ndim} axes (routed: an int or a 1-d array)")
    population = int(a) if values is None else values.shape[0]
    if population <= 0:
        raise NotRouted("its population is empty")
    shape = _shape(size)
    if replace:
        index = plain_array(d.rng.integers(0, population, size=shape, dtype=np.dtype(np.int64)))
    else:
        if math.prod(shape) > population:
            raise ValueError("Cannot take a larger sample than population when 'replace=False'")
        index = d.permuted_range(population)[:math.prod(shape)].reshape(shape)
    if values is None:
        return handed_back(index)
    return handed_back(values[index.reshape(-1)].reshape(shape))  # (a 0-d index would give NumPy a scalar)


def _permutation(d: _Source, a: Any) -> Any:
    if isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)):
        return handed_back(d.permuted_range(int(a)))
    values = d.array(a, "argument")
    return handed_back(values[d.permuted_range(values.shape[0])])


def _shuffle(d: _Source, a: Any) -> None:
    values = d.array(a, "argument")
    values[...] = values[d.permuted_range(values.shape[0])]  # in place, as the legacy shuffle


ROUTED: dict[str, Callable[..., Any]] = {
    "rand": _rand, "randn": _randn, "random_sample": _random_sample, "random": _random_sample,
    "ranf": _random_sample, "sample": _random_sample, "standard_normal": _standard_normal, "normal": _normal,
    "lognormal": _lognormal, "uniform": _uniform, "randint": _randint, "random_integers": _random_integers,
    "standard_exponential": _standard_exponential, "exponential": _exponential, "choice": _choice,
    "permutation": _permutation, "shuffle": _shuffle,
}
"""The legacy module functions routed (by name, the same in ``cupy.random`` and ``np.random``)."""


def _name_of(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


class LegacyDraws:
    """One recording's routed legacy draws (a ``routing.Route``): a generator per device, made at the first
    routed draw and seeded from the library's global generator and the function's name (module docstring).

    ``global_seed()`` takes a seed from the library's global generator of the current device;
    ``capturing()`` says whether this is the capture run; ``device()`` names the current device."""

    def __init__(self, fn: Any, backend: str, xp: Any, is_array: Callable[[Any], bool],
                 global_seed: Callable[[], int], capturing: Callable[[], bool], device: Callable[[], int]):
        self.backend, self.xp, self.is_array = backend, xp, is_array
        self._global_seed, self._capturing, self._device = global_seed, capturing, device
        self._identity = zlib.crc32(_name_of(fn).encode())
        self._generators: dict[int, Generator] = {}

    def __call__(self, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        draw = ROUTED.get(label.rpartition(".")[2])
        if draw is None:
            raise NotRouted("")  # refused as without routing
        result = draw(_Source(self), *args, **kwargs)
        note_routed(f"cuRAND{location_in_stack(sys._getframe(0))}")  # the same label on both backends
        return result

    def generator(self) -> Generator:
        device = self._device()
        found: Optional[Generator] = self._generators.get(device)
        if found is None:
            if self._capturing():
                raise NotRouted("drawn first in the capture run, which would record its generator's setup: no "
                                "warm-up ran (num_warmups=0, or the call wrote into an array it reads by address)")
            seed = np.random.SeedSequence([self._global_seed(), self._identity])
            found = self._generators[device] = Generator(seed, backend=self.backend)
        return found
