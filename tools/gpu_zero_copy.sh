#!/bin/bash
# One device session for issue 14 (zero-copy, input_binding="auto" by default): the whole GPU suite
# (zero-copy tests and fuzzer included), then tools/bench_zero_copy.py. Run from the project root on
# the GPU machine with the project on PYTHONPATH; logs go to $OUT.
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
timeout 170 python3 -m pytest -p no:randomly -m gpu -q -rfE tests/gpu tests/reliability 2>&1 | grep -v "^WARNING" > "$OUT/gpu_suite.log"
echo "suite rc=${PIPESTATUS[0]}"; tail -25 "$OUT/gpu_suite.log"
timeout 110 python3 tools/bench_zero_copy.py ${BENCH_FLAGS:---profile} --out "$OUT/bench.json" > "$OUT/bench.log" 2> "$OUT/profile.log"
echo "bench rc=$?"; tail -c 5000 "$OUT/bench.log"
