#!/usr/bin/env bash
# Synthesis on a CUDA machine with the paper's filters: eager runtime band 1-100 ms, torch.compile
# (inductor) on, GPU-sized inputs, decontamination against KernelBench L1-L3.
#
#   scripts/synth_gpu_bench.sh [N] [OUT] [WORKERS]
#
# Defaults: N=200, OUT=runs/synth-gpu-$N, WORKERS=number of GPUs.  Resumable: rerun the same
# command after an interruption.  For the 6,000-task run: scripts/synth_gpu_bench.sh 6000.
# Needs: pip install -e '.[data]' (pyarrow, datasets, matplotlib) and optionally transformers;
# KernelBench at $CUDA_AGENT_KERNELBENCH (default /work/shared/kernelbench/kernelbench.jsonl).
set -euo pipefail
N="${1:-200}"
OUT="${2:-runs/synth-gpu-$N}"
NGPU="$(python -c 'import torch; print(max(1, torch.cuda.device_count()))')"
WORKERS="${3:-$NGPU}"
export CUDA_AGENT_KERNELBENCH="${CUDA_AGENT_KERNELBENCH:-/work/shared/kernelbench/kernelbench.jsonl}"
echo "date: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
python -c 'import transformers; print("transformers", transformers.__version__)' 2>/dev/null || echo "transformers: not installed"
start=$(date +%s)
python - "$N" "$OUT" "$WORKERS" <<'PY'
import json, sys
from cuda_agent.synth import run_synth
n, out, workers = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
r = run_synth(n, out, device="cuda", workers=workers, band_ms=(1.0, 100.0), compile=True, seed=0)
print(json.dumps({"accepted": r.accepted, "candidates": r.candidates, "elapsed_s": round(r.elapsed_s, 1),
                  "tasks_per_min": round(60 * r.accepted / r.elapsed_s, 2),
                  "rejections": r.stats["rejections_by_code"], "eager_ms": r.stats["eager_ms"],
                  "files": r.files}, indent=2))
PY
echo "wall: $(( $(date +%s) - start )) s"
