#!/usr/bin/env bash
# One device call: install the carried wheels, run every GPU test, then the benchmarks, each in its
# own process. Everything lands in one archive, $OUT/results.tgz (a device call returns few files),
# with the tests' summary and the A/B summary beside it.
# Usage on the GPU machine (carry [".whl"], plus ".ab_old" for the A/B):
#   bash tools/gpu_session.sh [tests|quick|full]
#     tests: the GPU tests (with the corpus JSON);  quick: + the A/B of the jit hot path against
#     .ab_old when present, zero-copy and PIECEWISE figures;  full: + every benchmark group, full length.
set -uo pipefail
OUT=${OUT:-/tmp/out}
R=/tmp/gpu_results
rm -rf "$R" && mkdir -p "$R" "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 CUPYGRAPH_CORPUS_JSON=$R/corpus.json
what=${1:-quick}
# The compiled replay (cupygraph/backends/fastpath/_replay.c): built here, in place, with this
# machine's compiler and Python (the tests check that it is; without it every call takes the Python path).
python3 setup.py -q build_ext --inplace > "$R/build.log" 2>&1; echo "build_ext rc=$?" >> "$R/build.log"
pack() { tar -czf "$OUT/results.tgz" -C "$R" . ; }
trap pack EXIT
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; git log -1 --format=%h 2>/dev/null
  tail -1 "$R/build.log"; } \
  | tee "$R/gpu.txt"
timeout 540 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests > "$R/gpu_tests.log" 2>&1
echo "gpu tests rc=$?" | tee -a "$R/gpu_tests.log"
grep -E "^(FAILED|ERROR)|passed|failed" "$R/gpu_tests.log" | tail -30 | tee "$OUT/gpu_tests_summary.txt"
[ "$what" = tests ] && exit 0
if [ -d .ab_old ]; then
  OUT=$R/ab bash tools/ab_hot_path.sh 2 > "$R/ab_summary.txt" 2>&1
  cp "$R/ab_summary.txt" "$OUT/"
fi
quick=$([ "$what" = quick ] && echo --quick)
{
  date -u
  timeout 120 python3 tools/bench.py --quick --workloads zero-copy --out "$R/bench_zero_copy.json"
  timeout 120 python3 tools/bench.py $quick --workloads piecewise --out "$R/bench_piecewise.json"
  if [ "$what" = full ]; then
    timeout 300 python3 tools/bench.py --workloads chain,stencil,serving,mlp,capture --out "$R/bench.json"
    timeout 400 python3 tools/bench_gemm.py --out "$R/bench_gemm.json"  # torch.compile and XLA compile per batch
    timeout 60 python3 tools/bench_control_flow.py --out "$R/control_flow.json"
  fi
  date -u
} > "$R/bench.log" 2>&1
tail -40 "$R/bench.log"
