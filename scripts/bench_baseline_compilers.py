"""What a baseline measurement costs with and without the kept compiler caches (issue 18).

    python scripts/bench_baseline_compilers.py OUT.jsonl [--device cuda] [--rounds 3] [TASK ...]

TASK: a task file or a KernelBench id (default: examples/cuda_axpby/task.py on cuda,
examples/cpu_scaled_swish/task.py on cpu).  For each task the kept copy is removed, then the
baseline is measured ``--rounds`` times in a row (``baselines.measure``: a fresh runner, eager
and torch.compile until two measurements agree): the first compiles, the later ones start from
the copy the first one left.  A line per measurement (seconds, times, ``compilers``), also to OUT.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from cuda_agent.sandbox import baselines  # noqa: E402
from cuda_agent.sandbox.timing import Recipe  # noqa: E402
from cuda_agent.tasks import resolve  # noqa: E402

DEFAULT = {"cuda": ROOT / "examples" / "cuda_axpby" / "task.py", "cpu": ROOT / "examples" / "cpu_scaled_swish" / "task.py"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("tasks", nargs="*")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with open(args.out, "a") as out:
        for name in args.tasks or [str(DEFAULT[args.device])]:
            task = resolve(name)
            shutil.rmtree(baselines.compilers_store(task, args.device), ignore_errors=True)
            for i in range(args.rounds):
                t = time.time()
                v = baselines.measure(task, args.device, Recipe(), 5)
                row = {"task": name, "round": i, "seconds": round(time.time() - t, 1), "compilers": v.get("compilers"),
                       "eager_ms": v.get("eager_ms"), "compile_ms": v.get("compile_ms"),
                       "attempts": [v.get("eager_attempts"), v.get("compile_attempts")], "error": v.get("error")}
                print(json.dumps(row), flush=True)
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
