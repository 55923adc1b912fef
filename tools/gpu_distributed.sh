#!/usr/bin/env bash
# The distributed GPU session on a 2-GPU machine: per-device graphs in one process, the MPI + NCCL
# checks on two ranks, then the strong-scaling bench. Logs and JSON go to ${OUT:-.}.
# MPI: the mpich wheel's mpiexec and libmpi (installed with `pip install --target $SITE`), so
# mpi4py and the launcher are the same MPI (a system mpirun of another MPI would start singletons).
set -uo pipefail
OUT=${OUT:-.}
SITE=${SITE:-/tmp/site}
export PYTHONPATH=$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
MPIEXEC=$(find "$SITE" -name mpiexec.hydra -type f 2>/dev/null | head -n 1)
[ -n "$MPIEXEC" ] || MPIEXEC=$(find "$SITE" -name mpiexec -type f 2>/dev/null | head -n 1)
[ -n "$MPIEXEC" ] || MPIEXEC=$(command -v mpiexec)
export PATH=$(dirname "$MPIEXEC"):$PATH
LIBMPI=$(find "$SITE" -name 'libmpi.so.12' 2>/dev/null | head -n 1)
[ -n "$LIBMPI" ] && export MPI4PY_LIBMPI=$LIBMPI LD_LIBRARY_PATH=$(dirname "$LIBMPI")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "mpiexec: $MPIEXEC; libmpi: ${MPI4PY_LIBMPI:-mpi4py default}"; date -u
nvidia-smi --query-gpu=index,name --format=csv,noheader
python3 -c "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])"
timeout 30 "$MPIEXEC" -n 2 python3 -c "from mpi4py import MPI; c = MPI.COMM_WORLD; print('rank', c.rank, 'of', c.size)"
timeout 45 python3 tests/gpu/mpi/per_device_checks.py 2>&1 | tee "$OUT/per_device.log"
timeout 90 "$MPIEXEC" -n 2 python3 tests/gpu/mpi/distributed_gpu_checks.py 2>&1 | tee "$OUT/dist_checks.log"
echo "checks rc=${PIPESTATUS[0]}"
timeout 130 "$MPIEXEC" -n 2 python3 tools/bench_distributed.py --sizes 256 1024 4096 16384 24576 --steps 20 \
  --calls 10 --repeats 5 --out "$OUT/bench_distributed.json" 2>&1 | tee "$OUT/bench.log"
echo "bench rc=${PIPESTATUS[0]}"
