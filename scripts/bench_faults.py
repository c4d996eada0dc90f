#!/usr/bin/env python3
"""Run each fault of tests/faults/catalog.py once through ``check()`` and record the verdict,
the seconds until the verdict and the recovery time (seconds until the next check of the good
example has passed); write JSON and print a markdown table.

    python scripts/bench_faults.py --device cpu --out faults_cpu.json
    python scripts/bench_faults.py --device cuda --out faults_cuda.json   # GPU faults + CPU ones
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from faults.catalog import CPU_FAULTS, GPU_FAULTS, run_fault  # noqa: E402


def table(rows: list[dict]) -> str:
    out = ["| fault | device | verdict | s to verdict | of which build | s to recover | ok |",
           "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        verdict = (r["skipped"] and f"skipped: {r['skipped']}") or r["verdict"]
        verdict = verdict.replace("|", "/")[:110]
        ok = "skipped" if r["skipped"] else ("yes" if not r["problems"] else "NO: " + "; ".join(r["problems"])[:80])
        rec = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.1f}"
        build = "-" if r.get("build_s") is None else f"{r['build_s']:.1f}"
        out.append(f"| {r['fault']} | {r['device']} | {verdict} | {r['seconds']:.1f} | {build} | {rec} | {ok} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cpu: the CPU faults; cuda: the GPU faults, then the CPU ones")
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--only", nargs="*", help="fault names to run (default: all for the device)")
    args = ap.parse_args()

    faults = (GPU_FAULTS + CPU_FAULTS) if args.device == "cuda" else CPU_FAULTS
    if args.only:
        faults = [f for f in faults if f.name in set(args.only)]
    from cuda_agent.sandbox.check import check
    from cuda_agent.sandbox.isolation import probe
    from cuda_agent.tasks import load_file
    from faults.catalog import CPU_EXAMPLE, GPU_EXAMPLE, options

    # warm the build cache and the probe, so the first fault is not charged for them
    t0 = time.perf_counter()
    for ex, dev in ((CPU_EXAMPLE, "cpu"), (GPU_EXAMPLE, "cuda")):
        if any(f.device == dev for f in faults):
            r = check(load_file(ex / "task.py"), ex / "solution", options(dev))
            if not r.correct:
                print(f"the good example {ex.name} does not pass: {r.error}", file=sys.stderr)
                return 1
    warm = time.perf_counter() - t0
    pr = probe()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        for f in faults:
            print(f"[bench_faults] {f.name} ...", file=sys.stderr, flush=True)
            o = run_fault(f, Path(tmp) / f.name)
            rows.append(o.to_dict())
            print(f"[bench_faults] {f.name}: {o.verdict[:100]} ({o.seconds:.1f} s, recovery "
                  f"{o.recovery_s} s){' PROBLEMS: ' + '; '.join(o.problems) if o.problems else ''}",
                  file=sys.stderr, flush=True)
    import torch

    meta = {"device": args.device, "host": platform.node(), "python": platform.python_version(),
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
            "isolation": {"namespaces": pr.namespaces, "userns": pr.userns, "drop_caps": pr.drop_caps,
                          "errors": pr.errors},
            "warmup_s": round(warm, 2), "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    args.out.write_text(json.dumps({"meta": meta, "faults": rows}, indent=1))
    print(table(rows))
    bad = [r["fault"] for r in rows if r["problems"]]
    if bad:
        print(f"\nfaults with problems: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
