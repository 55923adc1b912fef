"""CUDAGraphManager end to end on the host backend."""

from __future__ import annotations

import random

import numpy as np
import pytest

import cupygraph.config.defaults
from cupygraph import CUDAGraphConfig, CUDAGraphManager, CUDAGraphMode, CupyGraphError, InputMismatchError

SIZES = [1, 2, 4, 8, 16]
D = 4


def make_manager(**fields) -> CUDAGraphManager:
    fields.setdefault("capture_sizes", SIZES)
    return CUDAGraphManager(dict(backend="host", **fields))


def rand(rows: int, seed: int = 0, d: int = D) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, d))


def mix_rows(x, y):
    return x * y - y.sum(axis=0)


@pytest.mark.parametrize("seed", [0, 1])
def test_execute_or_capture_random_sizes_equal_direct(seed):
    manager = make_manager()
    order = random.Random(seed)
    calls = 0
    for i in range(50):
        n = order.choice(range(1, 21))  # 17..20 are above the largest size and run eagerly
        x, y = rand(n, i), rand(n, 500 + i)
        out = manager.execute_or_capture(n, None, mix_rows, [x, y])
        assert np.array_equal(out, mix_rows(x, y)), n
        calls += 1
    stats = manager.stats()
    assert stats.hits + stats.misses == calls
    assert stats.captures - stats.evictions == manager.registry.num_graphs()
    assert stats.captures == manager.registry.num_graphs() <= len(SIZES)
    assert stats.hits > 0


def test_execute_or_capture_checks_shapes():
    manager = make_manager()
    x = rand(3)
    with pytest.raises(InputMismatchError, match="batch_size=4"):
        manager.execute_or_capture(4, None, lambda a: a, [x])
    with pytest.raises(InputMismatchError, match=r"expected \(3, 5\)"):
        manager.execute_or_capture(3, None, lambda a: a, [x], input_shapes=[(3, 5)])
    with pytest.raises(InputMismatchError, match="execute_fn returned shapes"):
        manager.execute_or_capture(3, None, lambda a: a * 2, [x], output_shapes=[(3, 7)])
    out = manager.execute_or_capture(3, None, lambda a: a * 2, [x], input_shapes=[(3, D)], output_shapes=[(3, D)])
    assert np.array_equal(out, x * 2)


def test_above_largest_runs_eagerly_with_reason():
    manager = make_manager()
    x, y = rand(17), rand(17, 1)
    assert np.array_equal(manager.execute_or_capture(17, None, mix_rows, [x, y]), mix_rows(x, y))
    assert manager.registry.num_graphs() == 0
    stats = manager.stats()
    assert dict(stats.fallbacks_by_reason) == {"above_largest_capture_size": 1}
    assert "17" in stats.detail("above_largest_capture_size") and "16" in stats.detail("above_largest_capture_size")


def test_mode_get_set():
    manager = make_manager()
    assert manager.mode is CUDAGraphMode.FULL and manager.is_enabled()
    x, y = rand(3), rand(3, 1)
    manager.execute_or_capture(3, None, mix_rows, [x, y])
    assert manager.registry.num_graphs() == 1
    manager.mode = "none"
    assert manager.mode is CUDAGraphMode.NONE and not manager.is_enabled()
    assert manager.registry.num_graphs() == 0  # graphs of the old mode are dropped
    assert manager.get_mode_for_batch(3) is CUDAGraphMode.NONE
    assert np.array_equal(manager.execute_or_capture(3, None, mix_rows, [x, y]), mix_rows(x, y))
    assert manager.registry.num_graphs() == 0
    assert manager.stats().fallbacks_by_reason == {"mode_none": 1}
    manager.mode = CUDAGraphMode.FULL
    assert manager.is_enabled()
    assert np.array_equal(manager.execute_or_capture(3, None, mix_rows, [x, y]), mix_rows(x, y))
    assert manager.registry.num_graphs() == 1 and manager.stats().captures == 2


def test_mode_switch_derives_a_config_and_leaves_the_callers_alone():
    """Regression (issue 11): the setter assigned to the caller's config object (shared with any
    other front door built from it) instead of deriving a new one."""
    config = CUDAGraphConfig(backend="host", capture_sizes=SIZES)
    manager = CUDAGraphManager(config)
    other = CUDAGraphManager(config)
    manager.mode = "PIECEWISE"
    assert config.mode is CUDAGraphMode.FULL and other.mode is CUDAGraphMode.FULL
    assert manager.config is not config and manager.config.mode is CUDAGraphMode.PIECEWISE
    assert manager.config.replace(mode="FULL") == config  # nothing else changed
    assert manager.dispatcher.config is manager.config and manager.registry.config is manager.config
    assert other.get_mode_for_batch(3) is CUDAGraphMode.FULL


def test_mode_switch_keeps_the_env_override(monkeypatch):
    monkeypatch.setattr(cupygraph.config.defaults, "_DISABLE_LOGGED", True)
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "1")
    manager = make_manager()
    manager.mode = "FULL"
    assert manager.mode is CUDAGraphMode.NONE
    x, y = rand(3), rand(3, 1)
    assert np.array_equal(manager.execute_or_capture(3, None, mix_rows, [x, y]), mix_rows(x, y))
    assert manager.registry.num_graphs() == 0


def test_mode_switch_to_piecewise_dispatches_piecewise():
    manager = make_manager()
    manager.mode = "PIECEWISE"
    assert manager.get_mode_for_batch(3) is CUDAGraphMode.PIECEWISE


def test_env_disable(monkeypatch):
    monkeypatch.setattr(cupygraph.config.defaults, "_DISABLE_LOGGED", True)  # keep the once-per-process log for others
    manager = make_manager()
    assert manager.is_enabled()
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "1")
    assert not manager.is_enabled()
    assert manager.get_mode_for_batch(3) is CUDAGraphMode.NONE
    disabled = make_manager()
    x, y = rand(3), rand(3, 1)
    assert np.array_equal(disabled.execute_or_capture(3, None, mix_rows, [x, y]), mix_rows(x, y))
    assert disabled.registry.num_graphs() == 0


def test_batch_sizes_count_every_call_replayed_or_run_eagerly(monkeypatch):
    manager = make_manager()
    for n in (3, 3, 4):
        manager.execute_or_capture(n, None, mix_rows, [rand(n), rand(n, 1)])
    manager.capture_graph(8, None, mix_rows, [((8, D), np.float64), ((8, D), np.float64)])
    manager.replay_graph(8, None, [rand(8), rand(8, 1)])
    manager.replay_graph(7, None, [rand(7), rand(7, 1)])
    stats = manager.stats()
    assert stats.calls == 5
    assert stats.batch_sizes.to_dict() == {"3": 2, "4": 1, "7": 1, "8": 1}
    monkeypatch.setattr(cupygraph.config.defaults, "_DISABLE_LOGGED", True)
    monkeypatch.setenv("CUPYGRAPH_DISABLE", "1")
    manager.execute_or_capture(5, None, mix_rows, [rand(5), rand(5, 1)])
    stats = manager.stats()
    assert stats.calls == 6 and stats.fallbacks_by_reason == {"mode_none": 1}
    assert stats.batch_sizes.total() == stats.calls and stats.batch_sizes.to_dict()["5"] == 1


def test_get_mode_for_batch_and_should_capture():
    manager = make_manager(min_tokens_for_graph=2)
    assert manager.get_mode_for_batch(3) is CUDAGraphMode.FULL
    assert manager.get_mode_for_batch(16) is CUDAGraphMode.FULL
    assert manager.get_mode_for_batch(17) is CUDAGraphMode.NONE  # above the largest
    assert manager.get_mode_for_batch(1) is CUDAGraphMode.NONE  # below min_tokens_for_graph
    assert manager.should_capture(3)
    assert not manager.should_capture(17)
    manager.capture_graph(3, None, lambda a: a + 1, [(3, D)], inputs=[rand(3)])
    assert not manager.should_capture(3) and not manager.should_capture(4)
    assert manager.should_capture(5)


def test_should_capture_false_after_execute_or_capture():
    manager = make_manager()
    x = rand(3)
    manager.execute_or_capture(3, None, lambda a: a + 1, [x])
    assert not manager.should_capture(3)


def test_capture_graph_then_replay_graph_equals_direct():
    def fn(x, y):
        return x - y.sum(axis=0), x * y

    manager = make_manager()
    x, y = rand(5), rand(5, 1)
    entry = manager.capture_graph(5, None, fn, [(5, D), (5, D)], [(5, D), (5, D)], inputs=[x, y])
    assert entry.key.descriptor.num_tokens == 8 and entry.backend_name == "host"
    for n, seed in [(5, 2), (8, 3), (6, 4), (5, 5)]:
        a, b = rand(n, seed), rand(n, seed + 100)
        got, want = manager.replay_graph(n, None, [a, b]), fn(a, b)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert entry.replay_count == 4
    assert manager.stats().hits == 4


def test_replay_graph_without_capture_raises():
    manager = make_manager()
    with pytest.raises(CupyGraphError, match="no graph captured for batch_size=3"):
        manager.replay_graph(3, None, [rand(3)])
    with pytest.raises(CupyGraphError, match="nothing to capture"):
        manager.capture_graph(17, None, lambda a: a, [(17, D)])


def test_two_functions_do_not_collide():
    def double(x):
        return x * 2

    def shift(x):
        return x + 100

    manager = make_manager()
    for i in range(6):
        n = (3, 4, 7)[i % 3]
        x = rand(n, i)
        assert np.array_equal(manager.execute_or_capture(n, None, double, [x]), x * 2)
        assert np.array_equal(manager.execute_or_capture(n, None, shift, [x]), x + 100)
    assert manager.registry.num_graphs() == 4  # two functions x sizes 4 and 8
    stats = manager.stats()
    assert stats.captures == 4 and stats.hits == 8


def test_seq_len_buckets():
    manager = make_manager(seq_len_buckets=[16, 32])
    x = rand(3)
    assert np.array_equal(manager.execute_or_capture(3, 10, lambda a: a * 3, [x]), x * 3)
    (entry,) = manager.registry.entries()
    assert entry.key.descriptor.seq_len == 16
    assert manager.get_mode_for_batch(3, seq_len=20) is CUDAGraphMode.FULL
    assert manager.get_mode_for_batch(3, seq_len=33) is CUDAGraphMode.NONE
    assert np.array_equal(manager.execute_or_capture(3, 33, lambda a: a * 3, [x]), x * 3)
    assert manager.stats().fallbacks == 1


def test_clear_keeps_stats():
    manager = make_manager()
    x = rand(3)
    manager.execute_or_capture(3, None, np.negative, [x])
    manager.clear()
    assert manager.registry.num_graphs() == 0
    assert np.array_equal(manager.execute_or_capture(3, None, np.negative, [x]), -x)
    assert manager.stats().captures == 2


@pytest.mark.parametrize("input_shapes, words", [
    ([(3, "a")], "input_shapes[0] must be a shape"),
    ([(3, D), 3], "input_shapes[1] must be a shape"),
    ([(3, -1)], "input_shapes[0] must be a shape"),
    ([(3, 2.5)], "input_shapes[0] must be a shape"),
    ([None], "input_shapes[0] must be a shape"),
    ([((3, D), "no_such_dtype")], "input_shapes[0]: 'no_such_dtype' is not a dtype"),
    ([(4, D)], "input_shapes[0] is (4, 4), whose leading axis is not batch_size=3"),
    ("3,4", "input_shapes must be a list"),
    (7, "input_shapes must be a list"),
])
def test_a_malformed_input_shapes_entry_is_named(input_shapes, words):
    # Regression (issue 27): a raw NumPy error that named neither the argument nor the entry.
    manager = make_manager()
    with pytest.raises((TypeError, ValueError)) as info:
        manager.capture_graph(3, None, lambda a: a + 1, input_shapes)
    assert words in str(info.value)
    assert manager.registry.num_graphs() == 0


def test_input_shapes_take_a_shape_or_a_shape_dtype_pair():
    manager = make_manager()
    entry = manager.capture_graph(3, None, lambda a, b: a + b, [(np.int64(3), 2), ((3, 2), "float32")])
    assert entry.key.descriptor.num_tokens == 4
    x, y = np.ones((3, 2), dtype=np.float32), np.full((3, 2), 2, dtype=np.float32)  # a shape alone: float32
    assert np.array_equal(manager.replay_graph(3, None, [x, y]), x + y)


@pytest.mark.parametrize("input_shapes, inputs, words", [
    ([(3, D)], [rand(3), rand(3)], "input_shapes has 1 entries for 2 inputs"),
    ([(3, D + 1)], [rand(3)], "input 0 has shape (3, 4), expected (3, 5) (input_shapes[0])"),
    ([((3, D), "float32")], [rand(3)], "input 0 has dtype float64, expected float32 (input_shapes[0])"),
])
def test_inputs_given_with_input_shapes_must_agree_with_them(input_shapes, inputs, words):
    for call in ("capture_graph", "execute_or_capture"):
        manager = make_manager()
        fn = lambda *arrays: arrays[0] + 1
        with pytest.raises(InputMismatchError) as info:
            if call == "capture_graph":
                manager.capture_graph(3, None, fn, input_shapes, inputs=inputs)
            else:
                manager.execute_or_capture(3, None, fn, inputs, input_shapes=input_shapes)
        assert words in str(info.value), call
