"""The workloads of ``tools/bench.py``: one computation each, written for CuPy, PyTorch and JAX.

The CuPy version is the product's use case: a chain of custom RawKernel launches (the mlp: layers
on cupygraph's own cuBLAS path, ``cupygraph.linalg.linear``, issue 31). The PyTorch and
JAX versions compute the same math with each library's own ops, as a user moving the pipeline
there would write it; where their compilers fuse what our RawKernels keep separate, the workload's
``fusion_note`` says so. All three read the same NumPy data (inputs and weights).

Signatures: ``cupy_fn()(x, *params)``; ``torch_fn(torch, params)(x)`` (a function or an
``nn.Module`` holding the weights as parameters); ``jax_fn(jax)(x, params)`` with ``params`` a
tuple. Nothing here imports CuPy, PyTorch or JAX at module level.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np

CHAIN_LENGTH = 100  # kernels per call on `chain`
PIECE_LENGTH = 50  # kernels on each side of the matmul on `piecewise`
HEAT_STEPS = 32
HEAT_ALPHA = 0.2  # cupygraph.demo.ALPHA, the default of make_heat_cupy
GRID = 128
HIDDEN = 256
MLP_WIDTH = 1024  # issue 31's mlp: 4 layers of 1024 -> 1024, float32, bias + ReLU
MLP_LAYERS = 4
SERVING_MAX_BATCH = 256


def chain_constants(length: int) -> list[tuple[np.float32, np.float32]]:
    """(a, b) of each affine/squash pair: y = a*x + b, then y / (1 + |y|)."""
    return [(np.float32(1.0 + 1e-3 * i), np.float32(0.01)) for i in range(length // 2)]


def chain_fn(length: int = CHAIN_LENGTH) -> Callable[[Any], Any]:
    """``length`` tiny elementwise RawKernel launches (alternating affine and squash), cupygraph's kernels."""
    from cupygraph.kernels import get_kernel

    return _chain_of(get_kernel("elementwise.cu", "affine"), get_kernel("elementwise.cu", "squash"), length)


def raw_chain_source() -> str:
    """``tools/chain_rawmodule.cu``: the chain's kernels as a user writes them for plain ``cupy.RawModule``,
    each opening with ``griddepcontrol.launch_dependents`` and ``griddepcontrol.wait`` (issue 30)."""
    return (Path(__file__).parent / "chain_rawmodule.cu").read_text(encoding="utf-8")


def raw_chain_fn(length: int = CHAIN_LENGTH) -> Callable[[Any], Any]:
    """The same chain, its kernels from ``cupy.RawModule(code=raw_chain_source())``."""
    import cupy

    module = cupy.RawModule(code=raw_chain_source())
    return _chain_of(module.get_function("affine"), module.get_function("squash"), length)


def _chain_of(affine: Any, squash: Any, length: int) -> Callable[[Any], Any]:
    import cupy

    constants = chain_constants(length)

    def chain(x: Any) -> Any:
        n = x.size
        grid = (min(1024, (n + 255) // 256),)
        a, b = cupy.empty_like(x), cupy.empty_like(x)
        src = x
        for scale, shift in constants:
            affine(grid, (256,), (src, a, np.int64(n), scale, shift))
            squash(grid, (256,), (a, b, np.int64(n)))
            src = b
        return src

    return chain


def fused_chain_source(length: int = CHAIN_LENGTH) -> str:
    """The body of one ElementwiseKernel that runs the whole chain on each element.

    The constants are written as their float32 bit patterns, so the fused kernel multiplies by
    exactly the values the RawKernels receive as arguments.
    """
    lines = ["float v = x;"]
    for a, b in chain_constants(length):
        bits_a, bits_b = int(np.float32(a).view(np.uint32)), int(np.float32(b).view(np.uint32))
        lines.append(f"v = __int_as_float({bits_a:#010x}) * v + __int_as_float({bits_b:#010x}); "
                     "v = v / (1.0f + fabsf(v));")
    lines.append("y = v;")
    return "\n".join(lines)


def fused_chain_fn(length: int = CHAIN_LENGTH) -> Callable[[Any], Any]:
    """The fusion route inside CuPy: the same math as ``chain_fn`` in one ElementwiseKernel launch."""
    import cupy

    kernel = cupy.ElementwiseKernel("float32 x", "float32 y", fused_chain_source(length), f"fused_chain_{length}")
    return lambda x: kernel(x)


def _torch_chain(length: int) -> Callable[[Any], Any]:
    constants = [(float(a), float(b)) for a, b in chain_constants(length)]

    def chain(x: Any) -> Any:
        for a, b in constants:
            y = x * a + b
            x = y / (1.0 + y.abs())
        return x

    return chain


def _jax_chain(jax: Any, length: int) -> Callable[[Any], Any]:
    jnp = jax.numpy
    constants = [(float(a), float(b)) for a, b in chain_constants(length)]

    def chain(x: Any) -> Any:
        for a, b in constants:
            y = x * a + b
            x = y / (1.0 + jnp.abs(y))
        return x

    return chain


class Workload:
    """A benchmark workload: sizes, shapes, constant parameters and the three implementations."""

    name = ""
    axis = ""  # what a size is: "n" (elements), "B" (grids), "batch" (rows)
    fusion_note = ""
    peer_rtol = 1e-5  # tolerance of PyTorch and JAX against eager CuPy (np.allclose)
    peer_atol = 1e-5
    jit_config: ClassVar[dict[str, Any]] = {}  # extra cupygraph config for this workload

    def sizes(self, quick: bool) -> list[int]:
        raise NotImplementedError

    def shape(self, size: int) -> tuple[int, ...]:
        raise NotImplementedError

    def params(self) -> list[np.ndarray]:
        """Constant arguments (weights); the same arrays for every framework."""
        return []

    def cupy_fn(self) -> Callable[..., Any]:
        raise NotImplementedError

    def fused_cupy_fn(self) -> Optional[Callable[..., Any]]:
        """The same math fused into fewer CuPy kernels, for the fusion-route row; None if not offered."""
        return None

    def torch_fn(self, torch: Any, params: list[Any]) -> Callable[[Any], Any]:
        raise NotImplementedError

    def jax_fn(self, jax: Any) -> Callable[[Any, tuple], Any]:
        raise NotImplementedError

    def tolerance(self) -> str:
        return f"rtol {self.peer_rtol:g}, atol {self.peer_atol:g}"


class Chain(Workload):
    name, axis = "chain", "n"
    fusion_note = ("torch eager launches 5 kernels per affine/squash pair (250 per call); "
                   "torch.compile and XLA fuse the whole chain into about one kernel; the row "
                   "'cupygraph jit, fused' runs the same math as one ElementwiseKernel inside cupygraph.")

    def sizes(self, quick: bool) -> list[int]:
        return [1024, 65536] if quick else [1024, 16384, 65536]

    def shape(self, size: int) -> tuple[int, ...]:
        return (size,)

    def cupy_fn(self) -> Callable[..., Any]:
        return chain_fn(CHAIN_LENGTH)

    def fused_cupy_fn(self) -> Optional[Callable[..., Any]]:
        return fused_chain_fn(CHAIN_LENGTH)

    def torch_fn(self, torch: Any, params: list[Any]) -> Callable[[Any], Any]:
        return _torch_chain(CHAIN_LENGTH)

    def jax_fn(self, jax: Any) -> Callable[[Any, tuple], Any]:
        chain = _jax_chain(jax, CHAIN_LENGTH)
        return lambda x, params: chain(x)


class ChainRawModule(Chain):
    """Issue 30's PDL chain: the chain's kernels built with plain ``cupy.RawModule``, each waiting."""

    name = "chain-rawmodule"
    fusion_note = ("the chain's 100 kernels built with plain cupy.RawModule, each opening with griddepcontrol."
                   "launch_dependents and griddepcontrol.wait (inline PTX): programmatic dependent launch without "
                   "cupygraph's kernel builders. " + Chain.fusion_note)

    def sizes(self, quick: bool) -> list[int]:
        return [1024] if quick else [1024, 65536]

    def cupy_fn(self) -> Callable[..., Any]:
        return raw_chain_fn(CHAIN_LENGTH)


class Stencil(Workload):
    name, axis = "stencil", "B"
    fusion_note = ("torch eager runs about ten kernels per step (adds, scales, clone, slice copy); "
                   "torch.compile and XLA fuse each step, and may fuse across steps.")

    def sizes(self, quick: bool) -> list[int]:
        return [1, 64] if quick else [1, 16, 64]

    def shape(self, size: int) -> tuple[int, ...]:
        return (size, GRID, GRID)

    def cupy_fn(self) -> Callable[..., Any]:
        from cupygraph.demo import make_heat_cupy

        return make_heat_cupy(steps=HEAT_STEPS, alpha=HEAT_ALPHA)

    def torch_fn(self, torch: Any, params: list[Any]) -> Callable[[Any], Any]:
        alpha = float(np.float32(HEAT_ALPHA))

        def heat(u: Any) -> Any:
            for _ in range(HEAT_STEPS):
                c = u[:, 1:-1, 1:-1]
                # The kernel's order: left, right, up, down, then - 4c.
                lap = u[:, 1:-1, :-2] + u[:, 1:-1, 2:] + u[:, :-2, 1:-1] + u[:, 2:, 1:-1] - 4.0 * c
                nxt = u.clone()  # boundaries stay fixed
                nxt[:, 1:-1, 1:-1] = c + alpha * lap
                u = nxt
            return u

        return heat

    def jax_fn(self, jax: Any) -> Callable[[Any, tuple], Any]:
        alpha = float(np.float32(HEAT_ALPHA))

        def heat(u: Any, params: tuple) -> Any:
            for _ in range(HEAT_STEPS):
                c = u[:, 1:-1, 1:-1]
                lap = u[:, 1:-1, :-2] + u[:, 1:-1, 2:] + u[:, :-2, 1:-1] + u[:, 2:, 1:-1] - 4.0 * c
                u = u.at[:, 1:-1, 1:-1].set(c + alpha * lap)
            return u

        return heat


def _linear_weights(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    # He-style scale keeps activations O(1) through the layers, so tolerances mean the same at every depth.
    return (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def mlp_params() -> list[np.ndarray]:
    """The mlp's weights and biases, interleaved: w0 (in, out), b0 (out,), w1, b1, ..."""
    rng = np.random.default_rng(1234)
    out: list[np.ndarray] = []
    for _ in range(MLP_LAYERS):
        out.append(_linear_weights(rng, MLP_WIDTH, MLP_WIDTH))
        out.append((0.1 * rng.standard_normal(MLP_WIDTH)).astype(np.float32))
    return out


def mlp_fn() -> Callable[..., Any]:
    """``mlp(x, w0, b0, w1, b1, ...)`` on cupygraph's cuBLAS path: each layer one
    ``cupygraph.linalg.linear`` (one cuBLASLt GEMM with the bias + ReLU epilogue fused)."""
    import cupygraph as cg

    def mlp(x: Any, *params: Any) -> Any:
        for w, b in zip(params[0::2], params[1::2]):
            x = cg.linalg.linear(x, w, b, activation="relu")
        return x

    return mlp


class Mlp(Workload):
    name, axis = "mlp", "batch"
    peer_rtol, peer_atol = 1e-3, 1e-4  # cuBLAS(Lt)/XLA GEMMs may sum in another order
    fusion_note = ("issue 31's mlp: 4 layers of 1024 -> 1024, float32, bias + ReLU. Our layer is "
                   "cupygraph.linalg.linear: one cuBLASLt GEMM with the bias + ReLU epilogue fused (the "
                   "fastest of cuBLASLt's proposals for each batch, timed once). torch eager and torch's graph run "
                   "addmm + relu, 2 kernels per layer (one row: cuBLAS's gemvx, per torch's profiler); "
                   "torch.compile and XLA fuse bias + ReLU into the GEMM's epilogue or one kernel. TF32 is off "
                   "everywhere.")

    def sizes(self, quick: bool) -> list[int]:
        return [1, 64] if quick else [1, 16, 64, 256]

    def shape(self, size: int) -> tuple[int, ...]:
        return (size, MLP_WIDTH)

    def params(self) -> list[np.ndarray]:
        return mlp_params()

    def cupy_fn(self) -> Callable[..., Any]:
        return mlp_fn()

    def torch_fn(self, torch: Any, params: list[Any]) -> Callable[[Any], Any]:
        class MLP(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                # Parameters, so torch.compile's CUDA graphs treat them as static (no per-call copy).
                self.weights = torch.nn.ParameterList(
                    [torch.nn.Parameter(p, requires_grad=False) for p in params[0::2]])
                self.biases = torch.nn.ParameterList(
                    [torch.nn.Parameter(p, requires_grad=False) for p in params[1::2]])

            def forward(self, x: Any) -> Any:
                for w, b in zip(self.weights, self.biases):
                    x = torch.relu(torch.addmm(b, x, w))
                return x

        return MLP().eval()

    def jax_fn(self, jax: Any) -> Callable[[Any, tuple], Any]:
        jnp = jax.numpy
        highest = jax.lax.Precision.HIGHEST  # no TF32: the same float32 math as the others

        def mlp(x: Any, params: tuple) -> Any:
            for w, b in zip(params[0::2], params[1::2]):
                x = jax.nn.relu(jnp.matmul(x, w, precision=highest) + b)
            return x

        return mlp


class Piecewise(Workload):
    """50 elementwise kernels, a cuBLAS matmul (not capturable through CuPy), 50 kernels."""

    name, axis = "piecewise", "batch"
    peer_rtol, peer_atol = 1e-3, 1e-4
    jit_config: ClassVar[dict[str, Any]] = {"mode": "PIECEWISE"}
    fusion_note = ("cupygraph replays two graphs around an eager cupy.matmul (graph_break); torch.compile "
                   "and XLA fuse each 50-kernel chain and call cuBLAS inside one graph.")

    def sizes(self, quick: bool) -> list[int]:
        return [64] if quick else [1, 64, 256]

    def shape(self, size: int) -> tuple[int, ...]:
        return (size, HIDDEN)

    def params(self) -> list[np.ndarray]:
        rng = np.random.default_rng(4321)
        return [(rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(np.float32)]

    def cupy_pieces(self) -> tuple[Callable[[Any], Any], Callable[[Any, Any], Any], Callable[[Any], Any]]:
        """(head, matmul, tail): the matmul is marked with ``cupygraph.graph_break``."""
        import cupy

        import cupygraph as cg

        return chain_fn(PIECE_LENGTH), cg.graph_break(cupy.matmul), chain_fn(PIECE_LENGTH)

    def cupy_fn(self) -> Callable[..., Any]:
        head, matmul, tail = self.cupy_pieces()
        return lambda x, w: tail(matmul(head(x), w))

    def torch_fn(self, torch: Any, params: list[Any]) -> Callable[[Any], Any]:
        head, tail = _torch_chain(PIECE_LENGTH), _torch_chain(PIECE_LENGTH)

        class HeadMatmulTail(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(params[0], requires_grad=False)

            def forward(self, x: Any) -> Any:
                return tail(head(x) @ self.w)

        return HeadMatmulTail().eval()

    def jax_fn(self, jax: Any) -> Callable[[Any, tuple], Any]:
        head, tail = _jax_chain(jax, PIECE_LENGTH), _jax_chain(jax, PIECE_LENGTH)
        highest = jax.lax.Precision.HIGHEST
        return lambda x, params: tail(jax.numpy.matmul(head(x), params[0], precision=highest))


WORKLOADS: dict[str, Workload] = {w.name: w for w in (Chain(), ChainRawModule(), Stencil(), Mlp(), Piecewise())}


def serving_sizes(count: int = 64, seed: int = 1) -> list[int]:
    """Serving-like batch sizes: geometric (many small, a few large), between 1 and 256."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.geometric(0.05, size=count), SERVING_MAX_BATCH).astype(int).tolist()


def random_inputs(shapes: list[tuple[int, ...]], seed: int) -> list[np.ndarray]:
    """Fresh standard-normal float32 data (never zeros), one array per shape."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


def piecewise_unavailable() -> Optional[str]:
    """Why the piecewise workload cannot run, or None."""
    import cupygraph as cg

    if not hasattr(cg, "graph_break"):
        return "cupygraph.graph_break does not exist yet (the PIECEWISE issue); piecewise skipped"
    return None
