"""Cold single-file builds with and without the precompiled torch/extension.h, side by side.

Each round builds the same ``load_inline`` extension three ways, in alternating order, each
time with a source no cache has seen (a different constant in a comment):
  pch        through ``inline_build.serve`` (contained builder, the shared precompiled header)
  no_pch     the same, with the precompiled header withheld
  torch      ``torch.utils.cpp_extension.load_inline`` into a fresh directory, in this process
             (what KernelBench's evaluator does for every evaluation)
plus, once, the one-time cost of precompiling the header for this flag set.

Usage: python scripts/bench_inline_pch.py OUT.json [--rounds N] [--device cpu|cuda]
The CPU source is examples/cpu_scaled_swish/model_new_inline.py's kernel (-O3 -fopenmp); the
CUDA one a one-line add kernel as in KernelBench's model_new_ex_add.py.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CUDA_SRC = r"""
#include <torch/extension.h>
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
  auto out = torch::empty_like(a);
  int n = a.numel();
  add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}
"""


def cpu_request(tag: str) -> dict:
    tree = ast.parse((ROOT / "examples" / "cpu_scaled_swish" / "model_new_inline.py").read_text())
    cpp = next(n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "CPP")
    return {"api": "load_inline", "name": "bench_swish", "cpp_sources": f"// {tag}\n{cpp}",
            "functions": ["scaled_swish"], "extra_cflags": ["-O3", "-fopenmp"], "extra_ldflags": ["-fopenmp"]}


def cuda_request(tag: str) -> dict:
    return {"api": "load_inline", "name": "bench_add", "cpp_sources": "torch::Tensor add(torch::Tensor a, torch::Tensor b);",
            "cuda_sources": f"// {tag}\n{CUDA_SRC}", "functions": ["add"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args()
    os.environ["CUDA_AGENT_CACHE"] = tempfile.mkdtemp(prefix="bench-pch-cache-")
    sys.path.insert(0, str(ROOT / "src"))
    import torch.utils.cpp_extension as ce

    from cuda_agent.sandbox import inline_build

    make = cpu_request if a.device == "cpu" else cuda_request
    job = Path(tempfile.mkdtemp(prefix="bench-pch-job-"))
    t = time.perf_counter()
    place = inline_build._pch(inline_build.normalize(make("pch-build")), a.device, 600)
    out: dict = {"device": a.device, "pch_build_s": round(time.perf_counter() - t, 2),
                 "pch_bytes": (place / "torch" / "extension.h.gch").stat().st_size if place else None,
                 "pch": [], "no_pch": [], "torch": [], "verdicts": []}
    real = inline_build._pch

    def ours(tag: str, with_pch: bool) -> float:
        inline_build._pch = real if with_pch else (lambda *_: None)
        t0 = time.perf_counter()
        rep = inline_build.serve(make(tag), a.device, job, timeout=900)
        dt = time.perf_counter() - t0
        assert rep["ok"] and not rep["cached"], rep.get("log")
        out["verdicts"].append(rep.get("pch"))
        return dt

    def torch_direct(tag: str) -> float:
        req = make(tag)
        d = tempfile.mkdtemp(prefix="torch-", dir=job)
        t0 = time.perf_counter()
        ce.load_inline(req["name"] + "_t" + tag.replace("-", "_"), req["cpp_sources"], req.get("cuda_sources"),
                       functions=req["functions"], extra_cflags=req.get("extra_cflags"),
                       extra_ldflags=req.get("extra_ldflags"), build_directory=d)
        return time.perf_counter() - t0

    try:
        rounds(a.rounds, ours, torch_direct, out)
    finally:  # the cache holds an ~800 MB header per flag set
        shutil.rmtree(os.environ["CUDA_AGENT_CACHE"], ignore_errors=True)
        shutil.rmtree(job, ignore_errors=True)
    for kind in ("pch", "no_pch", "torch"):
        out[f"{kind}_median_s"] = statistics.median(out[kind])
    out["speedup_vs_no_pch"] = round(out["no_pch_median_s"] / out["pch_median_s"], 2)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if not isinstance(v, list)}, indent=1))
    return 0


def rounds(n: int, ours, torch_direct, out: dict) -> None:
    """Each kind once a round, the order reversed every other round (no kind always runs first)."""
    for r in range(n):
        order = ["pch", "no_pch", "torch"] if r % 2 == 0 else ["torch", "no_pch", "pch"]
        for kind in order:
            tag = f"round-{r}-{kind}"
            dt = torch_direct(tag) if kind == "torch" else ours(tag, kind == "pch")
            out[kind].append(round(dt, 2))
            print(f"round {r} {kind:7s} {dt:6.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
