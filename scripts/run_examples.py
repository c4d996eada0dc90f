"""Check the bundled CUDA examples (the paper's three case studies + axpby) on the GPU and
print/save their verdicts and speedups.  Usage: python scripts/run_examples.py OUT.json KERNELBENCH.jsonl"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("examples/cuda_axpby/task.py", "examples/cuda_axpby/solution"),
    ("L1/12", "examples/l1_12_diag_matmul"),
    ("L2/14", "examples/l2_14_gemm_divide_sum_scaling"),
    ("L3/8", "examples/l3_8_resnet_basic_block"),
]


def main() -> None:
    from cuda_agent.sandbox.check import CheckOptions, check
    from cuda_agent.tasks import resolve

    out, kb = Path(sys.argv[1]), sys.argv[2]
    rows = []
    for ref, sol in CASES:
        task = resolve(str(ROOT / ref) if ref.endswith(".py") else ref, kb)
        r = check(task, ROOT / sol, CheckOptions(device="cuda"))
        d = r.to_dict()
        rows.append(d)
        print(f"{task.id:24s} compiled={r.compiled} correct={r.correct} t_gen={r.t_gen_ms} eager={r.t_eager_ms} "
              f"compile={r.t_compile_ms} x_eager={r.speedup_eager} x_compile={r.speedup_compile} reward={r.reward} "
              f"classes={r.exploit_classes} precision_ratio={r.verdict and r.verdict.precision_ratio} "
              f"round={r.verdict and r.verdict.round} wall={r.timing and r.timing.wall_ms} "
              f"roofline={r.timing and r.timing.roofline_ms} isolation={r.isolation!r} "
              f"err={(r.error or '')[:400]}", flush=True)
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
