"""Concurrent `cuda-agent check` processes on the CPU backend, beside busy processes: how long a
batch takes, how many checks measured their baselines again, and the verdicts (issue 18, the
device lock and the baseline cache under contention, on a machine without a GPU).

    python scripts/bench_contended_cpu.py OUT.jsonl [--n 8] [--in-flight 8] [--hogs 2]

Each check is examples/cpu_scaled_swish (task and workspace solution), with timing and baselines;
run it once alone first (--n 1 --in-flight 1 --hogs 0) so that the build and the quiet baseline
are cached, as they would be on a machine that has judged the task before.  A line per check as
it ends, then the total; every line goes to OUT.jsonl as well.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import cli_check  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cpu_scaled_swish"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--in-flight", type=int, default=8)
    ap.add_argument("--hogs", type=int, default=2)
    args = ap.parse_args()
    t0 = time.time()
    out = open(args.out, "a")

    def one(i: int) -> None:
        t = time.time()
        d, took = cli_check(EXAMPLE / "solution", task=EXAMPLE / "task.py", device="cpu")
        row = {"i": i, "start_s": round(t - t0, 1), "took_s": round(took, 1), "correct": d.get("correct"),
               "remeasured": any("baselines measured again" in w for w in d.get("warnings") or []),
               "shared": any("by another check" in w for w in d.get("warnings") or []),
               "phases": d.get("phases"), "error": (d.get("error") or "")[:200] or None}
        print(json.dumps(row), flush=True)
        out.write(json.dumps(row) + "\n")

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        with ThreadPoolExecutor(args.in_flight) as ex:
            list(ex.map(one, range(args.n)))
    finally:
        for h in hogs:
            h.kill()
    total = {"n": args.n, "in_flight": args.in_flight, "hogs": args.hogs, "total_s": round(time.time() - t0, 1)}
    print(json.dumps(total), flush=True)
    out.write(json.dumps(total) + "\n")


if __name__ == "__main__":
    main()
