#!/usr/bin/env bash
# Synthesis on a CUDA machine with the paper's filters, inside a fixed wall-time budget:
# eager runtime band 1-100 ms on the GPU, torch.compile (inductor/Triton) on, GPU-sized inputs
# (batch scaled toward 2-40 ms by the meta-tensor cost model), decontamination against KernelBench.
#
#   bash scripts/synth_gpu_bench.sh [N] [OUT] [WORKERS] [MINUTES]
#
# N        tasks wanted (default 6000: the budget, not N, ends a bench run)
# OUT      where the summary goes (default runs/synth-gpu): summary.json, summary.md, stats.json,
#          stats.md, similarity.png, decisions.jsonl.gz -- six files, fit for the device tool's $OUT
# WORKERS  evaluation processes (default 6; they share the GPU, timing is serialized by a lock;
#          tensors are capped at 2^30 elements, so 6 x the largest task's working set fits 139 GiB)
# MINUTES  wall-time budget of the synthesis, start-up included (default 5); in-flight tasks
#          get DRAIN (default 45) more seconds, then are abandoned undecided
# The dataset itself goes to SYNTH_DATA (default /tmp/synth-gpu-data); rerunning with the same
# SYNTH_DATA resumes it.  Runs from the repo root without installing cuda-agent (PYTHONPATH=src);
# needs torch with CUDA, click and rich; transformers, pyarrow and matplotlib are used if present.
# KernelBench: $CUDA_AGENT_KERNELBENCH, default .devdata/kernelbench.jsonl (carried), then the
# shared copy.
set -uo pipefail
N="${1:-6000}"
OUT="${2:-runs/synth-gpu}"
WORKERS="${3:-6}"
MINUTES="${4:-5}"
DRAIN="${DRAIN:-45}"
DATA="${SYNTH_DATA:-/tmp/synth-gpu-data}"
mkdir -p "$OUT" "$DATA"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"
if [ -z "${CUDA_AGENT_KERNELBENCH:-}" ]; then
  for kb in "$PWD/.devdata/kernelbench.jsonl" "$PWD/../shared/kernelbench/kernelbench.jsonl"; do
    [ -f "$kb" ] && export CUDA_AGENT_KERNELBENCH="$kb" && break
  done
fi
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: n/a"
  echo "cpus: $(nproc)"
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
  for m in transformers pyarrow matplotlib triton; do
    python3 -c "import $m; print('$m', $m.__version__)" 2>/dev/null || echo "$m: not installed"
  done
  echo "kernelbench: ${CUDA_AGENT_KERNELBENCH:-not found}"
} | tee "$OUT/machine.txt"
python3 - "$N" "$DATA" "$WORKERS" "$MINUTES" "$DRAIN" "$OUT" <<'PY'
import gzip, json, os, shutil, sys, time
from pathlib import Path

from cuda_agent.synth import run_synth
from cuda_agent.synth.pipeline import read_journal

n, data, workers, minutes, drain, out = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]),
                                         float(sys.argv[5]), Path(sys.argv[6]))
before = len(read_journal(Path(data) / "decisions.jsonl"))
t0 = time.time()
dev = os.environ.get("SYNTH_DEVICE", "cuda")  # SYNTH_DEVICE=cpu: a smoke test of this script without a GPU
r = run_synth(n, data, device=dev, workers=workers, band_ms=(1.0, 100.0) if dev == "cuda" else None, compile=True,
              seed=0, max_minutes=minutes, drain_s=drain, progress=False)
wall = time.time() - t0
recs = read_journal(Path(data) / "decisions.jsonl")
new = recs[before:]
acc_new = [x for x in new if x["status"] == "accepted"]
rej_new = {}
for x in new:
    if x["status"] == "rejected":
        rej_new[x["code"]] = rej_new.get(x["code"], 0) + 1
timed = [x for x in new if x.get("eager_ms")]
span = (new[-1]["time"] - new[0]["time"]) if len(new) > 1 else 0.0
band = sum(1 for x in timed if 1.0 <= x["eager_ms"] <= 100.0)
s = r.stats
summary = {
    "machine": (out / "machine.txt").read_text().strip().splitlines() if (out / "machine.txt").exists() else [],
    "command": f"bash scripts/synth_gpu_bench.sh {n} {out} {workers} {minutes:g}",
    "budget_min": minutes, "drain_s": drain, "workers": workers, "wall_s": round(wall, 1),
    "this_run": {"candidates_decided": len(new), "accepted": len(acc_new),
                 "accepted_per_min": round(60 * len(acc_new) / wall, 2),
                 "decided_per_min": round(60 * len(new) / wall, 2),
                 "accepted_per_min_first_to_last_verdict": round(60 * len(acc_new) / span, 2) if span else None,
                 "rejections": dict(sorted(rej_new.items(), key=lambda kv: -kv[1])),
                 "timed_in_band_1_100ms": f"{band}/{len(timed)}"},
    "dataset_total": {"accepted": r.accepted, "candidates": r.candidates, "dir": data},
    "stopped": s.get("settings", {}).get("stopped"),
    "eager_ms_accepted": s.get("eager_ms"), "gpu_estimate": s.get("gpu_estimate"),
    "filter_seconds": s.get("filter_seconds"), "process_starts": s.get("settings", {}).get("process_starts"),
}
(out / "summary.json").write_text(json.dumps(summary, indent=2))
t = summary["this_run"]
md = [f"# GPU synthesis bench ({time.strftime('%Y-%m-%d')})", "", "```", *summary["machine"], "```", "",
      f"- command: `{summary['command']}` (budget {minutes:g} min + drain {drain:g} s, {workers} workers)",
      f"- wall: {wall:.0f} s; decided {t['candidates_decided']} candidates, accepted **{t['accepted']}** "
      f"(**{t['accepted_per_min']} accepted tasks/min** over the whole wall time, start-up included; "
      f"{t['accepted_per_min_first_to_last_verdict']}/min from the first verdict to the last; "
      f"{t['decided_per_min']} decided/min)",
      f"- timed candidates inside 1-100 ms: {t['timed_in_band_1_100ms']}",
      f"- rejections: {json.dumps(t['rejections'])}",
      f"- eager ms of accepted: {json.dumps({k: round(v, 3) for k, v in (s.get('eager_ms') or {}).items()})}",
      f"- measured / estimated eager ms: {json.dumps(s.get('gpu_estimate'))}",
      f"- filter seconds per task: {json.dumps((s.get('filter_seconds') or {}).get('mean'))}",
      f"- stopped: {summary['stopped']}", ""]
(out / "summary.md").write_text("\n".join(md))
for f in ("stats.json", "stats.md", "similarity.png"):
    if (Path(data) / f).exists():
        shutil.copy(Path(data) / f, out / f)
with open(Path(data) / "decisions.jsonl", "rb") as src, gzip.open(out / "decisions.jsonl.gz", "wb") as dst:
    shutil.copyfileobj(src, dst)
print("\n".join(md))
PY
rc=$?
rm -f "$OUT/machine.txt"
exit $rc
