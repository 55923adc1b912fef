"""Frameworks and peer competitors of ``tools/bench.py``: CuPy, PyTorch and JAX side by side.

A framework adapter knows how to upload NumPy data, wait for a result (``finish``), read it back
(``to_numpy``) and time a round of calls on the GPU (``start``/``stop``); its ``method`` says how.
PyTorch and JAX are imported when ``Frameworks`` is built; if one fails to import or has no GPU,
its competitors become error rows carrying that reason.
"""

from __future__ import annotations

import gc
import time
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
    "torch": "PyTorch eager",
    "torch-graph": "torch.cuda.CUDAGraph",
    "torch-compile": "torch.compile (reduce-overhead)",
    "jax": "jax.jit",
}


@dataclass
class Competitor:
    """One way of running a case: ``call(x)`` on this framework's ``inputs``."""

    key: str
    call: Callable[[Any], Any]
    inputs: list
    fw: Any  # a framework adapter below
    exact: bool = False  # must equal eager CuPy bit for bit
    graph_bytes: Optional[Callable[[], Optional[int]]] = None
    note: Callable[[], str] = lambda: ""

    @property
    def label(self) -> str:
        return COMPETITORS[self.key]


class CupyAdapter:
    name = "cupy"
    method = "CuPy: current-stream synchronize (latency); cupy.cuda.Event pair around the round (GPU time)"

    def __init__(self) -> None:
        import cupy

        cupy.cuda.runtime.getDeviceCount()  # raises here, not mid-run, when there is no GPU
        self.cupy = cupy

    def upload(self, a: np.ndarray) -> Any:
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
    method = "PyTorch: current-stream synchronize (latency); torch.cuda.Event pair around the round (GPU time)"

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
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
            try:
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, 4096)
            except Exception:
                pass
        try:  # one graph per distinct batch size is the point of the serving run, not a warning
            import torch._inductor.config as inductor_config

            inductor_config.triton.cudagraph_dynamic_shape_warn_limit = None
        except Exception:
            pass
        self.torch = torch
        self.device = torch.device("cuda", torch.cuda.current_device())

    def upload(self, a: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def finish(self, out: Any) -> None:
        self.torch.cuda.current_stream().synchronize()

    def to_numpy(self, out: Any) -> np.ndarray:
        return out.detach().cpu().numpy()

    def start(self) -> Any:
        begin = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        begin.record()
        return begin, end

    def stop(self, token: Any, out: Any) -> float:
        begin, end = token
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end))


class JaxAdapter:
    name = "jax"
    method = ("JAX: block_until_ready (latency); host clock from the first issue until the last result is "
              "ready (GPU time: an upper bound, JAX exposes no CUDA events)")

    def __init__(self) -> None:
        import jax

        device = jax.devices()[0]
        if device.platform not in ("gpu", "cuda"):
            raise RuntimeError(f"JAX's default device is {device} ({device.platform}), not a GPU; "
                               "is the jax CUDA plugin installed?")
        self.jax, self.device = jax, device

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
    """CuPy (required) and PyTorch / JAX (optional: a failure is kept and reported per row)."""

    def __init__(self, load_torch: bool = True, load_jax: bool = True):
        self.adapters: dict[str, Any] = {"cupy": CupyAdapter()}
        self.errors: dict[str, str] = {}
        for name, wanted, adapter in (("torch", load_torch, TorchAdapter), ("jax", load_jax, JaxAdapter)):
            if not wanted:
                self.errors[name] = "skipped (--skip)"
                continue
            try:
                self.adapters[name] = adapter()
            except Exception as err:
                self.errors[name] = f"{type(err).__name__}: {err}"

    def get(self, name: str) -> Any:
        if name not in self.adapters:
            raise RuntimeError(f"{name} unavailable: {self.errors.get(name, 'not loaded')}")
        return self.adapters[name]

    def device_sync(self) -> None:
        # cudaDeviceSynchronize: waits for every stream of the context, PyTorch's and JAX's too.
        self.adapters["cupy"].cupy.cuda.Device().synchronize()

    def release_memory(self) -> None:
        gc.collect()
        self.adapters["cupy"].cupy.get_default_memory_pool().free_all_blocks()
        if "torch" in self.adapters:
            self.adapters["torch"].torch.cuda.empty_cache()

    def environment(self) -> dict:
        from tools.bench_report import environment

        torch = self.adapters["torch"].torch if "torch" in self.adapters else None
        jax = self.adapters["jax"].jax if "jax" in self.adapters else None
        return environment(self.adapters["cupy"].cupy, torch, jax, self.errors)


# -- PyTorch and JAX competitors: build(case, serving) -> Competitor ---------------------------------


def build_torch(case: Any, serving: bool) -> Competitor:
    fw = case.frameworks.get("torch")
    inputs, params = case.converted("torch")
    return Competitor("torch", case.workload.torch_fn(fw.torch, params), inputs, fw)


def build_torch_graph(case: Any, serving: bool) -> Competitor:
    """PyTorch's documented recipe: warm up on a side stream, capture, then copy_ + replay per call."""
    fw = case.frameworks.get("torch")
    torch = fw.torch
    inputs, params = case.converted("torch")
    fn = case.workload.torch_fn(torch, params)
    static_in = inputs[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(static_in)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    before = torch.cuda.memory_reserved()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn(static_in)
    torch.cuda.synchronize()
    nbytes = torch.cuda.memory_reserved() - before

    def call(x: Any) -> Any:
        static_in.copy_(x)
        graph.replay()
        return static_out

    return Competitor("torch-graph", call, inputs, fw, graph_bytes=lambda: nbytes)


def build_torch_compile(case: Any, serving: bool) -> Competitor:
    """``torch.compile(mode="reduce-overhead")``; compiles and records on the first calls (setup)."""
    fw = case.frameworks.get("torch")
    torch = fw.torch
    inputs, params = case.converted("torch")
    torch._dynamo.reset()  # this case's compile time, not a cache hit from the last case
    try:
        from torch._dynamo.utils import counters

        counters.clear()
    except Exception:
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

    return Competitor("torch-compile", compiled, inputs, fw, note=note)


def build_jax(case: Any, serving: bool) -> Competitor:
    fw = case.frameworks.get("jax")
    inputs, params = case.converted("jax")
    jitted = fw.jax.jit(case.workload.jax_fn(fw.jax))
    consts = tuple(params)
    return Competitor("jax", lambda x: jitted(x, consts), inputs, fw)


def peer_builders() -> dict[str, Callable[[Any, bool], Competitor]]:
    return {"torch": build_torch, "torch-graph": build_torch_graph, "torch-compile": build_torch_compile,
            "jax": build_jax}
