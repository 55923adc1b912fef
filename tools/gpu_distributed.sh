#!/usr/bin/env bash
# The distributed GPU session on a 2-GPU machine (NRANKS=4 on a 4-GPU one): per-device graphs in one process, the MPI + NCCL
# checks on two ranks, then the strong-scaling bench. Logs and JSON go to ${OUT:-.}.
#
# MPI must be one implementation end to end: MPICH's wheel, installed with --prefix (pip's --target
# drops the wheel's lib/, so libmpi would be missing and mpi4py would load the system's Open MPI,
# whose processes then start as singletons under MPICH's mpiexec). Usage on the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl_mpi/mpi4py-*.whl
#   python3 -m pip install -q --no-index --no-deps --ignore-installed --prefix /tmp/mpich .whl_mpi/mpich-*.whl
#   cd .gpu_dist && OUT=$OUT bash tools/gpu_distributed.sh
#
# Every step is bounded: `timeout` ends a step that runs past its limit (a hang fails, it does not
# block the call), and tests/gpu/mpi/distributed_gpu_checks.py also bounds each check on its own.
set -uo pipefail
OUT=${OUT:-.}
SITE=${SITE:-/tmp/site}
MPICH=${MPICH:-/tmp/mpich}
export PYTHONPATH=$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export MPI4PY_LIBMPI=$MPICH/lib/libmpi.so.12 LD_LIBRARY_PATH=$MPICH/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$MPICH/bin:$PATH
# NVLink multicast stays off on these machines (a program that uses it can take the host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
MPIEXEC=$MPICH/bin/mpiexec
SIZES=${SIZES:-256 1024 4096 16384 24576}
NRANKS=${NRANKS:-2}  # one rank per GPU: 4 on a 4-GPU machine
{
  echo "mpiexec: $MPIEXEC; libmpi: $MPI4PY_LIBMPI"; date -u
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -n 4
  python3 -c "import cupy; from cupy.cuda import nccl; print('cupy', cupy.__version__, 'nccl', nccl.get_version())"
} 2>&1 | tee "$OUT/env.log"
ranks=$(timeout -k 5 30 "$MPIEXEC" -n "$NRANKS" python3 -c "from mpi4py import MPI; print(MPI.COMM_WORLD.size)" | sort -u)
echo "mpi4py sees ${ranks:-nothing} ranks under mpiexec -n $NRANKS" | tee -a "$OUT/env.log"
timeout -k 5 40 python3 tests/gpu/mpi/per_device_checks.py 2>&1 | tee "$OUT/per_device.log"
echo "per-device rc=${PIPESTATUS[0]}"
if [ "$ranks" != "$NRANKS" ]; then echo "MPI launcher and mpi4py disagree: not running the $NRANKS-rank parts"; exit 1; fi
date -u
timeout -k 10 140 "$MPIEXEC" -n "$NRANKS" python3 tests/gpu/mpi/distributed_gpu_checks.py 2>&1 | tee "$OUT/dist_checks.log"
echo "checks rc=${PIPESTATUS[0]}" | tee -a "$OUT/dist_checks.log"
date -u
# shellcheck disable=SC2086
timeout -k 10 140 "$MPIEXEC" -n "$NRANKS" python3 tools/bench_distributed.py --sizes $SIZES --steps 20 \
  --calls 10 --repeats 5 --out "$OUT/bench_distributed.json" 2>&1 | tee "$OUT/bench.log"
echo "bench rc=${PIPESTATUS[0]}" | tee -a "$OUT/bench.log"
date -u
if [ "${DASK:-0}" = 1 ]; then
  # Dask-CUDA example: one worker per GPU, no collectives. Its wheels (carried in .whl_dask/) go to
  # their own directory, without those the machine already has (CuPy's own CUDA Python packages).
  wheels=$(ls .whl_dask/*.whl)
  for pair in cuda_core:cuda.core cuda_pathfinder:cuda.pathfinder pandas:pandas psutil:psutil packaging:packaging \
              jinja2:jinja2 markupsafe:markupsafe; do
    python3 -c "import ${pair#*:}" 2>/dev/null && wheels=$(echo "$wheels" | grep -v "/${pair%%:*}-")
  done
  # shellcheck disable=SC2086
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dask_site $wheels
  PYTHONPATH=$PYTHONPATH:/tmp/dask_site timeout -k 10 150 python3 examples/dask_cuda_pipeline.py --tasks 64 \
    --rows-vary 2>&1 | tee "$OUT/dask.log"
  echo "dask rc=${PIPESTATUS[0]}" | tee -a "$OUT/dask.log"
fi
