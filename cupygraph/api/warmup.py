"""What ``GraphedFunction.warmup`` captures: the example call, the sizes in their order, a call per size,
and when to stop (``budget_s``).

Without a budget every size is captured, largest first: the smaller graphs then reuse its pool blocks.
Under a budget the most used sizes go first (by the function's traffic; largest first among equals).

A warm-up under a time budget starts a capture only while less than ``budget_s`` seconds have passed
since it began (on ``clock``, monotonic), so it may end past the budget by one capture; ``budget_s=0``
captures nothing. The sizes it did not reach are left alone: nothing marks them, and each is captured
by its first call, as without ``warmup``.
"""

from __future__ import annotations

import inspect
import math
import numbers
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Optional, Union

from ..cache import RAISED, Eager, SizeHistogram
from ..config.defaults import env_flag
from ..config.modes import short_repr
from ..config.values import is_bool
from ..errors import CaptureError, InputMismatchError
from ..logs import logger
from .arguments import ArraySpec

clock: Callable[[], float] = time.perf_counter
"""The monotonic clock a warm-up's budget is read on (a test may replace it, and must restore it)."""

Template = tuple[tuple[Any, ...], dict[str, Any]]
"""A call's arguments for a later warm-up: copied arrays as ``ArraySpec``, the rest as they were."""


def remember_call(args: tuple[Any, ...], kwargs: dict[str, Any], copied: Sequence[int]) -> Template:
    """The call's arguments for a later ``warmup()``, without holding the caller's data: copied
    arrays become (shape, dtype) specs; constants (captured by address) are kept."""
    positions = set(copied)
    return tuple(ArraySpec(a.shape, a.dtype) if i in positions else a for i, a in enumerate(args)), kwargs


def example_call(fn: Callable[..., Any], example_args: tuple[Any, ...], remembered: Optional[Template],
                 batch_argnums: Sequence[int]) -> Template:
    """The call ``warmup`` of ``fn`` (a jitted function) resizes: the examples given, else the last call's;
    checked for batch axes, and the examples against ``fn``'s parameters."""
    name = fn.__name__
    if example_args:
        _check_examples_fit(fn, example_args)
        template: Template = (example_args, {})
    elif remembered is not None:
        template = remembered
    else:
        raise ValueError(f"{name}.warmup() needs example arguments before the first call")
    args = template[0]
    for i in batch_argnums:
        if i >= len(args) or not hasattr(args[i], "shape"):
            raise InputMismatchError(
                f"{name}.warmup(): argument {i} is in batch_argnums but the examples give "
                f"{'nothing' if i >= len(args) else type(args[i]).__name__} there"
            )
    return template


def _check_examples_fit(fn: Callable[..., Any], example_args: tuple[Any, ...]) -> None:
    """A TypeError before anything is captured where the examples could not call ``fn``: otherwise every
    size's capture would fail inside with the function's own TypeError, and each key be marked failed."""
    try:
        signature = inspect.signature(fn)  # the function's own: jit's wrapper sets __wrapped__
    except (TypeError, ValueError):  # no signature Python can read (a ufunc): the captures will tell
        return
    try:
        signature.bind(*example_args)
    except TypeError as err:
        raise TypeError(f"{fn.__name__}.warmup(): the example arguments do not fit {fn.__name__}{signature}: {err}; "
                        f"give the positional arguments of one call") from None


def calls_per_size(template_args: tuple[Any, ...], batch_argnums: Sequence[int], sizes: Sequence[int], xp: Any,
                   pad_value: Union[int, float], pad_mode: str = "constant") -> Iterator[tuple[int, tuple[Any, ...]]]:
    """For each size, the example call with its batched arguments resized: filled with ``pad_value``,
    or under ``pad_mode="edge"`` with the example's rows, its last one repeated (an example known only
    by its shape, the last call's, is filled with ``pad_value``)."""
    for size in sizes:
        args = [xp.zeros(a.shape, dtype=a.dtype) if isinstance(a, ArraySpec) else a for a in template_args]
        for i in batch_argnums:
            like = template_args[i]
            rows = min(size, like.shape[0]) if pad_mode == "edge" and not isinstance(like, ArraySpec) else 0
            args[i] = xp.full((size, *like.shape[1:]), pad_value, dtype=like.dtype)
            if rows:
                args[i][:rows] = like[:rows]
                args[i][rows:] = like[rows - 1]
        yield size, tuple(args)


def checked_budget(name: str, budget_s: Any) -> Optional[float]:
    """``budget_s`` in seconds (None: no budget); an error naming it when it is no number of seconds."""
    if budget_s is None:
        return None
    if isinstance(budget_s, bool) or not isinstance(budget_s, numbers.Real):
        raise TypeError(f"{name}.warmup(): budget_s must be a number of seconds, 0 or more (None: no budget); "
                        f"got {type(budget_s).__name__} {short_repr(budget_s)}")
    seconds = float(budget_s)
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{name}.warmup(): budget_s must be 0 or more seconds (None: no budget), got {budget_s!r}")
    return seconds


def most_used_first(sizes: Iterable[int], traffic: Optional[SizeHistogram],
                    padded: Callable[[int], Optional[int]]) -> list[int]:
    """``sizes`` (a warm-up's batch sizes), the most used first: by the calls of ``traffic`` that the graph
    each one captures would serve (real sizes that pad to the same capture size), the larger first among
    equals. Without traffic (or None) that is largest first, which lets the smaller graphs reuse its pool
    blocks."""
    served: Counter[int] = Counter()
    for rows, calls in traffic.items() if traffic is not None else ():
        to = padded(rows)
        if to is not None:
            served[to] += calls
    return sorted(sizes, key=lambda size: (-served[padded(size) or size], -size))


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar on a terminal, otherwise nothing (logs and CI stay clean)."""
    if not enabled or total <= 1 or not sys.stderr.isatty() or not env_flag("CUPYGRAPH_PROGRESS", default=True):
        return None
    from tqdm import tqdm  # a hard dependency (setup.cfg); imported here to keep `import cupygraph` light

    return tqdm(total=total, desc=desc, unit="graph", leave=False)


def capture_each(name: str, calls: Iterable[tuple[int, tuple[Any, ...]]], sizes: Sequence[int],
                 resolve: Callable[[tuple[Any, ...]], tuple[Any, bool]], *, raises: bool, progress: bool,
                 budget_s: Optional[float] = None) -> int:
    """Capture ``calls`` ((size, arguments), one per size of ``sizes``, in order) through ``resolve`` (which
    says what serves it and whether it captured now), none started once ``budget_s`` is spent; return how
    many it captured. A key that runs eagerly is logged, or, where the function raised under
    ``on_capture_error="raise"``, an error naming the size. The progress bar shows what is left."""
    if not is_bool(progress):
        raise TypeError(f"{name}.warmup(): progress must be True or False, got {type(progress).__name__} "
                        f"{short_repr(progress)}")
    start = clock()
    bar = progress_bar(len(sizes), f"capturing {name}", bool(progress))
    pending = list(sizes)
    captures = 0
    calls = iter(calls)  # arguments made only for the sizes captured now
    try:
        while pending:
            if budget_s is not None and clock() - start >= budget_s:
                logger.info("warmup of %s(): budget_s=%g spent after %d of %d sizes; %s captured on first call",
                            name, budget_s, len(sizes) - len(pending), len(sizes), _listed(pending))
                if bar is not None:
                    bar.set_postfix_str(f"budget spent: {_listed(pending)} deferred to first call")
                break
            if bar is not None:
                bar.set_postfix_str(f"{captures} captured; left: {_listed(pending)}")
            size, args = next(calls)
            found, captured = resolve(args)
            captures += captured
            pending.pop(0)
            if isinstance(found, Eager):
                if found.failure == RAISED and raises:
                    raise CaptureError(f"warmup of {name}() size {size}: {found}")
                logger.info("warmup of %s() size %d: %s", name, size, found)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return captures


def _listed(sizes: Sequence[int]) -> str:
    shown = ", ".join(map(str, sizes[:6]))
    return f"{len(sizes)} size{'' if len(sizes) == 1 else 's'} ({shown}{', ...' if len(sizes) > 6 else ''})"
