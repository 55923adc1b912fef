"""cuFFT plans for graphs: made in the family's pool, held by the recording that uses them.

A cuFFT kernel in a graph reads its plan's internal memory and writes its work area at fixed
addresses. CuPy keeps plans in a per-thread, per-device LRU cache (``cupy.fft.config.
get_plan_cache()``): a capture that took a plan from there would use memory the cache frees when
the plan leaves it (``clear()``, LRU eviction after 16 other sizes, a memory limit), and replays
would then write into whatever reuses it. So during warm-up and capture the function sees an
empty cache of its own: every plan it uses is made there, by the warm-up, with its work area in
the family's pool (the warm-up runs under the family's allocator), and the recording holds it
until it is released. The caller's cached plans are put back afterwards, in their LRU order.

CuPy's cache object cannot be replaced (it lives in a Cython thread-local), so the swap happens
in place: the caller's plans are taken out (and kept alive here), the cache is made unlimited so
nothing the function makes is evicted before the capture ends, and the caller's size limits are
restored with the plans. The cache's hit and miss counters are not restored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["cached_plan_work_areas", "is_cufft_kernel", "isolated_plan_cache", "plan_work_areas"]


def _plan_cache() -> Any:
    try:
        from cupy.fft._cache import get_plan_cache
    except ImportError:  # a CuPy without cuFFT support: nothing to isolate
        return None
    return get_plan_cache()


@contextmanager
def isolated_plan_cache(held: list[Any]) -> Iterator[None]:
    """Run the body with an empty cuFFT plan cache for the current thread and device.

    On exit the plans the body put into the cache are appended to ``held`` (the caller keeps
    them alive for as long as a graph may launch their kernels) and the caller's plans and
    limits are back in place.
    """
    cache = _plan_cache()
    if cache is None:
        yield
        return
    size, memsize = cache.get_size(), cache.get_memsize()
    # Most recently used first; each node's plan is kept alive here while it is out of the cache.
    saved = [(key, node.plan) for key, node in cache]
    cache.set_size(-1)
    cache.set_memsize(-1)
    for key, _ in saved:
        del cache[key]
    try:
        yield
    finally:
        made = [(key, node.plan) for key, node in cache]
        for key, _ in made:
            del cache[key]
        for key, plan in reversed(saved):  # least recently used first: the order comes back
            cache[key] = plan
        cache.set_memsize(memsize)
        cache.set_size(size)
        held.extend(plan for _, plan in made)


def plan_work_areas(plans: list[Any]) -> Iterator[tuple[int, int]]:
    """(address, size) of each plan's work area (one per device for multi-GPU plans)."""
    for plan in plans:
        area = getattr(plan, "work_area", None)
        for pointer in area if isinstance(area, list) else [area]:
            if pointer is not None and int(getattr(pointer, "ptr", 0)):
                yield int(pointer.ptr), int(pointer.mem.size)


def cached_plan_work_areas() -> list[tuple[int, int]]:
    """(address, size) of the work areas of the plans now in CuPy's cache (thread, device)."""
    cache = _plan_cache()
    return [] if cache is None else list(plan_work_areas([node.plan for _, node in cache]))


def is_cufft_kernel(name: str) -> bool:
    """Whether a kernel name is one of cuFFT's (its other addresses are the plan's own memory)."""
    return "fft" in name.lower()
