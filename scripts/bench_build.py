"""Build-time benchmark: cuda-agent's cached build vs the original approaches, one run, one machine.

Measures (seconds, wall):
  ours_cold_machine   empty cache: the fixed runtime object + one kernel + one binding + link
  ours_cold_workspace runtime already cached (as on any machine after its first build): a new
                      one-kernel workspace
  ours_rebuild_cu     after editing the one .cu
  ours_noop           nothing changed (hash check only)
  orig_first / orig_rebuild  torch.utils.cpp_extension.load of a fresh build directory with the
                      same kernel and a torch/extension.h + pybind binding (the original CUDA-Agent
                      workspace's approach), then again after editing the .cu
  load_inline_add     KernelBench-style load_inline of a one-line add kernel with torch/extension.h
Usage: python scripts/bench_build.py OUT.json
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples" / "cuda_axpby" / "solution" / "kernels"


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def ours(reps: int = 3) -> dict:
    from cuda_agent.sandbox import build as B

    out: dict = {"ours_cold_machine": [], "ours_cold_workspace": [], "ours_rebuild_cu": [], "ours_noop": []}
    for rep in range(reps):
        cache = Path(tempfile.mkdtemp(prefix="bench-cache-"))
        os.environ["CUDA_AGENT_CACHE"] = str(cache)
        B.toolchain.cache_clear()
        ws = Path(tempfile.mkdtemp(prefix="bench-ws-")) / "kernels"
        shutil.copytree(EX, ws)
        # salt so that no object is shared between repetitions
        cu = ws / "axpby.cu"
        cu.write_text(cu.read_text() + f"\n// rep {rep} {time.time()}\n")
        dt, r = timed(lambda: B.build(ws, "cuda"))
        assert r.ok, r.log
        out["ours_cold_machine"].append(dt)
        # a new workspace on a machine whose runtime object is cached
        ws2 = Path(tempfile.mkdtemp(prefix="bench-ws2-")) / "kernels"
        shutil.copytree(ws, ws2)
        for f in ws2.iterdir():
            f.write_text(f.read_text() + f"\n// other workspace {time.time()}\n")
        dt, r = timed(lambda: B.build(ws2, "cuda"))
        assert r.ok, r.log
        out["ours_cold_workspace"].append(dt)
        cu2 = ws2 / "axpby.cu"
        cu2.write_text(cu2.read_text().replace("a * u.x", "u.x * a") + "\n")
        dt, r = timed(lambda: B.build(ws2, "cuda"))
        assert r.ok and r.compiled == ["axpby.cu"], (r.compiled, r.log)
        out["ours_rebuild_cu"].append(dt)
        dt, r = timed(lambda: B.build(ws2, "cuda"))
        assert r.ok and not r.compiled
        out["ours_noop"].append(dt)
        shutil.rmtree(cache, ignore_errors=True)
    return out


ORIG_BINDING = r'''
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
extern "C" int axpby_launch(const float* x, const float* y, float* out, float a, float b, int64_t n, void* stream);
torch::Tensor axpby(torch::Tensor x, torch::Tensor y, double a, double b) {
  auto out = torch::empty_like(x);
  axpby_launch(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), (float)a, (float)b, x.numel(),
               (void*)c10::cuda::getCurrentCUDAStream().stream());
  return out;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("axpby", &axpby); }
'''


def original() -> dict:
    from torch.utils.cpp_extension import load

    out = {}
    d = Path(tempfile.mkdtemp(prefix="bench-orig-"))
    (d / "axpby.cu").write_text((EX / "axpby.cu").read_text())
    (d / "binding.cpp").write_text(ORIG_BINDING)
    bdir = d / "build"
    bdir.mkdir()
    dt, _ = timed(lambda: load("orig_axpby", [str(d / "binding.cpp"), str(d / "axpby.cu")],
                               build_directory=str(bdir), verbose=False))
    out["orig_first"] = dt
    (d / "axpby.cu").write_text((d / "axpby.cu").read_text().replace("a * u.x", "u.x * a"))
    bdir2 = d / "build2"  # the original builds in a fresh directory each time
    bdir2.mkdir()
    dt, _ = timed(lambda: load("orig_axpby2", [str(d / "binding.cpp"), str(d / "axpby.cu")],
                               build_directory=str(bdir2), verbose=False))
    out["orig_rebuild"] = dt
    return out


def load_inline_add() -> float:
    from torch.utils.cpp_extension import load_inline

    cuda = r'''
#include <torch/extension.h>
__global__ void add_k(const float* a, const float* b, float* c, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) c[i]=a[i]+b[i];}
torch::Tensor add(torch::Tensor a, torch::Tensor b){auto c=torch::empty_like(a); int n=a.numel();
add_k<<<(n+255)/256,256>>>(a.data_ptr<float>(),b.data_ptr<float>(),c.data_ptr<float>(),n); return c;}
'''
    d = tempfile.mkdtemp(prefix="bench-inline-")
    dt, _ = timed(lambda: load_inline("inline_add", cpp_sources="torch::Tensor add(torch::Tensor a, torch::Tensor b);",
                                      cuda_sources=cuda, functions=["add"], build_directory=d, verbose=False))
    return dt


def main() -> None:
    import statistics

    import torch

    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cpus": os.cpu_count()}
    res.update(ours())
    res.update(original())
    res["load_inline_add"] = load_inline_add()
    summary = {k: (statistics.median(v) if isinstance(v, list) else v) for k, v in res.items()}
    res["median"] = {k: v for k, v in summary.items() if isinstance(v, float)}
    Path(sys.argv[1]).write_text(json.dumps(res, indent=1))
    for k, v in res["median"].items():
        print(f"{k:22s} {v:7.2f} s")


if __name__ == "__main__":
    main()
