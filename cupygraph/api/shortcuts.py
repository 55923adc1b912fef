"""The fast path's shortcuts: which entry a known call signature replays, found in a few operations.

The slow path classifies a call once and hands back a ``Shortcut``; later calls of the same shapes,
dtypes, static values and constant set find it here without classification, string building or
locks (the JAX ``cache_miss`` / fast path split).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..cache import CUDAGraphEntry, compared_exactly, keyable
from ..logs import logger

SHORTCUTS_LIMIT = 4096
"""Shortcuts kept per function; they start over beyond (whatever callers pass, memory is bounded)."""


def publisher(function: Any) -> Callable[[Any], None]:
    """What makes a record (or None) the compiled replay ``function`` tries first (``FastFunction``),
    holding the function weakly: its shortcuts must not keep it alive."""
    ref = weakref.ref(function)

    def publish(record: Any) -> None:
        f = ref()
        if f is not None:
            f.record = record

    return publish


class Shortcut:
    """How a call signature maps onto an entry: which arguments are copied in and how.

    The fast path counts its calls of this shortcut (all with ``rows`` real rows) on the entry
    (``ReplayCounts.hits``), which the statistics read, so it builds no keys and takes no other lock.
    """

    __slots__ = ("batched", "compiled_at", "constants_token", "entry", "leading", "mode_name", "rows", "whole")

    def __init__(self, entry: CUDAGraphEntry, mode_name: str, batched: tuple[int, ...], whole: tuple[int, ...]):
        self.entry, self.mode_name, self.batched, self.whole = entry, mode_name, batched, whole
        self.rows = 0
        self.compiled_at = -1
        """The family generation a compiled record of this shortcut was last asked for at
        (``Shortcuts.compile``): at most one try per shortcut and generation."""
        self.constants_token = entry.constants_token
        """The entry's constant binding this shortcut was made under (``CUDAGraphEntry.rebind_constants``)."""
        self.leading = len(batched) if batched == tuple(range(len(batched))) and not whole else 0
        """When the batched arrays are the first arguments and nothing is copied whole: how many
        (the fast path then takes ``args[:leading]`` instead of building lists)."""


class _Retired:
    """What a dropped shortcut points at: an entry that is never alive."""

    alive = False
    constants_token = None


RETIRED = _Retired()


class Shortcuts:
    """Shortcuts by call key, valid for one set of constant arguments (the current one)."""

    def __init__(self, array_type: type[Any], constant_argnums: Sequence[int],
                 publish: Callable[[Any], None] = lambda record: None):
        self._publish = publish
        """Receives the compiled record its function tries first, or None (``compile``, ``_retire``)."""
        self._array_type = array_type
        self._const = frozenset(constant_argnums)
        self._positions = tuple(sorted(self._const))
        self._constants_now: Optional[tuple[Any, ...]] = None
        self._by_key: dict[tuple[Any, ...], Shortcut] = {}
        self._last: tuple[Any, Any, Optional[Shortcut]] = ((), None, None)
        """(shape, dtype, shortcut) of the last single-array shortcut ``find`` returned."""
        self._record_shortcut: Optional[Shortcut] = None
        """The shortcut whose compiled record (``backends/fastpath/record.py``) the function tries before ``find``
        (the record itself is the function's: ``FastFunction.record``)."""

    def key(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """What a shortcut is found by: shapes and dtypes of the arrays, typed static values.

        Constant arguments are not part of it: a shortcut is only looked up while the constants are
        the very objects of the current constant set, which identity checks cheaply. The array
        type is exact: a subclass (a masked array) is unhashable here and takes the slow path,
        which checks it.
        """
        array_type = self._array_type
        # Static values carry their type and key as the slow path keys them (``keyable``): 1, 1.0 and True,
        # (2,) and (2.0,), 0.0 and -0.0 are equal but trace different graphs.
        if not self._const:
            return tuple((a.shape, a.dtype) if type(a) is array_type else (type(a), keyable(a)) for a in args)
        const = self._const
        return (len(args), *(
            (a.shape, a.dtype) if type(a) is array_type else (type(a), keyable(a))
            for i, a in enumerate(args) if i not in const
        ))

    def find(self, args: tuple[Any, ...]) -> Optional[Shortcut]:
        """The shortcut for this call, or None (new signature, other constants, unhashable value)."""
        positions = self._positions
        if not positions and len(args) == 1:
            (a,) = args  # key()'s common case inlined: one call less on every replay
            if type(a) is self._array_type:
                shape, dtype = a.shape, a.dtype
                last = self._last
                # The last shortcut found, compared without hashing (a dtype's hash is not cached). A
                # shortcut dropped since points at RETIRED: the caller then takes the slow path.
                if last[1] is dtype and last[0] == shape:
                    return last[2]
                shortcut = self._by_key.get(((shape, dtype),))
                if shortcut is not None and shortcut.entry.alive:  # (a retired one, or a gone entry's, is not kept)
                    self._last = (shape, dtype, shortcut)
                return shortcut
        if positions:
            current = self._constants_now
            # Identity, not equality: the slow path keys constants by address, shape, strides and
            # dtype; the same objects cannot have changed any of those.
            if (current is None or len(args) <= positions[-1]
                    or not all(map(operator.is_, map(args.__getitem__, positions), current))):
                return None
        try:
            return self._by_key.get(self.key(args))
        except TypeError:  # an unhashable argument: the slow path explains what is wrong
            return None

    def remember(self, args: tuple[Any, ...], shortcut: Shortcut) -> None:
        """Keep ``shortcut`` under this call's key and constant set."""
        positions = self._positions
        if positions:
            constants = tuple(args[i] for i in positions)
            current = self._constants_now
            if current is None or not all(map(operator.is_, constants, current)):
                # A new constant set (new weights): shortcuts of the old set no longer apply. The set is
                # held strongly so its identity stays meaningful; it is replaced by the next one.
                self._drop_all()
                self._constants_now = constants
        if len(self._by_key) >= SHORTCUTS_LIMIT:
            self._drop_all()
        try:
            key = self.key(args)
            old = self._by_key.get(key)
            if old is not None and old is not shortcut:  # replaced (its entry went): its calls counted first
                self._retire(old)
            self._by_key[key] = shortcut
            # A find racing a retire may have kept a retired shortcut as the last one: the slow call that
            # follows comes here and forgets it.
            self._last = ((), None, None)
        except TypeError:
            pass  # an unhashable static value: this call stays on the slow path

    def signature(self, shortcut: Shortcut, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """What each position of a call of ``shortcut`` (like ``args``) must be, for its compiled record: the
        index of an array among the bound ones (batched, then whole), ``("same", object)`` for a constant
        (the current set's very object, as ``find`` checks), ``("equal", type, value)`` for a static value
        (its key)."""
        index = {position: i for i, position in enumerate((*shortcut.batched, *shortcut.whole))}
        for p, a in enumerate(args):
            if p not in index and p not in self._const and not compared_exactly(a):
                # Equal to values that trace otherwise in a way the record's comparison cannot tell (a NumPy
                # float's zero sign, a frozenset's item types): such calls keep to ``find``, which keys them
                # as ``keyable`` does.
                raise ValueError(f"static argument {p} ({type(a).__name__}) equals values that trace otherwise")
        return tuple(index[p] if p in index else ("same", a) if p in self._const else ("equal", type(a), a)
                     for p, a in enumerate(args))

    def compile(self, shortcut: Shortcut, lock: Any, generation: int, args: tuple[Any, ...]) -> None:
        """Ask for the compiled record of ``shortcut``'s calls (like ``args``), once per shortcut and family
        ``generation`` (after a steady call: one that changed nothing a record describes); the newest one
        given is the one tried first (one steady signature is served by it; others by ``find``). Under
        the lock."""
        shortcut.compiled_at = generation
        try:
            made = shortcut.entry.fast_record(shortcut, lock, self.signature(shortcut, args))
        except Exception as err:  # the call itself succeeded: it must not fail for want of a faster path
            logger.debug("cupygraph: no compiled replay for this shortcut: %s", err, exc_info=True)
            return
        if made is not None:
            self._record_shortcut = shortcut
            self._publish(made)
        elif self._record_shortcut is shortcut:  # its record describes what changed since: tried for nothing
            self._record_shortcut = None
            self._publish(None)

    def _drop_all(self) -> None:
        """Forget every shortcut. A caller of the fast path may have found one before taking the family
        lock: pointed at ``RETIRED``, it takes the slow path."""
        for shortcut in self._by_key.values():
            self._retire(shortcut)
        self._by_key.clear()

    def _retire(self, shortcut: Shortcut) -> None:
        self._last = ((), None, None)  # never found again, not even by the last-found check
        if self._record_shortcut is shortcut:  # (its record would hand its calls back: the entry's generation moved)
            self._record_shortcut = None  # and nothing holds the entry's counts for it any more
            self._publish(None)
        shortcut.entry = RETIRED  # type: ignore[assignment]

    def clear(self, constants: bool = False) -> None:
        """Forget every shortcut (an entry left the registry); with ``constants``, the constant set too.
        Called, like every change of the cache, under the family lock."""
        self._drop_all()
        if constants:
            self._constants_now = None
