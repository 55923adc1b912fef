"""What ``GraphedFunction.warmup`` captures: the example call, the sizes, and a call per size."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Optional, Union

from ..cache import RAISED, Eager
from ..errors import CaptureError, InputMismatchError
from ..logs import logger
from .arguments import ArraySpec

Template = tuple[tuple[Any, ...], dict[str, Any]]
"""A call's arguments for a later warm-up: copied arrays as ``ArraySpec``, the rest as they were."""


def remember_call(args: tuple[Any, ...], kwargs: dict[str, Any], copied: Sequence[int]) -> Template:
    """The call's arguments for a later ``warmup()``, without holding the caller's data: copied
    arrays become (shape, dtype) specs; constants (captured by address) are kept."""
    positions = set(copied)
    return tuple(ArraySpec(a.shape, a.dtype) if i in positions else a for i, a in enumerate(args)), kwargs


def example_call(name: str, example_args: tuple[Any, ...], remembered: Optional[Template],
                 batch_argnums: Sequence[int]) -> Template:
    """The call ``warmup`` resizes: the examples given, else the last call's; checked for batch axes."""
    if example_args:
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


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar on a terminal, otherwise nothing (logs and CI stay clean)."""
    if not enabled or total <= 1 or not sys.stderr.isatty() or os.environ.get("CUPYGRAPH_PROGRESS") == "0":
        return None
    from tqdm import tqdm  # a hard dependency (setup.cfg); imported here to keep `import cupygraph` light

    return tqdm(total=total, desc=desc, unit="graph", leave=False)


def capture_each(name: str, calls: Iterable[tuple[int, tuple[Any, ...]]], count: int,
                 resolve: Callable[[tuple[Any, ...]], tuple[Any, bool]], *, raises: bool, progress: bool) -> int:
    """Capture each of ``count`` ``calls`` (size, arguments) through ``resolve`` (which says what serves
    it and whether it captured now); return how many it captured. A key that runs eagerly is logged,
    or, where the function raised under ``on_capture_error="raise"``, an error naming the size."""
    bar = progress_bar(count, f"capturing {name}", progress)
    captures = 0
    try:
        for size, args in calls:
            found, captured = resolve(args)
            captures += captured
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
