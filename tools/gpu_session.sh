#!/usr/bin/env bash
# One device call: install the carried wheels, build the compiled replay, then the GPU tests and/or the
# benchmarks, each in its own process. Everything lands in one archive, $OUT/results.tgz (a device call
# returns few files), with the tests' summary, the A/B summary and the targets' check lists beside it.
# Usage on the GPU machine (carry [".whl"], plus ".ab_old" for the A/B):
#   bash tools/gpu_session.sh [tests|bench|quick|full]
#     tests: the GPU tests (with the corpus JSON).
#     bench: no tests: the zero-copy figures with issue 30's host-time check list
#            (tools/bench_zero_copy.py); issue 30's PDL chain (plain cupy.RawModule kernels that wait)
#            against eager CuPy, jit pdl="off", jax.jit and torch.compile, with its targets; the A/B of
#            the jit hot path against .ab_old when present; the PIECEWISE figures.
#     quick: tests, then bench, in one call. On a cold machine the tests alone take about 420 s, so the
#            benchmarks do not all fit the call's 600 s: run `tests` and `bench` as two calls there.
#     full:  tests, then bench, then every benchmark group at full length (several calls' worth).
# Every step runs under `timeout`, at most its own cap and never past SESSION_BUDGET_S seconds from the
# start (default 570, under the device's 600 s a call); a step with under 30 s left is skipped and the
# log says so, so the call always ends in time to pack what it has.
set -uo pipefail
OUT=${OUT:-/tmp/out}
R=/tmp/gpu_results
BUDGET=${SESSION_BUDGET_S:-570}
what=${1:-quick}
case "$what" in tests|bench|quick|full) ;; *) echo "usage: bash tools/gpu_session.sh [tests|bench|quick|full]" >&2; exit 2;; esac
rm -rf "$R" && mkdir -p "$R" "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 CUPYGRAPH_CORPUS_JSON=$R/corpus.json
# The compiled replay (cupygraph/backends/fastpath/_replay.c): built here, in place, with this
# machine's compiler and Python (the tests check that it is; without it every call takes the Python path).
python3 setup.py -q build_ext --inplace > "$R/build.log" 2>&1; echo "build_ext rc=$?" >> "$R/build.log"
pack() { tar -czf "$OUT/results.tgz" -C "$R" . ; }
trap pack EXIT

# step CAP COMMAND...: COMMAND under timeout, CAP seconds at most and never past the budget.
step() {
  local cap=$1 left=$((BUDGET - SECONDS))
  shift
  if [ "$left" -lt 30 ]; then
    echo "SKIPPED (${left} s left of the ${BUDGET} s budget): $*"
    return 0
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  timeout "$cap" "$@"
  local rc=$?
  [ "$rc" -eq 124 ] && echo "STOPPED after ${cap} s (its cap or the budget): $*"
  return "$rc"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; git log -1 --format=%h 2>/dev/null
  tail -1 "$R/build.log"; echo "mode $what, budget ${BUDGET} s, ${SECONDS} s used by install and build"; } \
  | tee "$R/gpu.txt"

if [ "$what" != bench ]; then
  step 540 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests > "$R/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? after ${SECONDS} s" | tee -a "$R/gpu_tests.log"
  grep -E "^(FAILED|ERROR)|passed|failed|SKIPPED \(|STOPPED" "$R/gpu_tests.log" | tail -30 | tee "$OUT/gpu_tests_summary.txt"
fi
[ "$what" = tests ] && exit 0

quick=$([ "$what" = full ] || echo --quick)
{
  date -u
  # Issue 14's and 30's hot-path rows; the JSON has each row above its floor and the target's pass/fail.
  step 150 python3 tools/bench_zero_copy.py --quick --out "$R/bench_zero_copy.json" > "$R/bench_zero_copy.log" 2>&1
  echo "bench_zero_copy rc=$?"
  # Issue 30's PDL chain: only the competitors its targets name, and the bare floor (about 60 s, most of it
  # torch.compile's compile and the imports).
  step 120 python3 tools/bench.py --quick --workloads chain-rawmodule \
    --skip torch,torch-graph,torch-graph-same,bare-copy,jit-fused --out "$R/bench_pdl_chain.json" \
    > "$R/bench_pdl_chain.log" 2>&1
  echo "PDL chain rc=$?"
  # The A/B after issue 30's own figures: where time runs short (quick on a cold machine) it is what is cut.
  if [ -d .ab_old ]; then
    step 300 env OUT="$R/ab" bash tools/ab_hot_path.sh 2 > "$R/ab_summary.txt" 2>&1
    echo "A/B rc=$?"
    cp "$R/ab_summary.txt" "$OUT/"
  fi
  step 120 python3 tools/bench.py $quick --workloads piecewise --out "$R/bench_piecewise.json"
  if [ "$what" = full ]; then
    step 300 python3 tools/bench.py --workloads chain,chain-rawmodule,stencil,serving,mlp,capture --out "$R/bench.json"
    step 400 python3 tools/bench_gemm.py --out "$R/bench_gemm.json"  # torch.compile and XLA compile per batch
    step 60 python3 tools/bench_control_flow.py --out "$R/control_flow.json"
  fi
  date -u
} > "$R/bench.log" 2>&1
tail -25 "$R/bench.log"
{
  sed -n '/^Issue 30 host-time target/,$p' "$R/bench_zero_copy.log" 2>/dev/null
  grep -E "^(SKIPPED|STOPPED)|Traceback|Error" "$R/bench_zero_copy.log" 2>/dev/null | tail -5
  echo
  grep -E "^(SKIPPED|STOPPED)|^  chain-rawmodule|failed" "$R/bench_pdl_chain.log" 2>/dev/null
  sed -n '/^## chain-rawmodule/,$p' "$R/bench_pdl_chain.log" 2>/dev/null  # its table, notes and targets
  echo "session ${SECONDS} s of the ${BUDGET} s budget"
} | tee "$OUT/targets_summary.txt"
