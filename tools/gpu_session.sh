#!/usr/bin/env bash
# One device call: install the carried wheels, run every GPU test, then the benchmarks, each
# workload group in its own process. Logs and JSON land in $OUT (at most 8 files come back).
# Usage on the GPU machine: bash tools/gpu_session.sh [tests|quick|full]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
what=${1:-quick}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; date -u; git log -1 --format=%h 2>/dev/null; } | tee "$OUT/gpu.txt"
timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
[ "$what" = tests ] && exit 0
quick=$([ "$what" = quick ] && echo --quick)
{
  date -u
  timeout 300 python3 tools/bench.py $quick --workloads chain,stencil,serving,mlp,capture --out "$OUT/bench.json"
  timeout 150 python3 tools/bench.py $quick --workloads piecewise --out "$OUT/bench_piecewise.json"
  timeout 150 python3 tools/bench_gemm.py $quick --out "$OUT/bench_gemm.json"
  timeout 60 python3 tools/bench_control_flow.py --out "$OUT/control_flow.json"
  date -u
} > "$OUT/bench.log" 2>&1
tail -40 "$OUT/bench.log"
