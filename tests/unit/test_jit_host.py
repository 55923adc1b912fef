"""Full ``cupygraph.jit`` flows on the NumPy host backend: replay must equal calling the function."""

from __future__ import annotations

import logging
import random
import threading

import numpy as np
import pytest
from replay_helpers import check_replay_follows_new_data, poison_outputs

import cupygraph.config.defaults
from cupygraph import CaptureError, CUDAGraphConfig, GraphedFunction, InputMismatchError, jit
from cupygraph.dispatch.descriptor import BatchDescriptor

SIZES = [1, 2, 4, 8, 16]
D = 5


def host(**fields) -> dict:
    fields.setdefault("capture_sizes", SIZES)
    return dict(backend="host", **fields)


def rand(rows: int, seed: int = 0, d: int = D) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, d))


def elementwise(x):
    return np.sin(x) * 2 + 1


def mix_rows(x):
    return x - x.sum(axis=0)


def check_stats(f: GraphedFunction, calls: int) -> None:
    stats = f.stats()
    assert stats.hits + stats.misses == calls
    assert stats.captures - stats.evictions == f.registry.num_graphs()


# -- results equal direct calls ---------------------------------------------------------------------


@pytest.mark.parametrize("fn", [elementwise, mix_rows], ids=["elementwise", "mix_rows"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_batch_sizes_equal_direct_calls(fn, seed):
    f = jit(fn, config=host())
    order = random.Random(seed)
    calls = 0
    for i in range(60):
        n = order.choice(range(1, 17))
        x = rand(n, seed * 1000 + i)
        poison_outputs(f)  # a replay that did not rewrite its outputs would return the poison
        assert np.array_equal(f(x), fn(x)), n
        calls += 1
    assert f.registry.num_graphs() >= 1
    assert f.stats().fallbacks == 0
    check_stats(f, calls)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 15, 16])
def test_each_side_of_padding_boundaries(n):
    def mix_half(x):  # mixes rows like mix_rows, and depends on the data for one row too
        return x - 0.5 * x.sum(axis=0)

    f = jit(mix_half, config=host())
    # The replay, not only the capture: on new data, with the static outputs poisoned before it.
    check_replay_follows_new_data(f, mix_half, (rand(n, n),), (rand(n, n + 100),))
    assert f.stats().hits == 1


def test_padding_does_not_leak_into_row_mixing():
    f = jit(mix_rows, config=host())
    # Bigger then smaller batch in the same capture size (8): rows 5..6 of the buffer held data.
    for n, seed in [(7, 0), (5, 1), (6, 2)]:
        x = rand(n, seed)
        assert np.array_equal(f(x), mix_rows(x)), n
    # Another capture size of the same signature ran in between (shared input buffers).
    x3 = rand(3, 3)
    assert np.array_equal(f(x3), mix_rows(x3))
    x16 = rand(13, 4)
    assert np.array_equal(f(x16), mix_rows(x16))
    for n, seed in [(5, 5), (2, 6), (5, 7), (8, 8), (6, 9)]:
        x = rand(n, seed)
        assert np.array_equal(f(x), mix_rows(x)), n
    assert {e.key.descriptor.num_tokens for e in f.registry.entries()} == {2, 4, 8, 16}


def test_multiple_batched_inputs():
    def fn(x, y):
        return x * y + y.sum(axis=0)

    f = jit(fn, config=host(), batch_argnums=(0, 1))
    order = random.Random(5)
    for i in range(30):
        n = order.randint(1, 16)
        x, y = rand(n, i), rand(n, 100 + i)
        assert np.array_equal(f(x, y), fn(x, y))
    assert f.stats().fallbacks == 0


def test_mismatched_batch_sizes_name_both_arguments():
    f = jit(lambda x, y: x + y, config=host(), batch_argnums=(0, 1))
    with pytest.raises(InputMismatchError, match=r"argument 0 has 3 rows, argument 1 has 4"):
        f(rand(3), rand(4))


def test_unbatched_array_arguments_are_copied_whole():
    def fn(x, w):
        return x * w + w.sum()

    f = jit(fn, config=host())
    for i in range(12):
        n = 1 + (i * 5) % 16
        x, w = rand(n, i), rand(1, 50 + i)[0]
        assert np.array_equal(f(x, w), fn(x, w))
    for entry in f.registry.entries():
        assert len(entry.whole_inputs) == 1
        assert entry.whole_inputs[0] is not w and not np.shares_memory(entry.whole_inputs[0], w)
    # A different shape of the unbatched argument is another signature.
    w7 = rand(1, 99, d=1)[0]
    x = rand(3)
    before = f.registry.num_graphs()
    assert np.array_equal(f(x, w7), fn(x, w7))
    assert f.registry.num_graphs() == before + 1


# -- constant, static and keyword arguments -----------------------------------------------------


def test_constant_argument_captured_by_address():
    def fn(x, w):
        return (x[:, :, None] * w).sum(axis=1)  # x @ w without cuBLAS (refused under capture)

    weights = rand(D, 7, d=3)
    f = jit(fn, config=host(), constant_argnums=(1,))
    x = rand(4)
    assert np.array_equal(f(x, weights), fn(x, weights))
    entry = f.registry.entries()[0]
    assert entry.whole_inputs == []
    # Updated in place: the graph reads the same address, so it sees the new values.
    weights *= 3
    assert np.array_equal(f(x, weights), fn(x, weights))
    assert f.registry.num_graphs() == 1 and f.stats().hits == 1


def test_constant_argument_moved_recaptures_with_reason():
    def fn(x, w):
        return x * w

    w1, w2 = rand(1, 1)[0], rand(1, 2)[0]
    f = jit(fn, config=host(input_binding="copy"), constant_argnums=(1,))
    x = rand(3)
    assert np.array_equal(f(x, w1), fn(x, w1))
    assert np.array_equal(f(x, w2), fn(x, w2))
    assert f.registry.num_graphs() == 2
    reasons = f.stats().recaptures_by_reason
    assert any("constant" in r for r in reasons)
    assert np.array_equal(f(x, w1), fn(x, w1))  # the first key still replays


def test_constant_argument_moved_raises_under_raise():
    f = jit(lambda x, w: x * w, config=host(on_capture_error="raise", input_binding="copy"), constant_argnums=(1,))
    w1, w2 = rand(1, 1)[0], rand(1, 2)[0]
    f(rand(3), w1)
    with pytest.raises(InputMismatchError, match="constant argument"):
        f(rand(3), w2)


def test_constant_argument_moved_raises_every_time():
    f = jit(lambda x, w: x * w, config=host(on_capture_error="raise", input_binding="copy"), constant_argnums=(1,))
    w1, w2 = rand(1, 1)[0], rand(1, 2)[0]
    f(rand(3), w1)
    for _ in range(2):
        with pytest.raises(InputMismatchError):
            f(rand(3), w2)


def test_constant_recapture_counts_one_call():
    f = jit(lambda x, w: x * w, config=host(), constant_argnums=(1,))
    w1, w2 = rand(1, 1)[0], rand(1, 2)[0]
    f(rand(3), w1)
    f(rand(3), w2)
    stats = f.stats()
    assert stats.hits + stats.misses == 2
    assert stats.fallbacks == 0


def test_static_python_arguments_are_part_of_the_key():
    def fn(x, scale, shift=0):
        return x * scale + shift

    f = jit(fn, config=host())
    for i, scale in enumerate((2, 3, 2, 3)):
        x = rand(3, i)
        poison_outputs(f)
        assert np.array_equal(f(x, scale), fn(x, scale))
    assert f.registry.num_graphs() == 2
    assert f.stats().hits == 2


def test_static_values_equal_across_types_are_distinct_keys():
    f = jit(lambda x, s: x * s, config=host())
    x = np.arange(8).reshape(4, 2)
    assert f(x, 1).dtype == np.int64
    out = f(x, 1.0)
    assert out.dtype == (x * 1.0).dtype


def test_unhashable_static_argument_names_it():
    f = jit(lambda x, opts: x * len(opts), config=host())
    with pytest.raises(InputMismatchError, match=r"argument 1 of <lambda>\(\) is an unhashable list"):
        f(rand(3), [1, 2])


def test_keyword_arguments():
    def fn(x, *, scale=1, mode="add"):
        return x + scale if mode == "add" else x * scale

    f = jit(fn, config=host())
    for i, (scale, mode) in enumerate([(2, "add"), (3, "mul"), (2, "add"), (3, "mul"), (3, "add")]):
        x = rand(1 + i * 3, i)
        assert np.array_equal(f(x, scale=scale, mode=mode), fn(x, scale=scale, mode=mode))
    with pytest.raises(InputMismatchError, match="keyword argument 'scale'"):
        f(rand(2), scale=[1])
    with pytest.raises(InputMismatchError, match="keyword argument 'scale'"):
        f(rand(2), scale=rand(2))


def test_array_in_static_argnums_is_an_error():
    f = jit(lambda x, w: x * w, config=host(), static_argnums=(1,))
    with pytest.raises(InputMismatchError, match=r"argument 1 .* is an array but is in static_argnums"):
        f(rand(3), rand(1)[0])


def test_zero_d_array_in_batch_argnums_is_an_error():
    f = jit(lambda x: x * 2, config=host())
    with pytest.raises(InputMismatchError, match="0-d array"):
        f(np.array(3.0))


def test_numpy_scalar_argument():
    f = jit(lambda x, s: x * s, config=host())
    x = rand(3)
    assert np.array_equal(f(x, np.float64(2.0)), x * 2.0)


def test_non_array_in_batch_argnums_is_an_error():
    f = jit(lambda x: x * 2, config=host())
    with pytest.raises(InputMismatchError, match="not an array"):
        f([1.0, 2.0])


# -- outputs ------------------------------------------------------------------------------------------


def test_dict_tuple_nested_outputs():
    def fn(x):
        return {"double": x * 2, "pair": (x + 1, [x.sum(axis=0), x[:, :2]]), "const": np.eye(3)}

    f = jit(fn, config=host())
    for i, n in enumerate((3, 5, 3, 16, 1, 5)):
        x = rand(n, i)
        poison_outputs(f)
        got, want = f(x), fn(x)
        assert set(got) == set(want)
        assert isinstance(got["pair"], tuple) and isinstance(got["pair"][1], list)
        assert np.array_equal(got["double"], want["double"])
        assert np.array_equal(got["pair"][0], want["pair"][0])
        assert np.array_equal(got["pair"][1][0], want["pair"][1][0])
        assert np.array_equal(got["pair"][1][1], want["pair"][1][1])
        assert np.array_equal(got["const"], want["const"])


def test_outputs_without_batch_axis_are_not_sliced():
    def fn(x):
        return x.sum(axis=0), (x[:, :, None] * x[:, None, :]).sum(axis=0), np.full((3, 7), 2.0)

    f = jit(fn, config=host())
    for n in (3, 6, 11):
        x = rand(n, n)
        got, want = f(x), fn(x)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            assert np.array_equal(g, w)


def test_unbatched_output_as_long_as_the_padded_batch():
    """An unbatched output as long as the padded batch is not cut: the first padded call shows it
    (an eager run at the real batch gives it the same shape); out_batched may say so too."""

    def fn(x):
        return x.sum(axis=0), x * 2

    x = rand(5, d=8)
    shown = jit(fn, config=host())
    for _ in range(2):  # the call that captures, then a replay
        total, doubled = shown(x)
        assert total.shape == (8,) and doubled.shape == (5, 8)
    declared = jit(fn, config=host(), out_batched=(False, True))
    total, doubled = declared(x)
    assert total.shape == (8,) and np.allclose(total, fn(x)[0])
    assert np.array_equal(doubled, fn(x)[1])
    with pytest.raises(ValueError, match="out_batched"):
        jit(fn, config=host(), out_batched=(True,))(x)
    with pytest.raises(ValueError, match="declared batched"):
        jit(lambda x: x.sum(axis=1)[:3], config=host(), out_batched=True)(x)


def test_scalar_reduction_output_follows_inputs():
    f = jit(lambda x: x.sum(), config=host())
    f(rand(3, 0))
    x = rand(3, 1)
    # Padding rows (pad_value 0) change the summation order, so equal up to rounding; the result
    # is a 0-d array, as CuPy returns, and it follows the new inputs.
    assert np.isclose(f(x), x.sum(), rtol=1e-12) and not np.isclose(f(x), rand(3, 0).sum())


def test_output_mode_copy_caller_owns_result():
    f = jit(lambda x: x * 2, config=host(output_mode="copy"))
    x1, x2 = rand(3, 1), rand(3, 2)
    r1 = f(x1)
    r1[:] = 123.0
    r2 = f(x2)
    assert np.array_equal(r2, x2 * 2)
    r1b = f(x1)
    assert np.array_equal(r1b, x1 * 2)
    assert not np.shares_memory(r1b, r2)
    assert not np.shares_memory(r1b, f.registry.entries()[0].recording.outputs)


def test_output_mode_view_is_overwritten_by_next_call():
    f = jit(lambda x: x * 2, config=host(output_mode="view"))
    x1, x2 = rand(3, 1), rand(3, 2)
    f(x1)  # the call that captures returns its own eager result
    r1 = f(x1)
    assert np.array_equal(r1, x1 * 2)
    assert np.shares_memory(r1, f.registry.entries()[0].recording.outputs)
    r2 = f(x2)
    assert np.array_equal(r2, x2 * 2)
    assert np.array_equal(r1, x2 * 2)  # the footgun: r1 now shows the second call's result


# -- eager fallbacks ---------------------------------------------------------------------------------


def test_batch_above_largest_capture_size_runs_eagerly():
    f = jit(mix_rows, config=host(capture_sizes=[1, 2, 4]))
    x = rand(9)
    assert np.array_equal(f(x), mix_rows(x))
    stats = f.stats()
    assert f.registry.num_graphs() == 0
    assert stats.fallbacks == 1 and stats.misses == 1
    assert stats.fallbacks_by_reason == {"above_largest_capture_size": 1}
    assert stats.detail("above_largest_capture_size") == "batch of 9 is above the largest capture size 4"


def test_capture_after_three():
    seen = []

    def fn(x):
        seen.append(x.shape[0])
        return x + 1

    f = jit(fn, config=host(capture_after=3, num_warmups=0))
    x = rand(3)
    for _ in range(2):
        assert np.array_equal(f(x), x + 1)
    assert f.registry.num_graphs() == 0
    assert seen == [3, 3]  # eager on the caller's arrays
    assert f.stats().fallbacks_by_reason == {"cold_key": 2}
    assert "capture_after=3" in f.stats().detail("cold_key")
    assert np.array_equal(f(x), x + 1)
    assert f.registry.num_graphs() == 1 and f.stats().captures == 1
    assert seen[2:] == [3, 4]  # the call itself ran as it is, then the capture on the padded static buffer
    # A key seen only twice is never captured.
    y = rand(9)
    f(y)
    f(y)
    assert f.registry.num_graphs() == 1


def test_mode_none_runs_eagerly():
    calls = []

    def fn(x):
        calls.append(x)
        return x * 3

    f = jit(fn, config=host(mode="NONE"))
    x = rand(3)
    assert np.array_equal(f(x), x * 3)
    assert calls[-1] is x
    assert f.registry.num_graphs() == 0
    assert f.stats().fallbacks_by_reason == {"mode_none": 1}
    assert f.warmup(x) == 0


def test_env_disable_runs_eagerly_and_logs_once(monkeypatch, caplog):
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "1")
    monkeypatch.setattr(cupygraph.config.defaults, "_DISABLE_LOGGED", False)
    with caplog.at_level(logging.WARNING, logger="cupygraph"):
        f = jit(lambda x: x * 2, config=host())
        g = jit(lambda x: x + 2, config=CUDAGraphConfig(backend="host"))
        x = rand(4)
        assert np.array_equal(f(x), x * 2) and np.array_equal(g(x), x + 2)
    assert f.config.mode.name == "NONE" and g.config.mode.name == "NONE"
    assert f.registry.num_graphs() == 0 and g.registry.num_graphs() == 0
    assert len([r for r in caplog.records if "CUPYGRAPH_DISABLE" in r.getMessage()]) == 1


def test_empty_batch_runs_eagerly():
    f = jit(mix_rows, config=host())
    x = np.zeros((0, D))
    out = f(x)
    assert out.shape == (0, D)
    assert f.registry.num_graphs() == 0
    assert f.stats().fallbacks_by_reason == {"empty_batch": 1}


# -- warmup, decorator forms, stats, clear, config files -----------------------------------------


def test_warmup_captures_largest_first_and_counts():
    rows = []

    def fn(x):
        rows.append(x.shape[0])
        return x * 2

    f = jit(fn, config=host(num_warmups=1))
    assert f.warmup(rand(1), sizes=[2, 8, 4], progress=False) == 3
    assert rows == [8, 8, 4, 4, 2, 2]
    assert {e.key.descriptor.num_tokens for e in f.registry.entries()} == {2, 4, 8}
    assert f.warmup(rand(1), sizes=[4, 8], progress=False) == 0
    # The warmed graphs replay, after the first padded call of a key, which runs the function as it
    # is (7 rows) to see which outputs carry the batch.
    rows.clear()
    x = rand(7)
    assert np.array_equal(f(x), x * 2) and np.array_equal(f(x), x * 2)
    assert rows == [7, 8] and f.stats().hits == 1


def test_warmup_without_example_needs_a_previous_call():
    f = jit(lambda x: x * 2, config=host())
    with pytest.raises(ValueError, match="needs example arguments"):
        f.warmup()
    f(rand(3))
    assert f.warmup(sizes=[16, 8], progress=False) == 2


def test_warmup_counts_captures_in_stats():
    f = jit(lambda x: x * 2, config=host())
    f.warmup(rand(1), sizes=[2, 4], progress=False)
    assert f.stats().captures - f.stats().evictions == f.registry.num_graphs() == 2


def test_bare_decorator_and_decorator_with_config():
    def plain(x):
        """Doc."""
        return x + 1

    bare = jit(plain)
    assert isinstance(bare, GraphedFunction)
    assert bare.__wrapped__ is plain and bare.__name__ == "plain" and bare.__doc__ == "Doc."

    @jit(config=host())
    def configured(x):
        return x - 1

    assert isinstance(configured, GraphedFunction)
    assert configured.__name__ == "configured"
    x = rand(3)
    assert np.array_equal(configured(x), x - 1)
    assert configured.stats().captures == 1
    if bare.backend.name == "host":
        assert np.array_equal(bare(x), x + 1)
        assert bare.stats().captures == 1


def test_stats_add_up_with_evictions_and_fallbacks():
    f = jit(mix_rows, config=host(max_cached_graphs=2, capture_sizes=[1, 2, 4, 8]))
    order = random.Random(11)
    calls = 0
    for i in range(80):
        n = order.choice([0, 1, 2, 3, 4, 5, 7, 8, 9, 12])
        x = rand(n, i)
        assert np.array_equal(f(x), mix_rows(x)), n
        calls += 1
        check_stats(f, calls)
        assert f.registry.num_graphs() <= 2
    stats = f.stats()
    assert stats.evictions > 0 and stats.fallbacks > 0 and stats.hits > 0
    assert stats.replays == stats.hits  # a call that captures returns its own eager run's result
    assert stats.to_dict()["calls"] == calls


def test_clear_drops_graphs_and_recaptures():
    f = jit(elementwise, config=host())
    x = rand(3)
    f(x)
    f(x)
    assert f.registry.num_graphs() == 1
    f.clear()
    assert f.registry.num_graphs() == 0
    assert f.stats().captures == 1  # stats are kept
    y = rand(3, 1)
    assert np.array_equal(f(y), elementwise(y))
    assert f.stats().captures == 2 and f.registry.num_graphs() == 1
    assert f.stats().calls == 3


def test_config_from_yaml_path(tmp_path):
    path = tmp_path / "graphs.yaml"
    path.write_text("backend: host\ncapture_sizes: [2, 4]\noutput_mode: view\n")
    f = jit(mix_rows, config=str(path))
    assert f.config.cudagraph_capture_sizes == (2, 4)
    assert f.config.output_mode == "view"
    x = rand(3)
    assert np.array_equal(f(x), mix_rows(x))
    y = rand(5)
    assert np.array_equal(f(y), mix_rows(y))
    assert f.registry.num_graphs() == 1 and f.stats().fallbacks == 1
    g = jit(mix_rows, config=path)  # a PathLike works too
    assert g.config.cudagraph_capture_sizes == (2, 4)


def test_call_with_descriptor_and_seq_len_buckets():
    f = jit(mix_rows, config=host(seq_len_buckets=[16, 32]))
    x = rand(3)
    assert np.array_equal(f.call_with_descriptor(BatchDescriptor(3, seq_len=10), x), mix_rows(x))
    assert f.registry.entries()[0].key.descriptor == BatchDescriptor(4, seq_len=16)
    assert np.array_equal(f.call_with_descriptor(BatchDescriptor(3, seq_len=40), x), mix_rows(x))
    assert f.stats().fallbacks == 1


def test_hot_shapes_count_replays():
    f = jit(lambda x: x + 1, config=host())
    for _ in range(5):
        f(rand(2))
    f(rand(7))
    assert f.registry.get_hot_shapes(top_k=1) == [(BatchDescriptor(2), 5)]


# -- threads -------------------------------------------------------------------------------------------


def test_four_threads_different_sizes():
    f = jit(mix_rows, config=host())
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def worker(t: int) -> None:
        try:
            barrier.wait()
            order = random.Random(t)
            for i in range(60):
                n = order.choice([1 + t, 3 + 2 * t, 9 + t, 16 - t])
                x = rand(n, t * 1000 + i)
                got = f(x)
                if not np.array_equal(got, mix_rows(x)):
                    raise AssertionError(f"thread {t} call {i}: wrong result for {n} rows")
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    check_stats(f, 4 * 60)


def test_replay_waiting_on_a_capture_that_evicts_its_graph():
    go, capturing = threading.Event(), threading.Event()

    def fn(x):
        if x.shape[0] == 8 and not go.is_set():
            capturing.set()
            go.wait(5)
        return x * 2

    f = jit(fn, config=host(capture_sizes=[4, 8], max_cached_graphs=1))
    x4, x8 = rand(4), rand(8, 1)
    assert np.array_equal(f(x4), x4 * 2)
    results = []
    other = threading.Thread(target=lambda: results.append(f(x8)))
    other.start()
    try:
        assert capturing.wait(5)
        threading.Timer(0.3, go.set).start()
        out = f(x4)  # waits for the capture, which evicts the size-4 graph
    finally:
        go.set()
        other.join()
    assert np.array_equal(out, x4 * 2)
    assert np.array_equal(results[0], x8 * 2)


# -- errors of the front door ------------------------------------------------------------------------


def test_bad_argnums_and_config():
    with pytest.raises(ValueError, match="both batch_argnums and static_argnums"):
        jit(lambda x: x, config=host(), static_argnums=(0,))
    with pytest.raises(TypeError, match="batch_argnums"):
        jit(lambda x: x, config=host(), batch_argnums=(-1,))
    with pytest.raises(TypeError, match="config must be"):
        jit(lambda x: x, config=42)


def test_capture_error_fallback_and_raise():
    def fn(x):
        return x / float(np.abs(x).max())  # a device-to-host read: CuPy refuses it under capture

    f = jit(fn, config=host())
    x = rand(3)
    assert np.array_equal(f(x), fn(x))
    assert f.registry.num_graphs() == 0
    assert f.stats().fallbacks_by_reason == {"device_to_host_read": 1}
    assert f.stats().capture_failures == 1
    y = rand(3, 1)
    assert np.array_equal(f(y), fn(y))  # eager on the new data: never the capture's value
    assert f.stats().capture_failures == 1  # the failed key is not retried
    g = jit(fn, config=host(on_capture_error="raise"))
    with pytest.raises(CaptureError, match=r"float\(\) of an array .* \(at test_jit_host.py:\d+: return x / float"):
        g(x)


def test_constant_identity_reused_by_another_array_is_not_trusted():
    """The fast path keys constants by id(); a dead constant whose id is reused must not replay."""
    f = jit(lambda x, w: x * w, config=host(), constant_argnums=(1,))
    x = np.ones((3, 2))
    results = []
    for value in range(1, 30):  # CPython reuses ids of freed arrays: some iterations collide
        w = np.full(2, float(value))
        results.append(f(x, w)[0, 0])
        del w
    assert results == [float(v) for v in range(1, 30)]


def test_constants_take_the_fast_path_and_alternating_sets_stay_correct(monkeypatch):
    f = jit(lambda x, w, b: x * w + b, config=host(), constant_argnums=(1, 2))
    w1, b1, w2, b2 = np.full(2, 2.0), np.full(2, 1.0), np.full(2, 3.0), np.full(2, -1.0)
    x = np.ones((3, 2))
    f(x, w1, b1)
    slow_calls = []
    original = f._call_slow
    monkeypatch.setattr(f, "_call_slow", lambda *a, **k: slow_calls.append(1) or original(*a, **k))
    for _ in range(5):
        assert f(x, w1, b1)[0, 0] == 3.0
    assert slow_calls == []  # same constant objects: every call replays on the fast path
    for w, b, want in [(w2, b2, 2.0), (w1, b1, 3.0), (w2, b2, 2.0), (w1, b2, 1.0)]:
        assert f(x, w, b)[0, 0] == want
    assert f.stats().fallbacks == 0


def test_batch_sizes_count_a_fast_path_call_that_falls_back():
    # A replay found by the fast path that cannot serve the call (here a Python value in the output that
    # changed since capture) runs eagerly: still a call of the traffic, counted in batch_sizes.
    state = {"flag": 0}
    f = jit(lambda u: (u + 1, state["flag"]), config=dict(backend="host", max_capture_size=8))
    x = np.ones((4, 2))
    for i in range(6):
        state["flag"] = int(i >= 3)
        f(x)
    stats = f.stats()
    assert stats.calls == 6 and stats.fallbacks_by_reason["replay_mismatch"] >= 1
    assert stats.batch_sizes.to_dict() == {"4": stats.calls}
