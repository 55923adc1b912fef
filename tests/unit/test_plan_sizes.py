"""Capture sizes planned from traffic (issue 17): the bounded histogram, its counting by jit (fast
path included), the exact planner against brute force, and ``cupygraph plan-sizes``."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.cache.histogram import EXACT_UP_TO, SizeHistogram, bucket_of
from cupygraph.cli import main
from cupygraph.config.files import load_config
from cupygraph.diagnostics.plan_sizes import expected_waste, optimal_sizes, plan_capture_sizes


def brute_force(points, largest, limit, pool):
    """The least padding over every subset of ``pool`` (with ``largest``) of at most ``limit`` sizes."""
    others = [s for s in pool if s != largest]
    best = None
    for k in range(0, limit):
        for combo in itertools.combinations(others, k):
            waste = expected_waste(points, (*combo, largest)).padded_rows
            best = waste if best is None else min(best, waste)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_planner_matches_brute_force_over_every_size_list(seed):
    rng = np.random.default_rng(seed)
    largest = int(rng.integers(6, 14))
    sizes = rng.choice(np.arange(1, largest + 1), size=int(rng.integers(1, 7)), replace=False)
    points = {int(s): int(rng.integers(1, 50)) for s in sizes}
    for limit in range(1, 5):
        chosen = optimal_sizes(sorted(points.items()), largest, limit)
        assert len(chosen) <= limit and max(chosen) == largest
        # Over every subset of 1..largest, not only the seen sizes: the candidate set loses nothing.
        assert expected_waste(points, chosen).padded_rows == brute_force(points, largest, limit,
                                                                          range(1, largest + 1))


def zipf(rng, n, largest):
    return np.minimum(rng.zipf(1.3, n), largest)


def uniform(rng, n, largest):
    return rng.integers(1, largest + 1, n)


def bimodal(rng, n, largest):
    small = np.clip(rng.normal(4, 1.5, n), 1, largest)
    big = np.clip(rng.normal(0.8 * largest, 4, n), 1, largest)
    return np.where(rng.random(n) < 0.7, small, big).round().astype(int)


@pytest.mark.parametrize("traffic", [uniform, zipf, bimodal])
@pytest.mark.parametrize("limit", [1, 2, 3, 6])
def test_synthetic_traffic_gets_the_optimum_and_beats_a_static_list(traffic, limit):
    rng = np.random.default_rng(limit)
    largest = 48
    histogram = SizeHistogram()
    for n in traffic(rng, 5000, largest):
        histogram.add(int(n))
    plan = plan_capture_sizes(histogram, current=[1, 2, 4, 8, 16, 24, 32, 40, 48][-limit:], max_graphs=limit)
    assert len(plan.sizes) <= limit and max(plan.sizes) == largest
    seen = [n for n, _ in histogram.items()]
    if limit <= 3:  # exhaustive over the seen sizes
        assert plan.proposed.padded_rows == brute_force(histogram, largest, limit, seen)
    assert plan.proposed.padded_rows <= plan.current.padded_rows
    assert plan.proposed.graphed_calls == plan.current.graphed_calls == 5000


def test_expected_waste_counts_padding_and_eager_calls_exactly():
    waste = expected_waste({1: 10, 3: 5, 4: 1, 9: 2}, [2, 4])
    assert waste.padded_rows == 10 * 1 + 5 * 1 + 0  # 1 -> 2, 3 -> 4, 4 -> 4
    assert waste.eager_calls == 2 and waste.graphed_calls == 16 and waste.computed_rows == 20 + 20 + 4
    assert waste.per_call == pytest.approx(15 / 16)


def test_limits_by_memory_and_bad_limits_name_the_problem():
    plan = plan_capture_sizes({1: 5, 2: 5, 3: 5, 4: 5}, current=[4], memory_limit=3000, bytes_per_graph=1000)
    assert len(plan.sizes) == 3
    with pytest.raises(ValueError, match="bytes_per_graph"):
        plan_capture_sizes({1: 1}, current=[4], memory_limit=3000)
    with pytest.raises(ValueError, match="max_graphs \\(--max-graphs\\) or memory_limit"):
        plan_capture_sizes({1: 1}, current=[4])
    with pytest.raises(ValueError, match="no calls"):
        plan_capture_sizes({}, current=[4], max_graphs=2)
    with pytest.raises(ValueError, match="does not hold one graph"):
        plan_capture_sizes({1: 1}, current=[4], memory_limit=10, bytes_per_graph=1000)


def test_the_histogram_stays_bounded_and_rounds_large_sizes_up():
    histogram = SizeHistogram()
    for n in range(1, 1_000_001, 7):
        histogram.add(n)
    assert len(histogram) < 3200
    for n in (EXACT_UP_TO, EXACT_UP_TO + 1, 5000, 123_457, 999_999):
        assert n <= bucket_of(n) <= n * (1 + 1 / 64)
    assert bucket_of(EXACT_UP_TO) == EXACT_UP_TO and bucket_of(17) == 17
    with pytest.raises(ValueError, match="batch size must be at least 1"):
        SizeHistogram({0: 3})
    with pytest.raises(ValueError, match="count of batch size 2"):
        SizeHistogram({2: -1})


def test_jit_counts_every_call_by_its_real_rows_fast_path_included():
    f = cg.jit(lambda x: x + 1, config=dict(backend="host", capture_sizes=[4, 8]))
    for rows, calls in ((3, 10), (7, 5), (12, 2)):  # 12 runs eagerly: above the largest size
        for _ in range(calls):
            f(np.ones((rows, 2), np.float32))
    assert f.stats().hits == 9 + 4  # most calls took the fast path
    assert f.stats().batch_sizes.items() == [(3, 10), (7, 5), (12, 2)]
    f(np.ones((3, 2), np.float32))
    f.clear()  # dropping the plans keeps what they counted
    f(np.ones((3, 2), np.float32))
    assert dict(f.stats().batch_sizes.items())[3] == 12
    f.warmup(np.ones((3, 2), np.float32))  # warm-up is not traffic
    assert f.stats().batch_sizes.total() == 19
    plan = plan_capture_sizes(f, current=f.config.cudagraph_capture_sizes, max_graphs=2, largest=12)
    assert plan.sizes == (3, 12)


def test_the_command_plans_from_a_histogram_file_and_writes_a_config(tmp_path, capsys):
    traffic = tmp_path / "traffic.json"
    traffic.write_text(json.dumps({"batch_sizes": {"1": 100, "3": 50, "5": 40, "17": 10, "100": 3}}))
    out = tmp_path / "planned.yaml"
    assert main(["plan-sizes", "--histogram", str(traffic), "--max-graphs", "3", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "current : 51 sizes" in printed and "proposed: 3 sizes" in printed
    config = load_config(out)
    assert config.cudagraph_capture_sizes == (5, 100, 512)
    proposed = expected_waste({1: 100, 3: 50, 5: 40, 17: 10, 100: 3}, (5, 100, 512))
    assert f"{proposed.per_call:.2f} padding rows per graphed call" in printed


def test_the_command_plans_from_a_scripts_functions(tmp_path, capsys):
    script = tmp_path / "work.py"
    script.write_text(
        "import sys\nimport numpy as np\nimport cupygraph as cg\n"
        "f = cg.jit(lambda x: x * 2, config=dict(backend='host'))\n"
        "for n in [int(a) for a in sys.argv[1:]] * 5:\n    f(np.ones((n, 2)))\n")
    assert main(["plan-sizes", "--script", str(script), "--max-graphs", "2", "--", "3", "30"]) == 0
    out = capsys.readouterr().out
    assert "traffic: 10 calls" in out and "proposed capture_sizes: [30, 512]" in out


def test_the_command_compares_with_the_scripts_own_config_unless_config_is_given(tmp_path, capsys):
    """Regression: without --config the current line was the default 51 sizes, not the function's."""
    script = tmp_path / "work.py"
    script.write_text(
        "import numpy as np\nimport cupygraph as cg\n"
        "f = cg.jit(lambda x: x * 2, config=dict(backend='host', max_capture_size=16))\n"
        "for n in [3, 3, 20]:\n    f(np.ones((n, 2)))\n")
    out = tmp_path / "planned.yaml"
    assert main(["plan-sizes", "--script", str(script), "--max-graphs", "2", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert expected_waste({3: 2, 20: 1}, (1, 2, 4, 8, 16)).describe("current ") in printed
    assert "current : 5 sizes" in printed and "1 eager calls above 16" in printed
    assert load_config(out).backend == "host"  # the function's config, with the proposed sizes
    given = tmp_path / "given.yaml"
    given.write_text("capture_sizes: [4, 32]\n")
    assert main(["plan-sizes", "--script", str(script), "--max-graphs", "2", "--config", str(given)]) == 0
    assert "current : 2 sizes" in capsys.readouterr().out


def test_the_command_refuses_a_script_whose_functions_disagree_on_sizes(tmp_path, capsys):
    script = tmp_path / "work.py"
    script.write_text(
        "import numpy as np\nimport cupygraph as cg\n"
        "def small(x):\n    return x + 1\n"
        "def large(x):\n    return x * 2\n"
        "f = cg.jit(small, config=dict(backend='host', max_capture_size=16))\n"
        "g = cg.jit(large, config=dict(backend='host', max_capture_size=64))\n"
        "f(np.ones((3, 2)))\ng(np.ones((3, 2)))\n")
    assert main(["plan-sizes", "--script", str(script), "--max-graphs", "2"]) == 1
    err = capsys.readouterr().err
    assert "small captures sizes [1, 2, 4, 8, 16], large [1, 2, 4, 8, 16, 24" in err and "give --config FILE" in err


@pytest.mark.parametrize(("argv", "message"), [
    (["plan-sizes", "--max-graphs", "2"], "--histogram FILE or --script FILE"),
    (["plan-sizes", "--histogram", "h.json"], "give max_graphs (--max-graphs) or memory_limit"),
])
def test_the_command_explains_what_is_missing(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.json").write_text('{"4": 2}')
    assert main(argv) != 0
    assert message in capsys.readouterr().err


# -- issue 27: the API checks its arguments as the command does ------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    # Regression: a list of batch sizes raised "cannot unpack non-iterable int object".
    (dict(traffic=[1, 2, 3]), TypeError, r"traffic: expected a mapping of batch size to calls .*collections.Counter"),
    (dict(traffic=5), TypeError, "traffic: expected a mapping of batch size to calls.*got int 5"),
    (dict(traffic="3: 10"), TypeError, "traffic: expected .*got str"),
    (dict(traffic=[(1, 2, 3)]), TypeError, r"traffic: expected .*holding \(1, 2, 3\)"),
    (dict(traffic={"a": 1}), ValueError, "traffic: batch size must be a whole number, got 'a'"),
    # Regression: read as a histogram holding the size 'batch_sizes'.
    (dict(traffic={"batch_sizes": [[3, 2]]}), TypeError, r"traffic: batch_sizes must be a mapping of batch size to "
                                                         r"calls \(stats\(\).batch_sizes.to_dict\(\)\), got list"),
    (dict(current=8), TypeError, "current must be a list of positive integers, got int 8"),
    (dict(current=[1, "8"]), TypeError, r"current\[1\] must be a positive integer"),
    (dict(max_graphs="2"), TypeError, r"max_graphs \(--max-graphs\) must be a positive integer, got str '2'"),
    (dict(max_graphs=2.5), TypeError, r"max_graphs \(--max-graphs\) must be a positive integer"),
    (dict(largest="12"), TypeError, r"largest \(--largest\) must be a positive integer"),
    (dict(largest=0), ValueError, r"largest \(--largest\) must be a positive integer, got 0"),
    (dict(max_graphs=None, memory_limit="2GiB", bytes_per_graph=10), TypeError,
     r"memory_limit \(--memory-limit\) must be a positive integer"),
])
def test_plan_capture_sizes_checks_each_argument(kwargs, error, message):
    call = dict(traffic={1: 3, 5: 2}, current=[1, 8], max_graphs=2) | kwargs
    traffic = call.pop("traffic")
    with pytest.raises(error, match=message):
        plan_capture_sizes(traffic, **call)


def test_the_api_takes_every_form_of_traffic_the_command_reads():
    counts = {1: 3, 5: 2}
    expected = plan_capture_sizes(counts, current=[1, 8], max_graphs=2)
    for traffic in ({"batch_sizes": {"1": 3, "5": 2}}, [(1, 3), (5, 2)], SizeHistogram(counts)):
        assert plan_capture_sizes(traffic, current=[1, 8], max_graphs=2) == expected
    assert expected_waste(counts, np.array([1, 8])) == expected.current


@pytest.mark.parametrize(("content", "message"), [
    ("[1, 2, 3]", "h.json: expected a mapping of batch size to calls"),
    ('{"a": 1}', "h.json: batch size must be a whole number"),
    ('"text"', "h.json: expected a mapping of batch size to calls .*got str"),
])
def test_the_command_reports_the_same_check_naming_the_file(tmp_path, monkeypatch, capsys, content, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.json").write_text(content)
    assert main(["plan-sizes", "--histogram", "h.json", "--max-graphs", "2"]) != 0
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err
