#!/usr/bin/env bash
# The distributed GPU session on a 2-GPU machine: per-device graphs in one process, the MPI + NCCL
# checks on two ranks, then the strong-scaling bench. Logs and JSON go to ${OUT:-.}.
#
# MPI must be one implementation end to end: MPICH's wheel, installed with --prefix (pip's --target
# drops the wheel's lib/, so libmpi would be missing and mpi4py would load the system's Open MPI,
# whose processes then start as singletons under MPICH's mpiexec). Usage on the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl_mpi/mpi4py-*.whl
#   python3 -m pip install -q --no-index --no-deps --ignore-installed --prefix /tmp/mpich .whl_mpi/mpich-*.whl
#   cd .gpu_dist && OUT=$OUT bash tools/gpu_distributed.sh
set -uo pipefail
OUT=${OUT:-.}
SITE=${SITE:-/tmp/site}
MPICH=${MPICH:-/tmp/mpich}
export PYTHONPATH=$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export MPI4PY_LIBMPI=$MPICH/lib/libmpi.so.12 LD_LIBRARY_PATH=$MPICH/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$MPICH/bin:$PATH
MPIEXEC=$MPICH/bin/mpiexec
echo "mpiexec: $MPIEXEC; libmpi: $MPI4PY_LIBMPI"; date -u
nvidia-smi --query-gpu=index,name --format=csv,noheader
ranks=$(timeout 30 "$MPIEXEC" -n 2 python3 -c "from mpi4py import MPI; print(MPI.COMM_WORLD.size)" | sort -u)
echo "mpi4py sees ${ranks:-nothing} ranks under mpiexec -n 2"
timeout 45 python3 tests/gpu/mpi/per_device_checks.py 2>&1 | tee "$OUT/per_device.log"
if [ "$ranks" != "2" ]; then echo "MPI launcher and mpi4py disagree: not running the 2-rank parts"; exit 1; fi
timeout 90 "$MPIEXEC" -n 2 python3 tests/gpu/mpi/distributed_gpu_checks.py 2>&1 | tee "$OUT/dist_checks.log"
echo "checks rc=${PIPESTATUS[0]}"
timeout 130 "$MPIEXEC" -n 2 python3 tools/bench_distributed.py --sizes 256 1024 4096 16384 24576 --steps 20 \
  --calls 10 --repeats 5 --out "$OUT/bench_distributed.json" 2>&1 | tee "$OUT/bench.log"
echo "bench rc=${PIPESTATUS[0]}"
