"""CPU synthesis throughput: one run of ``run_synth`` with the compile filter on, from an empty
inductor cache, printed as JSON (accepted, candidates, wall s, tasks/min, rejections).

    python scripts/synth_cpu_bench.py N OUT SEED [--no-compile]

Set TORCHINDUCTOR_CACHE_DIR to an empty directory for the cold number (the script refuses a
non-empty one unless --warm is given).  Same command and seed before/after a change.
"""

import json
import os
import sys
import time
from pathlib import Path

from cuda_agent.synth.pipeline import run_synth


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    n, out, seed = int(args[0]), args[1], int(args[2])
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if "--warm" not in flags and cache and Path(cache).exists() and any(Path(cache).iterdir()):
        sys.exit(f"inductor cache {cache} is not empty (cold runs need an empty one; --warm to allow)")
    if Path(out).exists() and any(Path(out).iterdir()):
        sys.exit(f"{out} is not empty (a resumed run is not a throughput measurement)")
    t0 = time.time()
    r = run_synth(n, out, workers=2, seed=seed, compile="--no-compile" not in flags, progress=False)
    wall = time.time() - t0
    print(json.dumps({"n": n, "seed": seed, "accepted": r.accepted, "candidates": r.candidates,
                      "wall_s": round(wall, 1), "tasks_per_min": round(60 * r.accepted / wall, 1),
                      "rejections": r.stats.get("rejections_by_code"), "eager_ms": r.stats.get("eager_ms")}, indent=1))


if __name__ == "__main__":
    main()
