"""``StreamDispatcher``: independent requests on different CUDA streams, so their graphs overlap.

An adapter over ``jit``: one ``GraphedFunction`` per stream, each deciding through this dispatcher
(the seed makes it a ``CudagraphDispatcher``) and keeping its own graphs.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ..cache import CUDAGraphStats
from ..compat.dispatcher import CudagraphDispatcher
from ..config.model import CUDAGraphConfig
from ..dispatch.policy import DispatchPolicy
from .jit import ConfigLike, GraphedFunction, resolve_config


class StreamDispatcher(CudagraphDispatcher):
    """Dispatches independent calls of one function to ``num_streams`` streams.

    Each stream has its own graphed instance of ``eager_runner`` (own graphs, static buffers and
    memory pool): one executable graph never runs concurrently with itself, while graphs on
    different streams overlap on the GPU. Every instance decides through this dispatcher: its
    keys and the ``policy`` given here (a policy that vetoes a batch makes every stream run it
    eagerly), and its ``dispatch_stats`` count the runners' decisions.

    Contract (ordering): every request's stream first waits for the work the caller enqueued on
    its current stream before the request was submitted; ``run_batch`` returns after the caller's
    stream has been made to wait for every request, so results are ready for work enqueued on the
    caller's stream afterwards. Results are owned by the caller (``output_mode="copy"``).
    """

    def __init__(
        self,
        eager_runner: Callable[..., Any],
        num_streams: int = 2,
        config: ConfigLike = None,
        policy: Optional[DispatchPolicy] = None,
        **jit_options: Any,
    ):
        if isinstance(num_streams, bool) or not isinstance(num_streams, int) or num_streams < 1:
            raise ValueError(f"num_streams must be a positive integer, got {num_streams!r}")
        shared = sorted({"dispatcher", "registry"} & set(jit_options))
        if shared:
            raise TypeError(
                f"StreamDispatcher got {shared[0]}=: its runners decide through the StreamDispatcher itself "
                f"and each keeps its own registry; pass policy= (and config=) instead"
            )
        resolved: CUDAGraphConfig = resolve_config(config)
        super().__init__(resolved, policy)
        self.initialize_cudagraph_keys(resolved.mode, resolved.uniform_decode_query_len)
        self.eager_runner = eager_runner
        self.num_streams = num_streams
        # Every runner decides through this dispatcher (its keys, its policy); each keeps its own graphs.
        self.runners = [
            GraphedFunction(eager_runner, config=resolved, dispatcher=self, **jit_options) for _ in range(num_streams)
        ]
        backend = self.runners[0].backend
        self._gpu = backend.name == "cupy"
        if self._gpu:
            import cupy

            self.streams: list[Any] = [cupy.cuda.Stream(non_blocking=True) for _ in range(num_streams)]
        else:
            self.streams = [None] * num_streams
        self._round_robin = itertools.count()
        # Not ``_lock``: that is the dispatcher's re-entrant lock, which its own methods re-acquire.
        self._stream_lock = threading.Lock()

    def _select_stream(self, key: Any = None) -> int:
        """Stream index for a request: round robin, so consecutive independent calls overlap."""
        with self._stream_lock:
            return next(self._round_robin) % self.num_streams

    def run_batch(self, requests: Sequence[Sequence[Any]]) -> list[Any]:
        """Run independent requests (each a tuple of arguments) spread over the streams."""
        if not self._gpu:
            return [self.runners[self._select_stream()](*args) for args in requests]
        import cupy

        caller = cupy.cuda.get_current_stream()
        ready = caller.record()  # everything the caller enqueued before these requests
        results, used = [], set()
        for args in requests:
            index = self._select_stream()
            stream = self.streams[index]
            stream.wait_event(ready)
            with stream:
                results.append(self.runners[index](*args))
            used.add(index)
        for index in used:
            caller.wait_event(self.streams[index].record())
        return results

    def __call__(self, *args: Any) -> Any:
        return self.run_batch([args])[0]

    def stats(self) -> dict[str, Any]:
        """The dispatch counters; the graph counters summed over the streams' runners (which hold the
        graphs: the dispatcher's own registry is unused here); and each stream's under ``streams``."""
        merged = super().stats()
        per_stream = [runner.stats() for runner in self.runners]
        totals = CUDAGraphStats()
        for stats in per_stream:
            totals.merge(stats)
        merged.update(totals.to_dict())
        merged["streams"] = [stats.to_dict() for stats in per_stream]
        return merged

    def clear_cache(self) -> None:
        super().clear_cache()
        for runner in self.runners:
            runner.clear()
