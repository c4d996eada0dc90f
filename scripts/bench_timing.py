"""Timing-stability benchmark: re-measure one kernel (axpby over 16M floats, ~75 us) five times,
each in a fresh process, with three recipes, and report the spread of the five medians.

  ours       cuda-agent's recipe through check() (runner process; warm-up, L2 flush, k calls per
             sample over rotating input sets, median until the CI is tight)
  profiler   the original CUDA-Agent workspace's method as described in notes/device.md: sum of
             CUDA kernel device time from torch.profiler, 5 warm-ups, 10 iterations, one input set
  events     textbook: CUDA events around each call, 256 MB L2 flush before each, 100 trials, median
Usage: python scripts/bench_timing.py OUT.json [REPEATS]
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples" / "cuda_axpby"

CHILD = r'''
import sys, json, statistics, torch
so, method = sys.argv[1], sys.argv[2]
torch.ops.load_library(so)
op = torch.ops.kernels.axpby
n = 1 << 24
x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
if method == "profiler":
    for _ in range(5):
        op(x, y, 2.0, -0.5)
    torch.cuda.synchronize()
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            op(x, y, 2.0, -0.5)
        torch.cuda.synchronize()
    us = sum(e.device_time_total for e in prof.key_averages() if "axpby" in e.key) / 10
    print(json.dumps({"median_us": us}))
else:
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for _ in range(5):
        op(x, y, 2.0, -0.5)
    ts = []
    for _ in range(100):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); op(x, y, 2.0, -0.5); e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    print(json.dumps({"median_us": statistics.median(ts)}))
'''


def spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / (sum(xs) / len(xs))


def main() -> None:
    import torch

    from cuda_agent.sandbox.check import CheckOptions, check
    from cuda_agent.tasks import load_file

    out_path = Path(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    task = load_file(EX / "task.py")
    res: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "kernel": "axpby 16M floats"}
    ours = []
    so = None
    for _ in range(reps):
        r = check(task, EX / "solution", CheckOptions(device="cuda", baselines=False))
        assert r.correct, r.error
        ours.append(r.t_gen_ms * 1e3)
        so = r.build.so_path
        res.setdefault("ours_detail", []).append(r.timing.to_dict())
    res["ours_us"] = ours
    for method in ("profiler", "events"):
        vals = []
        for _ in range(reps):
            p = subprocess.run([sys.executable, "-c", CHILD, so, method], capture_output=True, text=True, check=True)
            vals.append(json.loads(p.stdout.strip().splitlines()[-1])["median_us"])
        res[f"{method}_us"] = vals
    res["spread"] = {k: spread(res[f"{k}_us"]) for k in ("ours", "profiler", "events")}
    out_path.write_text(json.dumps(res, indent=1))
    for k in ("ours", "profiler", "events"):
        print(f"{k:9s} medians (us): {', '.join(f'{v:.2f}' for v in res[f'{k}_us'])}  spread {res['spread'][k]:.2%}")


if __name__ == "__main__":
    main()
