"""Frameworks and peer competitors of ``tools/bench.py``: CuPy, PyTorch and JAX side by side.

A framework adapter knows how to upload NumPy data, wait for a result (``finish``), read it back
(``to_numpy``) and time a round of calls on the GPU (``start``/``stop``); its ``method`` says how.
PyTorch and JAX are imported when ``Frameworks`` is built; if one fails to import or has no GPU,
its competitors become error rows carrying that reason.
"""

from __future__ import annotations

import gc
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

COMPETITORS = {  # key (for --skip): label
    "cupy": "eager CuPy",
    "bare": "bare CuPy graph",
    "bare-copy": "bare CuPy graph + output copy",
    "jit-copy": "cupygraph jit (copy)",
    "jit-view": "cupygraph jit (view)",
    "jit-plain": "cupygraph jit (view), pdl off",
    "jit-fused": "cupygraph jit, fused (1 ElementwiseKernel)",
    "torch-graph-same": "torch.cuda.CUDAGraph, same RawKernels",
    "torch": "PyTorch eager",
    "torch-graph": "torch.cuda.CUDAGraph, torch ops",
    "torch-compile": "torch.compile (reduce-overhead)",
    "jax": "jax.jit",
}
TORCH_KEYS = ("torch", "torch-graph", "torch-graph-same", "torch-compile")


class NotApplicable(Exception):
    """A competitor that does not exist for this workload (no row; the reason goes in the notes)."""


@dataclass
class Competitor:
    """One way of running a case: ``call(x)`` on this framework's ``inputs``."""

    key: str
    call: Callable[[Any], Any]
    inputs: list
    fw: Any  # a framework adapter below
    exact: bool = False  # must equal eager CuPy bit for bit
    graph_bytes: Optional[Callable[[], Optional[int]]] = None  # device memory it holds, by its own allocator
    memory_method: str = ""
    note: Callable[[], str] = lambda: ""

    @property
    def label(self) -> str:
        return COMPETITORS[self.key]


class CupyAdapter:
    name = "cupy"
    method = "CuPy: stream synchronize (latency); cupy.cuda.Event pair around the block (GPU time)"

    def __init__(self, index: int) -> None:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()  # raises here, not mid-run, when there is no GPU
        if not 0 <= index < count:
            raise RuntimeError(f"--device {index}: this host has {count} CUDA device(s)")
        self.cupy, self.index = cupy, index
        cupy.cuda.Device(index).use()

    def upload(self, a: np.ndarray) -> Any:
        with self.cupy.cuda.Device(self.index):
            return self.cupy.asarray(a)

    def finish(self, out: Any) -> None:
        self.cupy.cuda.get_current_stream().synchronize()

    def to_numpy(self, out: Any) -> np.ndarray:
        return self.cupy.asnumpy(out)

    def start(self) -> Any:
        begin, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        begin.record()
        return begin, end

    def stop(self, token: Any, out: Any) -> float:
        begin, end = token
        end.record()
        end.synchronize()
        return float(self.cupy.cuda.get_elapsed_time(begin, end))


class TorchAdapter:
    name = "torch"
    method = "PyTorch: stream synchronize (latency); torch.cuda.Event pair around the block (GPU time)"

    def __init__(self, index: int) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        self.index = index
        self.device = torch.device("cuda", index)
        torch.cuda.set_device(self.device)
        # Full float32 GEMMs, as our RawKernel and cupy.matmul compute them.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.set_grad_enabled(False)
        # One compiled function per case and size: don't let dynamo's recompile limit turn a
        # later case into a silent eager fallback.
        import torch._dynamo

        for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                     "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 4096)
        try:  # one graph per distinct batch size is the point of the serving run, not a warning
            import torch._inductor.config as inductor_config

            inductor_config.triton.cudagraph_dynamic_shape_warn_limit = None
        except (ImportError, AttributeError):
            pass
        self.torch = torch

    def upload(self, a: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def finish(self, out: Any) -> None:
        self.torch.cuda.current_stream(self.device).synchronize()

    def to_numpy(self, out: Any) -> np.ndarray:
        return out.detach().cpu().numpy()

    def start(self) -> Any:
        begin = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        begin.record(self.torch.cuda.current_stream(self.device))
        return begin, end

    def stop(self, token: Any, out: Any) -> float:
        begin, end = token
        end.record(self.torch.cuda.current_stream(self.device))
        end.synchronize()
        return float(begin.elapsed_time(end))

    def snapshot(self) -> list[dict]:
        return list(self.torch.cuda.memory_snapshot())


class JaxAdapter:
    name = "jax"
    method = ("JAX: block_until_ready (latency); host clock from the first issue until the last result is "
              "ready (GPU time: an upper bound, JAX exposes no CUDA events)")

    def __init__(self, index: int) -> None:
        # JAX would otherwise reserve 75% of the card at start-up and starve CuPy and PyTorch.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax

        try:
            gpus = jax.devices("gpu")
        except RuntimeError as err:
            raise RuntimeError(f"JAX has no GPU backend ({err}); is the jax CUDA plugin installed?") from err
        # The same physical card as CuPy's device `index`: JAX numbers GPUs by CUDA ordinal.
        matching = [d for d in gpus if getattr(d, "local_hardware_id", None) == index]
        self.device = matching[0] if matching else gpus[index]
        jax.config.update("jax_default_device", self.device)
        self.jax = jax

    def upload(self, a: np.ndarray) -> Any:
        return self.jax.device_put(a, self.device).block_until_ready()

    def finish(self, out: Any) -> None:
        self.jax.block_until_ready(out)

    def to_numpy(self, out: Any) -> np.ndarray:
        return np.asarray(out)

    def start(self) -> Any:
        return time.perf_counter()

    def stop(self, token: Any, out: Any) -> float:
        self.jax.block_until_ready(out)
        return (time.perf_counter() - token) * 1e3


class Frameworks:
    """CuPy (required) and PyTorch / JAX (optional: a failure is kept and reported per row), all on
    CUDA device ``index``.

    JAX's initialisation can make another GPU the thread's current CUDA device (seen on a 2-GPU
    host: GPU 1); ``pin`` puts CuPy and PyTorch back on ``index`` and counts how often it had to.
    """

    def __init__(self, load_torch: bool = True, load_jax: bool = True, index: int = 0):
        self.index = index
        self.adapters: dict[str, Any] = {"cupy": CupyAdapter(index)}
        self.errors: dict[str, str] = {}
        self.restores = 0
        for name, wanted, adapter in (("torch", load_torch, TorchAdapter), ("jax", load_jax, JaxAdapter)):
            if not wanted:
                self.errors[name] = "skipped (--skip)"
                continue
            try:
                self.adapters[name] = adapter(index)
            except Exception as err:
                self.errors[name] = f"{type(err).__name__}: {err}"
            self.pin()

    def get(self, name: str) -> Any:
        if name not in self.adapters:
            raise RuntimeError(f"{name} unavailable: {self.errors.get(name, 'not loaded')}")
        return self.adapters[name]

    def pin(self) -> None:
        cupy = self.adapters["cupy"].cupy
        if cupy.cuda.runtime.getDevice() != self.index:
            self.restores += 1
            cupy.cuda.Device(self.index).use()
        if "torch" in self.adapters:
            torch = self.adapters["torch"].torch
            if torch.cuda.current_device() != self.index:
                self.restores += 1
                torch.cuda.set_device(self.index)

    def device_sync(self) -> None:
        # cudaDeviceSynchronize: waits for every stream of the context, PyTorch's and JAX's too.
        self.adapters["cupy"].cupy.cuda.Device(self.index).synchronize()

    def release_memory(self) -> None:
        gc.collect()
        self.adapters["cupy"].cupy.get_default_memory_pool().free_all_blocks()
        if "torch" in self.adapters:
            self.adapters["torch"].torch.cuda.empty_cache()

    def environment(self) -> dict:
        from tools.bench_report import environment

        torch = self.adapters["torch"].torch if "torch" in self.adapters else None
        jax_device = self.adapters["jax"].device if "jax" in self.adapters else None
        jax = self.adapters["jax"].jax if "jax" in self.adapters else None
        return environment(self.adapters["cupy"].cupy, self.index, torch, jax, jax_device, self.errors)


# -- PyTorch and JAX competitors: build(case, serving) -> Competitor ---------------------------------

TORCH_POOL_METHOD = "PyTorch: segments of the graph's private pool in torch.cuda.memory_snapshot()"


def build_torch(case: Any, serving: bool) -> Competitor:
    fw = case.frameworks.get("torch")
    inputs, params = case.converted("torch")
    return Competitor("torch", case.workload.torch_fn(fw.torch, params), inputs, fw)


def build_torch_graph(case: Any, serving: bool) -> Competitor:
    """PyTorch's documented recipe on torch ops: warm up on a side stream, capture, copy_ + replay."""
    from tools.bench_method import pool_bytes

    fw = case.frameworks.get("torch")
    torch = fw.torch
    inputs, params = case.converted("torch")
    fn = case.workload.torch_fn(torch, params)
    call, graph = torch_graph_call(torch, fw.device, fn, inputs[0])
    return Competitor("torch-graph", call, inputs, fw, memory_method=TORCH_POOL_METHOD,
                      graph_bytes=lambda: pool_bytes(fw.snapshot(), fw.index, pools=[graph.pool()]))


def build_torch_graph_same_kernels(case: Any, serving: bool) -> Competitor:
    """``torch.cuda.CUDAGraph`` capturing the very CuPy RawKernels (for the mlp: the very
    ``cupygraph.linalg.linear`` calls) the CuPy rows launch.

    CuPy launches on torch's capture stream through ``cupy.cuda.ExternalStream``; its buffers come
    from a private CuPy pool that lives as long as the graph (nothing else is handed memory the graph
    writes), filled by a warm-up on that same stream so the capture allocates nothing new. Per call:
    torch's ``copy_`` into the static input, ``replay()``, the static output returned (as a bare graph).
    """
    from tools.bench_method import pool_bytes

    if case.workload.name == "piecewise":
        raise NotApplicable("CuPy refuses its cuBLAS matmul under stream capture, so no single torch graph "
                            "can hold the piecewise workload's kernels and matmul")
    fw, cupy_fw = case.frameworks.get("torch"), case.frameworks.get("cupy")
    torch, cupy = fw.torch, cupy_fw.cupy
    inputs, _ = case.converted("torch")
    fn = case.cupy_call()
    pool = cupy.cuda.MemoryPool()
    with cupy.cuda.using_allocator(pool.malloc):
        static_in = cupy.empty_like(case.cupy_inputs[0])
        static_in[...] = case.cupy_inputs[0]
    cupy.cuda.Device(fw.index).synchronize()
    side = torch.cuda.Stream(device=fw.device)
    # One CuPy stream object for the warm-up and the capture: what cupygraph.linalg prepares for a stream
    # in the warm-up (a cuBLAS workspace, the mlp's cuBLASLt plans) lives as long as that object.
    side_stream = _external_stream(cupy, side.cuda_stream, fw.index)
    with cupy.cuda.using_allocator(pool.malloc), side_stream:
        fn(static_in)  # compile, and leave this stream's pool bins holding every buffer the capture asks for
    side.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side, capture_error_mode="relaxed"):
        current = torch.cuda.current_stream(fw.device).cuda_stream
        capture_stream = side_stream if current == side.cuda_stream else _external_stream(cupy, current, fw.index)
        with cupy.cuda.using_allocator(pool.malloc), capture_stream:
            static_out = fn(static_in)
    torch.cuda.synchronize(fw.device)
    in_t, out_t = _torch_view(torch, static_in, fw.device), _torch_view(torch, static_out, fw.device)

    def call(x: Any) -> Any:
        in_t.copy_(x)
        graph.replay()
        return out_t

    def nbytes() -> int:
        return int(pool.total_bytes()) + pool_bytes(fw.snapshot(), fw.index, pools=[graph.pool()])

    return Competitor("torch-graph-same", call, inputs, fw, exact=True, graph_bytes=nbytes,
                      memory_method="CuPy private MemoryPool (its buffers) + PyTorch graph pool segments")


def _external_stream(cupy: Any, ptr: int, index: int) -> Any:
    """CuPy's handle on torch's stream (``ExternalStream``; CuPy 14 warns it is deprecated)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cupy.cuda.ExternalStream(ptr, index)


def _torch_view(torch: Any, array: Any, device: Any) -> Any:
    """A torch tensor on the same memory as the CuPy ``array`` (no copy)."""
    try:
        view = torch.from_dlpack(array)
    except Exception:  # an older DLPack handshake: the CUDA array interface says the same
        view = torch.as_tensor(array, device=device)
    if view.data_ptr() != array.data.ptr:
        raise RuntimeError("torch's view of the CuPy buffer is a copy, not the graph's memory")
    return view


def build_torch_compile(case: Any, serving: bool) -> Competitor:
    """``torch.compile(mode="reduce-overhead")``; compiles and records on the first calls (setup)."""
    from tools.bench_method import pool_bytes, private_pools

    fw = case.frameworks.get("torch")
    torch = fw.torch
    inputs, params = case.converted("torch")
    torch._dynamo.reset()  # this case's compile time, not a cache hit from the last case; drops old graph trees
    gc.collect()
    torch.cuda.empty_cache()
    pools_before = private_pools(fw.snapshot(), fw.index)
    try:
        from torch._dynamo.utils import counters

        counters.clear()
    except ImportError:
        counters = None
    # Fixed sizes: dynamic=False (one static graph). Serving mix: the default, automatic dynamic shapes.
    compiled = torch.compile(case.workload.torch_fn(torch, params), mode="reduce-overhead",
                             dynamic=None if serving else False)

    def note() -> str:
        if counters is None:
            return ""
        breaks = sum(counters["graph_break"].values())
        skips = counters["inductor"].get("cudagraph_skips", 0)
        return f"graph breaks: {breaks}, cudagraph skips: {skips}" if breaks or skips else ""

    def nbytes() -> Optional[int]:
        found = pool_bytes(fw.snapshot(), fw.index, exclude=pools_before)
        return found or None  # 0: its pool predates this case, so it cannot be attributed

    return Competitor("torch-compile", compiled, inputs, fw, note=note, graph_bytes=nbytes,
                      memory_method="PyTorch: segments of private pools created by this compile (cudagraph trees)")


def build_jax(case: Any, serving: bool) -> Competitor:
    fw = case.frameworks.get("jax")
    inputs, params = case.converted("jax")
    jitted = fw.jax.jit(case.workload.jax_fn(fw.jax))
    consts = tuple(params)

    def nbytes() -> Optional[int]:
        stats = jitted.lower(inputs[0], consts).compile().memory_analysis()
        return None if stats is None else int(stats.temp_size_in_bytes + stats.output_size_in_bytes)

    return Competitor("jax", lambda x: jitted(x, consts), inputs, fw, graph_bytes=nbytes,
                      memory_method="JAX: compiled executable's temp + output bytes (memory_analysis)")


def peer_builders() -> dict[str, Callable[[Any, bool], Competitor]]:
    return {"torch": build_torch, "torch-graph": build_torch_graph, "torch-graph-same": build_torch_graph_same_kernels,
            "torch-compile": build_torch_compile, "jax": build_jax}


def torch_graph_call(
    torch: Any, device: Any, fn: Callable[[Any], Any], example: Any,
) -> tuple[Callable[[Any], Any], Any]:
    """``fn`` captured into a ``torch.cuda.CUDAGraph`` with PyTorch's documented recipe (warm-up on
    a side stream, capture, ``copy_`` + ``replay()`` per call): (the call, which returns the static
    output; the graph, for its memory pool)."""
    static_in = example.clone()
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(static_in)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn(static_in)
    torch.cuda.synchronize(device)

    def call(x: Any) -> Any:
        static_in.copy_(x)
        graph.replay()
        return static_out

    return call, graph
