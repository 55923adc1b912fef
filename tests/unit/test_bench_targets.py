"""Issue 30's measurement harness without a GPU: the host-time target's floors and check list
(tools/bench_targets.py), the order its callers take their inputs in, the chain targets
(tools/bench_headline.py), and the chain of plain cupy.RawModule kernels, compiled and scanned
with NVRTC as the GPU run will: every kernel waits on sm_90, none below it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from extras import needs_nvrtc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools import bench, bench_targets  # noqa: E402
from tools.bench_blocks import in_order  # noqa: E402
from tools.bench_headline import measured_targets, targets  # noqa: E402
from tools.bench_workloads import WORKLOADS, raw_chain_source  # noqa: E402

FLOOR = bench_targets.FLOOR


def target_result(**host_us: float) -> dict:
    return {"workload": "one kernel", "issue_30_target": True,
            "host_us": {FLOOR: 2.0, bench_targets.LOOP_COST: 2.25, **host_us}}


def test_each_jit_row_is_measured_against_its_own_floor_and_the_limit_is_inclusive():
    result = target_result(**{"jit copy mode, 8 inputs in turn": 5.0, "jit view mode, 8 inputs in turn": 5.5})
    bench_targets.above_floor(result)
    assert result["above_floor_us"]["host_us"]["jit view mode, 8 inputs in turn"] == 3.5
    by_row = {t["row"]: t for t in result["targets"]}
    assert set(by_row) == {"jit copy mode, 8 inputs in turn", "jit view mode, 8 inputs in turn"}  # floor, loop: not
    assert by_row["jit copy mode, 8 inputs in turn"]["met"] is True  # exactly 3 µs above: at most 3, met
    assert by_row["jit view mode, 8 inputs in turn"]["met"] is False


def test_results_of_other_workloads_get_figures_above_their_floor_but_no_target():
    chain = {"workload": "chain [1024]", "latency_us": {"bare graph, no copies": 40.0, "jit auto": 38.5},
             "gpu_us": {"jit auto": 30.0}}
    bench_targets.above_floor(chain)
    assert chain["above_floor_us"] == {"latency_us": {"bare graph, no copies": 0.0, "jit auto": -1.5}}
    assert "targets" not in chain  # no floor among the GPU figures: none made up


def test_the_check_list_says_pass_fail_and_not_measured_and_counts():
    good = target_result(**{"jit copy mode, two outputs, 8 inputs in random order": 4.0})
    bad = dict(target_result(**{"jit view mode, 8 inputs in random order": 9.0}), workload="4 MiB",
               gpu_us={FLOOR: 5.0, "jit view mode, 8 inputs in random order": 5.5})
    failed = {"workload": "one kernel, constants", "issue_30_target": True, "error": "TypeError: no such option"}
    other = {"workload": "chain", "host_us": {"bare graph, no copies": 1.0, "jit auto": 99.0}}
    payload = {"device": "card", "date": "today", "results": [good, bad, failed, other]}
    for result in payload["results"]:
        bench_targets.above_floor(result)
    lines = bench_targets.check_list(payload)
    assert lines[0].startswith("Issue 30 host-time target") and "card" in lines[0]
    assert any(line.strip().startswith("PASS") and "+2.00 us" in line and "two outputs" in line for line in lines)
    fail = next(line for line in lines if line.strip().startswith("FAIL"))
    assert "+7.00 us" in fail and "4 MiB" in fail and "GPU 5.50 us per call, floor 5.00" in fail
    assert any("NOT MEASURED" in line and "no such option" in line for line in lines)
    assert not any("jit auto" in line for line in lines)  # the chain has no host-time target
    assert lines[-1].strip() == "1 of 2 rows meet the target"


def test_a_caller_takes_its_inputs_in_the_given_order_round_and_round_with_the_same_rest():
    seen = []
    call = in_order(lambda x, *rest: seen.append((x, rest)), ["a", "b", "c"], [2, 0, 0, 1], "w")
    for _ in range(6):
        call()
    assert [x for x, _ in seen] == ["a", "a", "b", "c", "a", "a"]  # order[1:], then round again
    assert all(rest == ("w",) for _, rest in seen)


# -- issue 30's chain targets ----------------------------------------------------------------------------


def row(workload, key, lat, gpu, size=1024):
    return dict(workload=workload, axis="n", size=size, key=key, competitor=bench.COMPETITORS[key],
                latency_us=lat, gpu_us=gpu, host_issue_us=5.0)


def test_the_chain_targets_read_the_right_rows_and_metric():
    rows = [row("chain-rawmodule", "cupy", 600.0, 590.0), row("chain-rawmodule", "jit-copy", 95.0, 80.0),
            row("chain-rawmodule", "jit-view", 90.0, 69.0), row("chain-rawmodule", "jit-plain", 120.0, 100.0),
            row("chain-rawmodule", "jax", 100.0, 20.0), row("chain", "jit-copy", 70.0, 60.0),
            row("chain", "jax", 65.0, 20.0),
            row("chain-rawmodule", "jit-copy", 500.0, 500.0, size=65536)]  # not the issue's size: not read
    by_text = {t.text: t for t in targets(rows) if t.issue == "#30"}
    eager, gpu, jax = by_text.values()
    assert eager.met and "6.316×" in eager.measured
    assert gpu.met and "0.690×" in gpu.measured  # GPU time, view against view: 69 / 100
    assert not jax.met and "chain 1.077×" in jax.measured and "chain-rawmodule 0.950×" in jax.measured
    text = measured_targets(rows)
    assert "- MISSED: the chain of PDL-opted kernels" in text and "- MET: its GPU time" in text


def test_a_chain_target_the_run_could_not_measure_says_why():
    rows = [row("chain-rawmodule", "cupy", 600.0, 590.0), row("chain-rawmodule", "jit-copy", 95.0, 80.0),
            dict(row("chain-rawmodule", "jax", 0.0, 0.0), error="RuntimeError: jax unavailable: no module")]
    by_text = {t.text: t for t in targets(rows) if t.issue == "#30"}
    _, gpu, jax = by_text.values()
    assert not jax.met and jax.measured == "not measured: jax.jit failed: RuntimeError: jax unavailable: no module"
    assert "no jit-view row" in gpu.measured and "no jit-plain row" in gpu.measured
    text = measured_targets(rows)
    assert "jax unavailable" in text and "PIECEWISE" not in text  # a workload this run did not run: not listed


def test_the_rawmodule_chain_is_a_workload_of_bench_py_with_the_chains_math():
    assert "chain-rawmodule" in bench.WORKLOAD_NAMES
    raw, chain = WORKLOADS["chain-rawmodule"], WORKLOADS["chain"]
    assert raw.sizes(quick=True) == [1024] and raw.torch_fn.__func__ is chain.torch_fn.__func__
    source = raw_chain_source()
    assert "cupygraph" not in source.split("\n\n", 1)[1].lower()  # after its comment: no cupygraph header or macro
    assert "pdl.cuh" not in source and "CUPYGRAPH_PDL" not in source


@pytest.mark.parametrize("arch, waits", [(90, True), (80, False)])
def test_the_rawmodule_chain_kernels_wait_on_sm90_and_are_plain_below(arch, waits):
    needs_nvrtc("scanning the benchmark's RawModule chain")
    from cupygraph.backends.pdl.modules import compile_ptx
    from cupygraph.backends.pdl.ptx_scan import entry_verdicts

    verdicts = entry_verdicts(compile_ptx(raw_chain_source(), (), arch))
    assert set(verdicts) == {"affine", "squash"}
    for name, verdict in verdicts.items():
        assert verdict.scanned and verdict.waits is waits, (name, verdict)
