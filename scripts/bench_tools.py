"""Tool latency benchmark: median / p90 of each tool's round trip through ToolSet.call.

    python scripts/bench_tools.py [--n 200] [--json]

Measures what the agent pays per call on this machine (the LLM's time excluded): the
persistent shell's round trip (``true``), Read / Edit / Write of a 300-line kernel file,
Glob and Grep (ripgrep and pure Python) over a small workspace.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.agent.tools import ToolSet
from cuda_agent.agent.tools import search


def measure(fn, n: int) -> dict[str, float]:
    fn()  # warm-up
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t0) * 1e3)
    xs.sort()
    return {"median_ms": round(statistics.median(xs), 4), "p90_ms": round(xs[int(0.9 * (len(xs) - 1))], 4),
            "min_ms": round(xs[0], 4), "n": n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-tools-"))
    (root / "kernels").mkdir()
    body = "".join(f"  out[i + {i}] = x[i + {i}] * 2.0f;  // line {i}\n" for i in range(300))
    (root / "kernels" / "k.cu").write_text("__global__ void k(float* x, float* out, int i) {\n" + body + "}\n")
    for j in range(20):
        (root / "kernels" / f"other_{j}.cpp").write_text(f"int f{j}() {{ return {j}; }}\n" * 50)
    res: dict[str, dict[str, float]] = {}
    with ToolSet(root) as ts:
        ts.call("Bash", {"command": "true"})
        res["Bash true (persistent shell round trip)"] = measure(lambda: ts.call("Bash", {"command": "true"}), a.n)
        res["Bash echo + cd state"] = measure(lambda: ts.call("Bash", {"command": "cd kernels && echo $PWD && cd .."}), a.n)
        res["Read 302-line file"] = measure(lambda: ts.call("Read", {"file_path": "kernels/k.cu"}), a.n)
        flip = [0]

        def edit() -> None:
            old, new = ("2.0f;  // line 150", "3.0f;  // line 150") if flip[0] % 2 == 0 else \
                       ("3.0f;  // line 150", "2.0f;  // line 150")
            flip[0] += 1
            out = ts.call("Edit", {"file_path": "kernels/k.cu", "old_string": old, "new_string": new})
            assert out.startswith("Edited"), out
        res["Edit (unique match) in 302-line file"] = measure(edit, a.n)
        res["Write 302-line file (read before)"] = measure(
            lambda: ts.call("Write", {"file_path": "kernels/k.cu", "content": (root / "kernels" / "k.cu").read_text()}), a.n)
        res["Glob **/*.cpp (21 files)"] = measure(lambda: ts.call("Glob", {"pattern": "**/*.cpp"}), a.n)
        res["Grep content, python engine"] = measure(
            lambda: search.grep(ts.ctx, pattern=r"line 1\d\b", output_mode="content", engine="python"), a.n)
        if shutil.which("rg"):
            res["Grep content, ripgrep engine"] = measure(
                lambda: search.grep(ts.ctx, pattern=r"line 1\d\b", output_mode="content", engine="rg"), a.n)
    shutil.rmtree(root, ignore_errors=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.node()} {platform.machine()}",
            "python": platform.python_version(), "cpus": __import__("os").cpu_count(), "n": a.n}
    if a.json:
        print(json.dumps({"meta": meta, "results": res}, indent=1))
        return
    print(f"# {meta}")
    print(f"{'tool call':45s} {'median ms':>10s} {'p90 ms':>10s} {'min ms':>10s}")
    for k, v in res.items():
        print(f"{k:45s} {v['median_ms']:10.3f} {v['p90_ms']:10.3f} {v['min_ms']:10.3f}")


if __name__ == "__main__":
    main()
