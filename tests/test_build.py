"""The cached ninja build: the CPU example, full cache hits, one-file rebuilds, trimmed
compiler errors, bad layouts, the timeout, and the CUDA path (nvcc + link) without a GPU.

The object cache is the session's (conftest), so the fixed runtime and the example's
binding are compiled once and reused by every test solution that copies them."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox.build import build, trim_log
from cuda_agent.sandbox.cache import cache_root

from conftest import FIXTURES


@pytest.fixture(scope="module")
def example_build(example_dir):
    r = build(example_dir / "solution" / "kernels", "cpu")
    assert r.ok, r.log
    return r


def test_example_builds(example_build):
    r = example_build
    so = Path(r.so_path)
    assert so.is_file() and so.name == "cuda_agent_ext.so"
    assert so.is_relative_to(cache_root())
    assert r.log == ""
    assert set(r.compiled) | set(r.cached) == {"swish.cpp", "swish_binding.cpp", "cuda_agent_runtime.cpp"}


def test_second_build_is_fully_cached(example_build, example_dir):
    t = time.perf_counter()
    r = build(example_dir / "solution" / "kernels", "cpu")
    took = time.perf_counter() - t
    assert r.ok and r.compiled == []
    assert r.so_path == example_build.so_path
    assert sorted(r.cached) == ["cuda_agent_runtime.cpp", "swish.cpp", "swish_binding.cpp"]
    assert took < 1.0, f"a fully cached build took {took:.2f} s"


def test_editing_one_cpp_recompiles_only_that_file(example_build, make_solution):
    sol = make_solution("edited")
    k = sol / "kernels" / "swish.cpp"
    k.write_text(k.read_text() + f"\n// edited by {sol}\n")
    r = build(sol / "kernels", "cpu")
    assert r.ok, r.log
    assert r.compiled == ["swish.cpp"]
    assert {"swish_binding.cpp", "cuda_agent_runtime.cpp"} <= set(r.cached)
    assert r.so_path != example_build.so_path
    # and again: nothing to do
    assert build(sol / "kernels", "cpu").compiled == []


def test_header_change_invalidates_objects(example_build, make_solution):
    sol = make_solution("with_header")
    (sol / "kernels" / "params.h").write_text(f"// {sol}\n#define CA_TEST_UNUSED 1\n")
    r = build(sol / "kernels", "cpu")
    assert r.ok, r.log
    assert sorted(r.compiled) == ["swish.cpp", "swish_binding.cpp"]  # runtime does not see kernels/ headers


def test_compile_error_is_trimmed_with_file_line(example_build, make_solution):
    sol = make_solution("err", {"kernels/swish.cpp": FIXTURES / "swish_compile_error.cpp"})
    r = build(sol / "kernels", "cpu")
    assert not r.ok and r.so_path is None
    assert r.compiled == ["swish.cpp"]
    assert "swish_binding.cpp" in r.cached  # the binding object is reused, not rebuilt
    assert re.search(r"swish\.cpp:8:\d+: error: .*undeclared_factor", r.log), r.log
    assert str(sol) not in r.log  # paths relative to the solution
    assert "ninja" not in r.log and "FAILED" not in r.log
    assert len(r.log.splitlines()) <= 10


@pytest.fixture(scope="module")
def template_error(tmp_path_factory, example_build):
    from conftest import copy_example

    sol = copy_example(tmp_path_factory.mktemp("tmpl") / "sol",
                       {"kernels/swish.cpp": FIXTURES / "swish_template_error.cpp"})
    return build(sol / "kernels", "cpu")


def test_template_heavy_error_stays_short(template_error):
    r = template_error
    assert not r.ok and r.compiled == ["swish.cpp"]
    lines = r.log.splitlines()
    assert len(lines) <= 40, f"{len(lines)} lines:\n{r.log}"
    assert len(r.log) <= 4100
    assert "error: no match for" in r.log and "operator<" in r.log
    assert "In instantiation" not in r.log


def test_template_error_names_the_users_line(template_error):
    assert re.search(r"swish\.cpp:1[34]:\d+", template_error.log), template_error.log


def test_trim_log_keeps_first_errors_and_counts_the_rest():
    noise = "\n".join(f"/usr/include/c++/bits/stl_x.h:{i}:5: note: candidate template ignored" for i in range(300))
    errs = "\n".join(f"/root/ws/kernels/k.cu({i}): error: identifier \"y{i}\" is undefined\n  y{i} = 1;\n  ^"
                     for i in range(1, 21))
    log = "[1/3] nvcc ...\nFAILED: k.o\n" + errs + "\n" + noise + "\nninja: build stopped: subcommand failed."
    out = trim_log(log, Path("/root/ws"))
    lines = out.splitlines()
    assert lines[0] == 'kernels/k.cu(1): error: identifier "y1" is undefined'
    assert sum(": error:" in l for l in lines) == 8
    assert lines[-1] == "... (12 more errors)"
    assert "note: candidate" not in out and "ninja" not in out
    assert len(lines) <= 40


def test_trim_log_link_errors():
    log = "k.o: in function `f':\nk.cpp:(.text+0x5): undefined reference to `missing_fn'\ncollect2: error: ld returned 1 exit status\n"
    out = trim_log(log)
    assert "undefined reference to `missing_fn'" in out


def test_cu_in_cpu_build_is_refused(tmp_path):
    k = tmp_path / "kernels"
    k.mkdir()
    (k / "a.cu").write_text("__global__ void f() {}\n")
    (k / "a_binding.cpp").write_text("// nothing\n")
    r = build(k, "cpu")
    assert not r.ok
    assert "CUDA sources (.cu) cannot be built for --device cpu" in r.log and "kernels/*.cpp" in r.log


def test_missing_binding_and_empty_dir(tmp_path):
    k = tmp_path / "kernels"
    k.mkdir()
    r = build(k, "cpu")
    assert not r.ok and "no sources in" in r.log
    (k / "a.cpp").write_text("int f() { return 1; }\n")
    r = build(k, "cpu")
    assert not r.ok and "no *_binding.cpp" in r.log and "CUDA_AGENT_OPS" in r.log
    assert not build(tmp_path / "does_not_exist", "cpu").ok


def test_build_timeout(example_build, make_solution):
    slow = ("#include <regex>\n#include <string>\n#include <cstdint>\n"
            f"// unique: {time.time_ns()}\n"
            "static bool m(const std::string& s) { return std::regex_match(s, std::regex(\"a+b*\")); }\n"
            'extern "C" int scaled_swish_cpu(const float* x, const float* s, float* o, int64_t r, int64_t c)'
            " { for (int64_t i = 0; i < r * c; ++i) o[i] = x[i] * s[i % c] * (m(\"ab\") ? 1.f : 0.f); return 0; }\n")
    sol = make_solution("slow", {"kernels/swish.cpp": slow})
    t = time.perf_counter()
    r = build(sol / "kernels", "cpu", timeout=0.3)
    took = time.perf_counter() - t
    assert not r.ok and r.log.startswith("build timed out after")
    assert took < 5, took


# --- the CUDA path: nvcc compiles, the library links (not loadable with CPU torch) -----

CU = r"""
#include <cuda_runtime.h>
#include <cstdint>
__global__ void add_one_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
extern "C" int add_one(const float* x, float* y, int64_t n, void* stream) {
  add_one_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(x, y, n);
  return (int)cudaGetLastError();
}
"""
CU_BINDING = r"""
#include "cuda_agent_binding.h"
extern "C" int add_one(const float* x, float* y, int64_t n, void* stream);
at::Tensor add_one_op(const at::Tensor& x) {
  CA_CHECK_INPUT(x);
  at::Tensor y = at::empty_like(x);
  CA_CHECK_LAUNCH(add_one(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), cuda_agent_stream()));
  return y;
}
CUDA_AGENT_OPS(m) { m.def("add_one", &add_one_op); }
"""


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="nvcc not installed")
def test_cuda_build_with_nvcc_links(tmp_path):
    k = tmp_path / "kernels"
    k.mkdir()
    (k / "add.cu").write_text(CU)
    (k / "add_binding.cpp").write_text(CU_BINDING)
    r = build(k, "cuda")
    assert r.ok, r.log
    assert sorted(r.compiled + r.cached) == ["add.cu", "add_binding.cpp", "cuda_agent_runtime.cpp"]
    so = Path(r.so_path)
    assert so.is_file() and so.stat().st_size > 0
    # an error in the .cu is reported with nvcc's file(line)
    (k / "add.cu").write_text(CU.replace("y[i] = x[i] + 1.0f;", "y[i] = x[i] + undefined_var;"))
    bad = build(k, "cuda")
    assert not bad.ok and bad.compiled == ["add.cu"]
    assert re.search(r"add\.cu\(6\): error: identifier \"undefined_var\" is undefined", bad.log), bad.log
