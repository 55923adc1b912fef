"""``AdaptiveCUDAGraphWrapper``: the vLLM-style wrapper that captures only hot shapes (the seed's).

Everything it adds is the config's: ``capture_after``, ``min_replays_to_keep``, ``memory_budget``
and ``lfu`` eviction, applied by the graph cache; ``get_hot_shapes`` reads the cache's sightings
and ``prewarm`` captures through the wrapper's ``_capture``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Optional, Union

from ..backends import Backend
from ..cache import CUDAGraphEntry, GraphKey
from ..config.model import CUDAGraphConfig, CUDAGraphMode
from ..dispatch.context import cudagraph_context
from ..dispatch.descriptor import BatchDescriptor
from .options import ConfigLike
from .wrapper import CUDAGraphOptions, CUDAGraphWrapper


class AdaptiveCUDAGraphWrapper(CUDAGraphWrapper):
    """A ``CUDAGraphWrapper`` that captures only hot shapes and evicts cold ones first.

    Beyond the base wrapper: the seed's arguments ``min_replays_to_keep``, ``capture_after`` and
    ``memory_budget`` override the config's fields (None keeps them); without a ``config`` the
    default config with ``eviction="lfu"`` applies (the entry with the fewest replays goes first).
    ``get_hot_shapes`` reports the most used descriptors and ``prewarm`` captures shapes ahead of
    traffic.
    """

    def __init__(
        self,
        runnable: Callable[..., Any],
        runtime_mode: CUDAGraphMode,
        options: Optional[CUDAGraphOptions] = None,
        max_cached_graphs: Optional[int] = None,
        min_replays_to_keep: Optional[int] = None,
        *,
        capture_after: Optional[int] = None,
        memory_budget: Optional[int] = None,
        config: ConfigLike = None,
        backend: Optional[Backend] = None,
    ):
        self._adaptive_fields = dict(
            min_replays_to_keep=min_replays_to_keep, capture_after=capture_after, memory_budget=memory_budget,
            eviction="lfu" if config is None else None,
        )
        super().__init__(runnable, runtime_mode, options, max_cached_graphs, config=config, backend=backend)

    def _config(self, config: ConfigLike, **fields: Any) -> CUDAGraphConfig:
        return super()._config(config, **fields, **self._adaptive_fields)

    @property
    def capture_after(self) -> int:
        return self.registry.config.capture_after

    @property
    def min_replays_to_keep(self) -> int:
        return self.registry.config.min_replays_to_keep

    @property
    def memory_budget(self) -> Optional[int]:
        return self.registry.config.memory_budget

    def get_hot_shapes(self, top_k: int = 10) -> list[tuple[BatchDescriptor, int]]:
        """The ``top_k`` most used descriptors (eager sightings plus replays) with their counts."""
        return self.registry.get_hot_shapes(top_k)

    def prewarm(
        self, shapes: Iterable[Union[int, BatchDescriptor]], dummy_fn: Callable[[BatchDescriptor], Any]
    ) -> int:
        """Capture each shape now; ``dummy_fn(descriptor)`` returns the (persistent) arguments.

        The arguments may be a tuple (positional) or a single array. Returns how many were captured
        (a shape whose capture fails is remembered as failed, as in a call).
        """
        captured = 0
        for shape in shapes:
            descriptor = shape if isinstance(shape, BatchDescriptor) else BatchDescriptor(int(shape))
            key = GraphKey(descriptor, self.runtime_mode)
            if self.registry.holds(key):
                continue
            args = dummy_fn(descriptor)
            args = args if isinstance(args, tuple) else (args,)
            # Under the context the runnable would see at replay: layers may read it.
            with cudagraph_context(self.runtime_mode, descriptor), self.registry.family_lock:
                captured += isinstance(self._capture(key, args, {}), CUDAGraphEntry)
        return captured
