"""Where the candidate process spends its time: the runner in-process (no isolation), cProfiled.

    python scripts/profile_runner.py [EXAMPLE_DIR] [--device cpu|cuda] [--sort tottime]

Builds the example's kernels, loads the runner as ``check()`` would, then times ``load``, the
first ``run`` (one input set), five more sets and one ``time`` command, and prints the profile
of everything after ``load``.  Used to find start-up costs that the GPU numbers hide.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("example", nargs="?", default=str(ROOT / "examples" / "cpu_scaled_swish"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sort", default="cumulative")
    args = ap.parse_args()

    import torch

    from cuda_agent.sandbox import runner as R
    from cuda_agent.sandbox.build import build
    from cuda_agent.tasks import load_file

    ex = Path(args.example).resolve()
    task = load_file(ex / "task.py")
    b = build(ex / "solution" / "kernels", args.device)
    if not b.ok:
        raise SystemExit(b.log)
    d = Path(tempfile.mkdtemp(prefix="profile-runner-"))
    try:
        (d / "reference.py").write_text(task.source)
        shutil.copy2(b.so_path, d / "extension.so")
        os.environ["CUDA_AGENT_EXTENSION"] = str(d / "extension.so")
        sys.path.insert(0, str(ex / "solution"))
        ref = R._import(str(d / "reference.py"), "profiled_reference")
        torch.manual_seed(1)
        torch.save(ref.Model(*ref.get_init_inputs()).state_dict(), d / "weights.pt")
        job = {"device": args.device, "task_file": str(d / "reference.py"),
               "solution_file": str(ex / "solution" / "model_new.py"), "solution_dir": str(ex / "solution"),
               "extension": str(d / "extension.so"), "rules": "strict", "init_seed": 1,
               "weights_file": str(d / "weights.pt"), "class_name": "ModelNew"}
        r = R.Runner(job)
        t = time.perf_counter()
        rep = r.load({})
        print(f"load       {time.perf_counter() - t:7.3f} s  ok={rep['ok']}")
        prof = cProfile.Profile()
        prof.enable()
        t = time.perf_counter()
        rep = r.run({"seeds": [1], "out_dir": str(d)})
        print(f"first run  {time.perf_counter() - t:7.3f} s  ok={rep['ok']}")
        t = time.perf_counter()
        r.run({"seeds": [2, 3, 4, 5, 6], "out_dir": str(d)})
        print(f"5 sets     {time.perf_counter() - t:7.3f} s")
        t = time.perf_counter()
        rep = r.time({"seeds": [7, 8], "recipe": {}, "spot_checks": 3, "spot_seeds": list(range(100, 114)),
                      "out_dir": str(d)})
        print(f"time       {time.perf_counter() - t:7.3f} s  median {rep.get('median_ms')} ms over {rep.get('n')}")
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(args.sort).print_stats(25)
        print(out.getvalue())
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
