#!/usr/bin/env bash
# The GPU pool's benchmark on the device machine (issue 3 point 4; issue 6's scaling table).
# Usage (device machine, repo root; carry .whl for the Ray stages):
#   bash scripts/pool_gpu_bench.sh OUT [stage] [n]
# stages:
#   pool     n (default 50) candidates (cuda_axpby variants) through the pool, local back-end, GPU 0
#   cli      the same n one by one through `cuda-agent check` (resumes: run again until complete)
#   ray      the same n through the pool on Ray (local Ray started by the pool), GPU 0
#   scaling  n (default 200) candidates on 1, 2, 4, 8 GPUs (as many as visible), local and Ray
#   tests    tests/pool on this machine (CPU slots, Ray with 2 CPU workers)
# State lives in /tmp/pool-bench (kept while the machine stays warm); each stage stops after
# about 8 minutes and resumes when run again; OUT gets bench.json/bench.md with every mode so far.
set -u
OUT=${1:-/tmp/pool-out}; mkdir -p "$OUT"
STAGE=${2:-pool}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ls .whl/ray-*.whl >/dev/null 2>&1; then
  # ray (pruned wheel, see docs/pool.md) and the few of its needs the image lacks
  [ -d /tmp/site/ray ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
W=/tmp/pool-bench; mkdir -p "$W"
nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())" | tee -a "$OUT/gpu.txt"
B="python3 scripts/bench_pool.py $W --device cuda --time-limit ${POOL_BENCH_LIMIT:-480}"
case "$STAGE" in
  pool)    $B --n "${3:-50}" --modes pool --backend local --gpus 0 2>&1 | tee "$OUT/pool.log" ;;
  cli)     $B --n "${3:-50}" --modes cli 2>&1 | tee "$OUT/cli.log" ;;
  ray)     python3 -c "import ray; print('ray', ray.__version__)" || exit 1
           $B --n "${3:-50}" --modes pool --backend ray --gpus 0 2>&1 | tee "$OUT/ray.log" ;;
  scaling) $B --n "${3:-200}" --modes scaling --scaling 1,2,4,8 --backends local,ray 2>&1 | tee "$OUT/scaling.log" ;;
  tests)   python3 -m pytest -q tests/pool -p no:cacheprovider -o addopts="" 2>&1 | tee "$OUT/pytest-pool.log" | tail -15 ;;
  *)       echo "unknown stage $STAGE (pool, cli, ray, scaling, tests)"; exit 2 ;;
esac
cp "$W"/bench.json "$W"/bench.md "$OUT"/ 2>/dev/null
ls "$W"/*.sqlite.d/logs/ >/dev/null 2>&1 && tail -n 40 "$W"/*.sqlite.d/logs/*.log > "$OUT/worker-logs.txt" 2>/dev/null
exit 0
