#!/usr/bin/env bash
# One device call: install the carried wheels, run the GPU tests, the demo and the benchmark.
# Usage on the GPU machine: bash tools/gpu_session.sh [quick|full] ; logs land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -m gpu -q -x -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
python3 -m cupygraph demo 2>&1 | tee "$OUT/demo.log"
if [ "${1:-quick}" != "none" ]; then
  # $OUT returns at most 8 files: gpu.txt, gpu_tests.log, demo.log, bench.log, bench.json, results.md
  # and the one plot file (bench_latency.png) make 7.
  python3 tools/bench.py $([ "${1:-quick}" = quick ] && echo --quick) --out "$OUT/bench.json" \
    --markdown "$OUT/results.md" --plots "$OUT" 2>&1 | tee "$OUT/bench.log"
fi
