#!/usr/bin/env python3
"""Run the adversarial suite (tests/adversarial/cases) through ``check()`` and report each
verdict against what the case expects.

    python3 scripts/run_adversarial.py --device cpu --out adversarial-cpu.json
    python3 scripts/run_adversarial.py --device cuda --out adversarial-h200.json
    python3 scripts/run_adversarial.py --device cpu --only c07_ c12_call_counter

Writes one JSON row per case (name, class, expected reject/pass/contained, correct, exploit
classes, rules, verdict stage/round/class, first line of the error, probe, whether the
expectation was met, seconds) plus the machine and torch version, and prints a markdown
table.  Exit status 0 when every case met its expectation, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _suite():
    """tests/adversarial/suite.py, loaded by path (no dependence on a ``tests`` package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cuda_agent_adversarial_suite",
                                                  ROOT / "tests" / "adversarial" / "suite.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the rows")
    ap.add_argument("--only", nargs="*", default=[], help="run the cases whose names start with one of these")
    ap.add_argument("--md", type=Path, help="also write the markdown table here")
    args = ap.parse_args(argv)

    import torch

    suite = _suite()
    cases = [c for c in suite.all_cases(args.device) if not args.only or any(c.name.startswith(p) for p in args.only)]
    if not cases:
        print(f"no {args.device} case matches {args.only}", file=sys.stderr)
        return 2
    rows, outcomes = [], []
    t0 = time.time()
    for i, case in enumerate(cases, 1):
        try:
            out = suite.run_case(case)
        except Exception as e:  # a broken case is a row too, never a lost run
            out = suite.Outcome(case.name, case.cls, case.device, case.expect, False,
                                f"suite error: {type(e).__name__}: {e}", attack=case.attack)
        outcomes.append(out)
        row = out.to_dict()
        rows.append(row)
        print(f"[{i}/{len(cases)}] {row['name']}: {'met' if row['met'] else 'NOT MET: ' + row['why']}"
              f" ({row.get('seconds', 0)} s)", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(_doc(args.device, rows, t0, torch), indent=1) + "\n")  # after every case
    table = suite.markdown(outcomes)
    met = sum(r["met"] for r in rows)
    summary = f"{met}/{len(rows)} cases met their expectation on {args.device} ({time.time() - t0:.0f} s)"
    print("\n" + table + "\n" + summary)
    if args.md:
        args.md.write_text(table + "\n" + summary + "\n")
    return 0 if met == len(rows) else 1


def _doc(device: str, rows: list, t0: float, torch) -> dict:
    dev = torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else platform.processor()
    return {"device": device, "machine": dev or platform.machine(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
            "seconds": round(time.time() - t0, 1), "met": sum(r["met"] for r in rows), "n": len(rows),
            "rows": rows}


if __name__ == "__main__":
    sys.exit(main())
