"""CuPy code as users write it, captured unchanged (issue 29): CuPy's products routed to cupygraph's cuBLAS.

Each function below is plain CuPy. Under ``jit`` it must capture (no fallback), the routed calls be
in the statistics, and every replay equal eager CuPy bit for bit: on a batch of exactly the capture
size against the plain call on the same arrays, and on a padded batch against the plain call on the
same padded rows (a GEMM may round by row count, so never against the unpadded product). Inputs are
fresh random data at every call; outputs are poisoned with NaN before each replay.
"""

from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import replayed

import cupygraph as cg

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy: CuPy is not importable here")

from cupygraph.pytree import flatten  # noqa: E402

SIZES = [8, 16]


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return cupy.asarray(x.astype(dtype))


def poison(graphed):
    for entry in graphed.registry.entries():
        for leaf in flatten(entry.cudagraph.outputs, lambda v: isinstance(v, cupy.ndarray))[0]:
            if leaf.dtype.kind in "fc":
                leaf.fill(np.nan)


def check_unchanged(fn, make_args, *, calls=4, rows=16, seed=0):
    """``fn`` jitted captures with its library calls routed, and replays equal eager CuPy bit for bit."""
    rng = np.random.default_rng(seed)
    weights = make_args(rng, rows)[1:]  # constants: the same arrays at every call, the batch fresh
    graphed = cg.jit(fn, constant_argnums=tuple(range(1, 1 + len(weights))),
                     config={"mode": "FULL", "capture_sizes": SIZES})
    replays = 0
    for i in range(calls):
        args = (make_args(rng, rows)[0], *weights)
        if i:
            poison(graphed)
        got, replay = replayed(graphed, *args)
        want = fn(*args)
        for g, w in zip(flatten(got, lambda v: isinstance(v, cupy.ndarray))[0],
                        flatten(want, lambda v: isinstance(v, cupy.ndarray))[0]):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert np.array_equal(cupy.asnumpy(g), cupy.asnumpy(w)), \
                f"call {i} (replayed={replay}): max |got - want| {float(abs(g - w).max()):.3g}"
        replays += replay
    stats = graphed.stats()
    assert stats.fallbacks == 0, stats.to_dict()["last_detail_by_reason"]
    assert replays == calls - 1 and stats.routed_calls, stats.to_dict()
    assert all(call.startswith(("cuBLAS (at ", "cuSOLVER (at ")) and "test_routes_gpu.py" in call
               for call in stats.routed_calls), stats.routed_calls
    return graphed


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64, np.complex128])
def test_x_at_w_captures_unchanged_and_replays_as_cupy_computes_it(dtype):
    check_unchanged(lambda x, w: cupy.tanh(x @ w) @ w.T,
                    lambda rng, n: (rand(rng, (n, 64), dtype), rand(rng, (64, 64), dtype)))


@pytest.mark.parametrize("layout", ["C", "F", "transposed"])
def test_layouts_of_the_weights(layout):
    def make(rng, n):
        w = rand(rng, (48, 32), np.float32)
        w = cupy.asfortranarray(w) if layout == "F" else cupy.ascontiguousarray(w.T).T if layout == "transposed" else w
        return rand(rng, (n, 48), np.float32), w

    check_unchanged(lambda x, w: x @ w, make)


@pytest.mark.parametrize("name, fn, shapes", [
    ("batched @ matrix (broadcast: sgemmBatched)", lambda x, w: x @ w, ((4, 8, 32), (32, 16))),
    ("batched @ batched (strided)", lambda x, w: x @ w, ((4, 8, 32), (4, 32, 16))),
    ("cupy.matmul", lambda x, w: cupy.matmul(x, w), ((32,), (32, 16))),
    ("cupy.dot", lambda x, w: cupy.dot(x, w), ((32,), (32, 16))),
    ("ndarray.dot", lambda x, w: x.dot(w), ((32,), (32, 16))),
    ("tensordot", lambda x, w: cupy.tensordot(x, w, axes=([2, 3], [0, 1])), ((3, 4, 5), (4, 5, 6))),
    ("inner", lambda x, w: cupy.inner(x, w), ((32,), (16, 32))),
    ("einsum", lambda x, w: cupy.einsum("bij,jk->bik", x, w), ((8, 32), (32, 16))),
    ("cov", lambda x, w: cupy.cov(x @ w), ((32,), (32, 16))),
    ("asfortranarray", lambda x, w: cupy.asfortranarray(x @ w) * 2, ((32,), (32, 16))),
])
def test_products_as_users_write_them(name, fn, shapes):
    lead, weight = shapes

    def make(rng, n):
        return rand(rng, (n, *lead), np.float64), rand(rng, weight, np.float64)

    check_unchanged(fn, make)


def test_a_padded_batch_replays_the_eager_product_of_the_same_padded_rows():
    rng = np.random.default_rng(3)
    w = rand(rng, (64, 32), np.float32)
    graphed = cg.jit(lambda x, w: x @ w, constant_argnums=1, config={"mode": "FULL", "capture_sizes": SIZES})
    for i in range(4):
        x = rand(rng, (5, 64), np.float32)
        got, replay = replayed(graphed, x, w)
        padded = cupy.zeros((8, 64), np.float32)
        padded[:5] = x
        want = (padded @ w)[:5] if replay else x @ w
        assert np.array_equal(cupy.asnumpy(got), cupy.asnumpy(want)), (i, replay)
    assert graphed.stats().fallbacks == 0 and graphed.stats().hits == 3  # (call 0 captured, running as it is)


@pytest.mark.parametrize("switch", ["config", "environment"])
def test_routing_switched_off_falls_back_naming_the_line(switch, monkeypatch):
    config = {"mode": "FULL", "capture_sizes": SIZES}
    if switch == "config":
        config["route_library_calls"] = False
    else:
        monkeypatch.setenv("CUPYGRAPH_ROUTE_LIBRARY_CALLS", "0")
    rng = np.random.default_rng(4)
    graphed = cg.jit(lambda x, w: x @ w, constant_argnums=1, config=config)
    x, w = rand(rng, (16, 8), np.float32), rand(rng, (8, 4), np.float32)
    assert np.array_equal(cupy.asnumpy(graphed(x, w)), cupy.asnumpy(x @ w))
    stats = graphed.stats()
    assert stats.fallbacks == 1 and stats.routed_calls == {}
    assert "test_routes_gpu.py" in stats.detail("library_call")


def test_other_threads_keep_cupys_own_products_while_a_capture_routes():
    import threading

    rng = np.random.default_rng(5)
    a, b = rand(rng, (256, 256), np.float32), rand(rng, (256, 256), np.float32)
    want = cupy.asnumpy(a @ b)
    stop, errors = threading.Event(), []

    def eager_products():
        try:
            while not stop.is_set():
                got = cupy.asnumpy(a @ b)
                if not np.array_equal(got, want):
                    errors.append("an eager product in another thread differed during a capture")
        except BaseException as err:  # reported below
            errors.append(repr(err))

    thread = threading.Thread(target=eager_products)
    thread.start()
    try:
        for seed in range(6):
            check_unchanged(lambda x, w: x @ w, lambda rng, n: (rand(rng, (n, 32), np.float32),
                                                              rand(rng, (32, 32), np.float32)), seed=seed, calls=2)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]


def well_conditioned(rng, shape, dtype):
    """Random matrices with a heavy diagonal: solvable, far from singular."""
    a = rand(rng, shape, dtype)
    return a + shape[-1] * cupy.eye(shape[-1], dtype=dtype)


def spd(rng, k, dtype):
    a = rand(rng, (k, k), dtype)
    return a @ a.conj().T + k * cupy.eye(k, dtype=dtype)


SOLVER_DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


@pytest.mark.parametrize("dtype", SOLVER_DTYPES)
@pytest.mark.parametrize("name, fn, make", [
    ("solve (getrf + getrs)", lambda x, a: cupy.linalg.solve(a, x.T).T,
     lambda rng, n, dt: (rand(rng, (n, 24), dt), well_conditioned(rng, (24, 24), dt))),
    ("solve of stacked matrices (cuBLAS getrfBatched + getrsBatched)",
     lambda a: cupy.linalg.solve(a, a.sum(axis=2, keepdims=True)),
     lambda rng, n, dt: (well_conditioned(rng, (n, 8, 8), dt),)),
    ("inv", lambda x, a: x @ cupy.linalg.inv(a),
     lambda rng, n, dt: (rand(rng, (n, 24), dt), well_conditioned(rng, (24, 24), dt))),
    ("inv of stacked matrices (getrfBatched + getriBatched)", lambda a: cupy.linalg.inv(a),
     lambda rng, n, dt: (well_conditioned(rng, (n, 8, 8), dt),)),
    ("cholesky (potrf)", lambda x, s: x @ cupy.linalg.cholesky(s),
     lambda rng, n, dt: (rand(rng, (n, 24), dt), spd(rng, 24, dt))),
    ("qr (geqrf + orgqr / ungqr)", lambda x, a: x @ cupy.linalg.qr(a)[0],
     lambda rng, n, dt: (rand(rng, (n, 24), dt), rand(rng, (24, 24), dt))),
    ("det of stacked matrices (getrfBatched)", lambda a: cupy.linalg.det(a),
     lambda rng, n, dt: (well_conditioned(rng, (n, 8, 8), dt),)),
    ("slogdet of a large matrix (cuSOLVER getrf)", lambda x, a: x * cupy.linalg.slogdet(a)[1],
     lambda rng, n, dt: (rand(rng, (n, 4), dt), well_conditioned(rng, (300, 300), dt))),
])
def test_cupy_linalg_as_users_write_it_replays_as_cupy_computes_it(name, fn, make, dtype):
    """CuPy's own cupy.linalg code runs; only its cuSOLVER/cuBLAS calls go to cupygraph's handles: the same
    routines on the same operands, so every replay equals eager CuPy bit for bit."""
    check_unchanged(fn, lambda rng, n: make(rng, n, dtype))


def test_cupy_cublas_with_device_scalars_is_left_to_cupy_and_host_scalars_are_routed():
    """``cupy.cublas.geam`` with an array ``alpha`` puts CuPy's handle in device pointer mode: that call is
    CuPy's own (it falls back, naming the line), never run on a handle that would read the device address
    as host memory; with numbers it is routed like every product and replays bit for bit."""
    from cupy import cublas

    rng = np.random.default_rng(9)
    b = rand(rng, (16, 8), np.float32)
    on_device = cg.jit(lambda a, b: cublas.geam("N", "N", cupy.float32(2.0) * cupy.ones((), np.float32), a, 1.0, b),
                       constant_argnums=1, config={"mode": "FULL", "capture_sizes": SIZES})
    on_host = cg.jit(lambda a, b: cublas.geam("N", "N", 2.0, a, 1.0, b), constant_argnums=1,
                     config={"mode": "FULL", "capture_sizes": SIZES})
    for i in range(3):
        a = rand(rng, (16, 8), np.float32)
        want = 2 * a + b
        for graphed in (on_device, on_host):
            got = graphed(a, b)
            assert np.array_equal(cupy.asnumpy(got), cupy.asnumpy(cublas.geam("N", "N", 2.0, a, 1.0, b))), i
            assert np.allclose(cupy.asnumpy(got), cupy.asnumpy(want))
    assert on_device.stats().fallbacks >= 1 and "cuBLAS" in on_device.stats().detail("library_call")
    assert on_host.stats().fallbacks == 0 and on_host.stats().routed_calls
