#!/bin/bash
# One device session for issue 14 (zero-copy): GPU tests, fuzzer, the engine's GPU tests, the bench.
# Run from the project root on the GPU machine with the project on PYTHONPATH; logs go to $OUT.
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/card.txt"
timeout 100 python3 -m pytest -p no:randomly -m gpu -q -rA tests/gpu/test_zero_copy.py tests/gpu/test_zero_copy_fuzz.py 2>&1 | grep -v "^WARNING" | tail -150 > "$OUT/zero_copy.log"; tail -15 "$OUT/zero_copy.log"
timeout 70 python3 -m pytest -p no:randomly -m gpu -q tests/gpu/test_engine.py tests/gpu/test_piecewise.py tests/gpu/test_memory_safety.py 2>&1 | tail -25 | tee "$OUT/engine.log"
timeout 100 python3 tools/bench_zero_copy.py --quick --profile --out "$OUT/bench.json" > "$OUT/bench.log" 2> "$OUT/profile.log"; echo "bench rc=$?"; tail -c 6000 "$OUT/bench.log"
