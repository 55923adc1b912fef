"""What each key's capture cost, measured at capture (issue 32), on the host backend: the static buffers
made for it (its pool bytes there), no executable, its capture time; kept in the statistics (bounded,
after eviction too), shown by ``describe()``, and what ``plan-sizes --memory-limit`` plans from
(measured, fitted for sizes not captured, or the flat figure when nothing was measured)."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.cache import stats as stats_module
from cupygraph.cache.memory import base_array
from cupygraph.cli import main
from cupygraph.diagnostics.memory_model import MeasuredCosts, MemoryModel, memory_model
from cupygraph.diagnostics.plan_sizes import expected_waste, plan_capture_sizes, sizes_within_memory

HOST = dict(backend="host", capture_sizes=[4, 8, 16])


def affine(x, w):
    return x * 2 + w


def rand(*shape):
    return np.random.default_rng(sum(shape)).random(shape).astype(np.float32)


def costs_by_size(f):
    return {c.size: c for c in f.stats().costs()}


def test_largest_first_the_largest_key_makes_the_static_buffers_the_smaller_ones_view():
    f = cg.jit(affine, config=HOST)
    f.warmup(rand(3, 5), rand(5), progress=False)  # 16, then 8 and 4 on views of its buffers
    entries = {e.key.descriptor.num_tokens: e for e in f.registry.entries()}
    costs = costs_by_size(f)
    largest = entries[16]
    held = largest.static_inputs + largest.whole_inputs
    assert costs[16].pool_bytes == sum(b.nbytes for b in held) == 16 * 5 * 4 + 5 * 4
    assert costs[8].pool_bytes == costs[4].pool_bytes == 0
    assert all(base_array(entries[n].static_inputs[0]) is base_array(largest.static_inputs[0]) for n in (4, 8))


def test_smallest_first_each_key_makes_its_own_batched_buffer():
    f = cg.jit(affine, config=HOST)
    w = rand(5)
    for rows in (3, 6, 12):  # first calls capture 4, 8, 16 in that order
        f(rand(rows, 5), w)
    entries = {e.key.descriptor.num_tokens: e for e in f.registry.entries()}
    costs = costs_by_size(f)
    assert costs[4].pool_bytes == entries[4].static_inputs[0].nbytes + entries[4].whole_inputs[0].nbytes
    for n in (8, 16):  # the unbatched argument's buffer fits already: reused
        assert costs[n].pool_bytes == entries[n].static_inputs[0].nbytes == n * 5 * 4
    buffers = [base_array(b) for e in entries.values() for b in e.static_inputs + e.whole_inputs]
    bases = {id(base): base.nbytes for base in buffers}
    assert sum(c.pool_bytes for c in costs.values()) == sum(bases.values())  # every buffer made, counted once


def test_the_host_reports_no_executable_and_says_why():
    f = cg.jit(affine, config=HOST)
    f(rand(3, 5), rand(5))
    (cost,) = f.stats().costs()
    assert cost.executable_bytes is None and "host backend makes no executable" in cost.executable_source
    assert cost.total_bytes == cost.pool_bytes and cost.capture_s > 0
    assert cost.signature == "batched array float32[n, 5]; array float32[5]"
    record = f.stats().to_dict()["graph_costs"][0]
    assert record["pool_bytes"] == cost.pool_bytes and record["executable_bytes"] is None and record["size"] == 4


def test_describe_shows_each_graphs_measured_cost():
    f = cg.jit(affine, config=HOST)
    f.warmup(rand(3, 5), rand(5), sizes=[16, 4], progress=False)
    lines = f.describe().splitlines()
    assert "pool taken" in lines[2] and "executable" in lines[2]
    row16 = next(line for line in lines if line.startswith("FULL  16"))
    assert f" {16 * 5 * 4 + 5 * 4:,} " in row16
    assert "executable: none: the host backend makes no executable" in lines[-1]


def test_describe_on_the_host_says_it_has_no_pool_and_what_pool_taken_counts():
    """The host backend has no pool: its header said pool=0 bytes while its pool-taken column summed the
    static buffers; now it says there is no pool and what the column counts."""
    f = cg.jit(affine, config=HOST)
    f.warmup(rand(3, 5), rand(5), sizes=[16, 4], progress=False)
    text = f.describe()
    assert "pool=none" in text.splitlines()[0] and "pool=0 bytes" not in text
    assert "pool taken: the bytes of the static buffers made for the key" in text
    assert sum(cost.pool_bytes for cost in f.stats().graph_costs.values()) > 0


def test_the_inspect_command_shows_the_measured_costs(capsys):
    assert main(["inspect", "--backend", "host", "--calls", "20"]) == 0
    out = capsys.readouterr().out
    assert "pool taken" in out and "executable: none: the host backend makes no executable" in out


def test_costs_outlive_eviction_a_recapture_replaces_them_and_they_stay_bounded(monkeypatch):
    f = cg.jit(affine, config=dict(HOST, max_cached_graphs=1))
    w = rand(5)
    f(rand(3, 5), w)
    f(rand(12, 5), w)  # evicts the graph for 4
    assert f.registry.num_graphs() == 1 and sorted(costs_by_size(f)) == [4, 16]
    first = costs_by_size(f)[4]
    f(rand(3, 5), w)  # captured again
    assert sorted(costs_by_size(f)) == [4, 16] and costs_by_size(f)[4] is not first
    monkeypatch.setattr(stats_module, "MAX_GRAPH_COSTS", 2)
    f(rand(7, 5), w)
    assert sorted(costs_by_size(f)) == [4, 8]  # the oldest key's cost went
    stats = f.stats()
    stats.reset()
    assert f.stats().costs() == []


# -- plan-sizes from what was measured ------------------------------------------------------------


def traffic_and_costs():
    """A host function whose traffic is 3 (50 calls), 6 (20), 12 (10) rows; it captured 4, 8 and 16, smallest
    first, each key making its own buffer: 4x256x4 bytes per row of the padded size."""
    f = cg.jit(lambda x: x * 2, config=HOST)
    for rows, calls in ((3, 50), (6, 20), (12, 10)):
        for _ in range(calls):
            f(rand(rows, 256))
    return f


def test_plan_sizes_uses_the_measured_bytes_per_key():
    f = traffic_and_costs()
    measured = {c.size: c.total_bytes for c in f.stats().costs()}
    assert measured == {4: 4096, 8: 8192, 16: 16384}
    # The measured sizes alone (the traffic pads to them as it is): the plan may keep any of them.
    plan = plan_capture_sizes(f, current=[4, 8, 16], memory_limit=16384 + 4096, largest=16)
    assert "memory: measured per key at capture (1 function, sizes [4, 8, 16])" in plan.memory
    model = memory_model([f], None)
    assert model.cost(plan.sizes) <= 16384 + 4096
    assert f"the proposed sizes cost {model.cost(plan.sizes):,} of memory_limit {16384 + 4096:,}" in plan.memory
    only_largest = plan_capture_sizes(f, current=[4, 8, 16], memory_limit=16384, largest=16)
    assert only_largest.sizes == (16,)
    with pytest.raises(ValueError, match="does not hold the graph of the largest size 16 \\(16,384 bytes, measured\\)"):
        plan_capture_sizes(f, current=[4, 8, 16], memory_limit=16383, largest=16)


def test_sizes_not_captured_cost_a_line_fitted_through_the_captured_ones():
    costs = MeasuredCosts.fit({4: 1000 + 4 * 300, 8: 1000 + 8 * 300, 16: 1000 + 16 * 300})
    assert costs.intercept == pytest.approx(1000) and costs.slope == pytest.approx(300)
    assert costs.bytes_at(8) == 3400 and costs.bytes_at(12) == 1000 + 12 * 300
    falling = MeasuredCosts.fit({4: 900, 16: 100})  # the line goes below every measurement: held at the cheapest
    assert falling.bytes_at(100) == 100
    assert MeasuredCosts.fit({8: 777}).bytes_at(3) == 777  # one size: its cost everywhere
    f = traffic_and_costs()
    plan = plan_capture_sizes(f, current=[4, 8, 16], memory_limit=10**6, largest=16)
    assert plan.sizes == (3, 6, 12, 16)  # every seen size fits: no padding at all
    assert "fitted for sizes [3, 6, 12]: bytes = 0 + 1,024.0 x size" in plan.memory


def test_the_flat_figure_is_the_fallback_when_nothing_was_measured():
    plan = plan_capture_sizes({1: 5, 2: 5, 3: 5, 4: 5}, current=[4], memory_limit=3000, bytes_per_graph=1000)
    assert len(plan.sizes) == 3
    assert plan.memory.startswith("memory: flat 1,000 bytes per graph (--bytes-per-graph; nothing measured)")
    f = traffic_and_costs()
    both = plan_capture_sizes(f, current=[4, 8, 16], memory_limit=10**6, bytes_per_graph=1, largest=16)
    assert "bytes_per_graph not used: the measured costs take its place" in both.memory


@pytest.mark.parametrize("seed", range(6))
def test_under_equal_measured_costs_the_plan_is_the_count_optimum(seed):
    # Every size costing the same, the memory limit is a limit on the number of sizes, where the planner is exact.
    rng = np.random.default_rng(seed)
    points = sorted({int(s): int(rng.integers(1, 40)) for s in rng.integers(1, 30, size=8)}.items())
    equal = MemoryModel((MeasuredCosts.fit({30: 500}),))
    for graphs in range(1, 5):
        chosen = sizes_within_memory(points, 30, equal, 500 * graphs)
        assert len(chosen) <= graphs and chosen[-1] == 30
        best = min(expected_waste(points, (*combo, 30)).padded_rows
                   for k in range(graphs) for combo in itertools.combinations([n for n, _ in points if n != 30], k))
        assert expected_waste(points, chosen).padded_rows == best


def stats_file(f, tmp_path):
    stats = f.stats()
    path = tmp_path / "stats.json"
    path.write_text(json.dumps({**stats.to_dict(), "batch_sizes": stats.batch_sizes.to_dict()}))
    return path


def test_the_command_plans_from_a_saved_stats_file_with_the_memory_budget(tmp_path, capsys):
    path = stats_file(traffic_and_costs(), tmp_path)
    assert main(["plan-sizes", "--histogram", str(path), "--memory-budget", "20KiB", "--largest", "16"]) == 0
    out = capsys.readouterr().out
    assert "memory: measured per key at capture (1 function, sizes [4, 8, 16])" in out
    assert "of memory_limit 20,480 bytes" in out


def test_the_command_plans_from_a_scripts_measured_costs(tmp_path, capsys):
    script = tmp_path / "work.py"
    script.write_text("import numpy as np\nimport cupygraph as cg\n"
                      "f = cg.jit(lambda x: x * 2, config=dict(backend='host', capture_sizes=[4, 8]))\n"
                      "for n in [3, 3, 7]:\n    f(np.ones((n, 64), np.float32))\n")
    assert main(["plan-sizes", "--script", str(script), "--memory-limit", "4KiB", "--largest", "8"]) == 0
    out = capsys.readouterr().out
    assert "memory: measured per key at capture (1 function, sizes [4, 8])" in out
    assert "proposed capture_sizes: [3, 8]" in out  # 3 (fitted 1,024 bytes) + 8 (2,048) fit 4 KiB


@pytest.mark.parametrize(("costs", "message"), [
    ('[{"size": 4, "pool_bytes": -1}]', r"stats.json: graph_costs\[0\].pool_bytes must be a whole number of at least"),
    ('[{"pool_bytes": 10}]', r"stats.json: graph_costs\[0\].size must be a whole number of at least 1, got None"),
    ('{"4": 10}', "stats.json: graph_costs must be a list of records"),
    ('[{"size": 4, "pool_bytes": 1, "executable_bytes": 1.5}]', r"graph_costs\[0\].executable_bytes must be a whole"),
])
def test_the_command_names_the_file_and_record_of_a_bad_cost(tmp_path, monkeypatch, capsys, costs, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stats.json").write_text(f'{{"batch_sizes": {{"3": 2}}, "graph_costs": {costs}}}')
    assert main(["plan-sizes", "--histogram", "stats.json", "--memory-limit", "1MiB"]) != 0
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err


def test_a_file_with_costs_but_no_batch_sizes_says_where_the_counts_go(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stats.json").write_text('{"3": 2, "graph_costs": []}')
    assert main(["plan-sizes", "--histogram", "stats.json", "--max-graphs", "2"]) != 0
    assert "holds graph_costs but no batch_sizes: put the calls per batch size under 'batch_sizes'" in (
        capsys.readouterr().err)


def test_the_executables_made_for_caller_addresses_add_their_memory_to_the_statistics():
    from cupygraph.cache.stats import CUDAGraphStats

    stats = CUDAGraphStats()
    stats.add_entry("FULL", {}, {}, {}, {"made": 2, "seconds": 0.25, "bytes": 3 << 20, "repointed_calls": 1})
    stats.add_entry("FULL", {}, {}, {}, {"made": 1, "seconds": 0.5, "bytes": 1 << 20})
    assert (stats.executables_made, stats.executable_bytes_made) == (3, 4 << 20)
    assert stats.to_dict()["executable_bytes_made"] == 4 << 20
    stats.reset()
    assert stats.executable_bytes_made == 0


def test_keys_whose_words_agree_keep_a_cost_each():
    """Two keys of one size that differ only past the shortened words of their signature (a static argument
    after many arrays) hold two graphs: each keeps its cost, and plan-sizes counts both."""
    def many(x, a, b, c, d, e, g, h, i, j, k, scale):
        return x * scale

    f = cg.jit(many, config=dict(backend="host", capture_sizes=[4]), static_argnums=(11,))
    weights = [rand(3) for _ in range(10)]
    for scale in (1, 2):
        f(rand(4, 3), *weights, scale)
    costs = f.stats().costs()
    assert f.registry.num_graphs() == 2 and len(costs) == 2
    assert costs[0].signature == costs[1].signature  # the words agree: the key tells them apart
    assert memory_model([f], None).cost([4]) == sum(c.total_bytes for c in costs)
