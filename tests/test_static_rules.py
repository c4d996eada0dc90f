"""Static rules: every rule flags its attack at the right line; legitimate code stays clean.

Each C++/Python snippet marks the line that must be reported with a trailing ``// <-`` or
``# <-`` comment (comments are invisible to the checks, so the marker cannot trigger them).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cuda_agent.sandbox.rules.cpp_lexer import CHAR, IDENT, NUMBER, STRING, tokenize
from cuda_agent.sandbox.rules import RULES, check_sources, rules_table, task_is_low_precision

FIXTURES = Path(__file__).parent / "attacks" / "static"
BF16_TASK = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return (x.bfloat16() @ x.bfloat16().T)\n"
FP32_TASK = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x @ x.T\n"

STARTER = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn
    from cuda_agent.ext import ops


    class ModelNew(nn.Module):
        def forward(self, x):
            return ops.run(x)
    """
)


def _marked_line(code: str, marker: str) -> int:
    lines = [i + 1 for i, ln in enumerate(code.splitlines()) if ln.rstrip().endswith(marker)]
    assert len(lines) == 1, f"snippet needs exactly one {marker!r} marker"
    return lines[0]


def _workspace(tmp_path: Path, files: dict[str, str]) -> Path:
    ws = tmp_path / "ws"
    (ws / "kernels").mkdir(parents=True)
    files = {"model_new.py": STARTER, **files}
    for name, text in files.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(textwrap.dedent(text))
    return ws


def _rules_at(violations, where: str) -> set[str]:
    return {v.rule for v in violations if v.where == where}


# ------------------------------------------------------------------------------------ lexer


def test_lexer_hides_comments_and_keeps_literals_whole():
    src = 'int a = 1\'000; // at::add\n/* at::sum\n */ auto s = "at::mul(";\nchar c = \'"\'; auto r = R"x( )" at::div )x";\n'
    lexed = tokenize(src)
    idents = [t.text for t in lexed.tokens if t.kind == IDENT]
    assert "add" not in idents and "sum" not in idents and "mul" not in idents and "div" not in idents
    assert [t.text for t in lexed.tokens if t.kind == NUMBER] == ["1'000"]
    strings = [t for t in lexed.tokens if t.kind == STRING]
    assert strings[0].value == "at::mul(" and strings[0].line == 3
    assert strings[1].value == ' )" at::div ' and strings[1].line == 4
    assert [t.value for t in lexed.tokens if t.kind == CHAR] == ['"']


def test_lexer_splices_and_digraph_directives():
    lexed = tokenize("%:include <torch/extension.h>\nauto y = at::ma\\\ntmul(a, b);\n#define X at::add\n")
    assert lexed.directives[0].header == "torch/extension.h" and lexed.directives[0].system
    idents = [(t.text, t.line, t.in_directive) for t in lexed.tokens if t.kind == IDENT]
    assert ("matmul", 2, False) in idents
    assert ("add", 4, True) in idents


# ------------------------------------------------------------------------------------ C++ attacks

CPP_ATTACKS = [
    # (rule, file, code)
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        at::Tensor f(const at::Tensor& a, const at::Tensor& b) {
          return at::matmul(a, b); // <-
        }
        """),
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        at::Tensor f(at::Tensor x) {
          auto y = at::empty_like(x);
          return x.sum(1); // <-
        }
        """),
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        at::Tensor f(const at::Tensor& a, const at::Tensor& b) {
          at::Tensor c = a * b; // <-
          return c;
        }
        """),
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        at::Tensor f(const at::Tensor& a, const at::Tensor& b) {
          return matmul(a, b); // <-
        }
        """),
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        using namespace at; // <-
        Tensor f(const Tensor& a) { return a; }
        """),
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        #define MM at::matmul // <-
        at::Tensor f(const at::Tensor& a) { return MM(a, a); }
        """),
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        at::Tensor f(const at::Tensor& a) {
          return at::mat\\
        mul(a, a); // the splice joins the name; reported on the line where it starts
        }
        """),
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        at::Tensor f(const at::Tensor& a) {
          auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::relu", ""); // <-
          return a;
        }
        """),
    ("cpp-torch-compute", "kernels/k.cu", """
        __global__ void k(float* x) {}
        void g(void* t) { at::add(t, t); } // <-
        """),
    ("cpp-op-override", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        at::Tensor fake_add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& s) { return a; }
        TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl("add.Tensor", &fake_add); } // <-
        """),
    ("cpp-torch-header", "kernels/k.cu", """
        #include <cuda_runtime.h>
        #include <torch/extension.h> // <-
        __global__ void k(float* x) {}
        """),
    ("cpp-torch-header", "kernels/k.cpp", """
        %:include <ATen/ATen.h> // <-
        void k(float* x) {}
        """),
    ("cpp-torch-header", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        #include <ATen/cuda/CUDAContext.h> // <-
        """),
    ("cpp-include-path", "kernels/k.cu", """
        #include "../model.py" // <-
        """),
    ("cpp-include-path", "kernels/k.cu", """
        #define HDR <torch/extension.h>
        #include HDR // <-
        """),
    ("cpp-cublas-non-gemm", "kernels/k.cu", """
        #include <cublas_v2.h>
        void f(cublasHandle_t h, const float* x, float* y, int n) {
          const float a = 1.f;
          cublasSaxpy(h, n, &a, x, 1, y, 1); // <-
        }
        """),
    ("cpp-cublas-non-gemm", "kernels/k.cu", """
        #include <cublas_v2.h>
        auto fp = &cublasSgemv; // <-
        """),
    ("cpp-cudnn-non-conv", "kernels/k.cu", """
        #include <cudnn.h>
        void f(cudnnHandle_t h, cudnnActivationDescriptor_t a, cudnnTensorDescriptor_t d, const float* x, float* y) {
          float one = 1.f, zero = 0.f;
          cudnnActivationForward(h, a, &one, d, x, &zero, d, y); // <-
        }
        """),
    ("cpp-library-call", "kernels/k.cu", """
        #include <cufft.h>
        void f(cufftHandle p, cufftComplex* x) { cufftExecC2C(p, x, x, CUFFT_FORWARD); } // <-
        """),
    ("cpp-extra-stream", "kernels/k.cu", """
        __global__ void k(float* x) {}
        extern "C" int launch(float* x, void* stream) {
          cudaStream_t s;
          cudaStreamCreate(&s); // <-
          k<<<1, 1, 0, s>>>(x);
          return 0;
        }
        """),
    ("cpp-extra-stream", "kernels/k.cpp", """
        #include <thread>
        extern "C" int launch(float* x, long n, void*) {
          std::thread t([=] { for (long i = 0; i < n; ++i) x[i] *= 2; });
          t.detach(); // <-
          return 0;
        }
        """),
    ("cpp-extra-stream", "kernels/k.cu", """
        static void CUDART_CB work(void* p) {}
        extern "C" int launch(float* x, void* stream) {
          return cudaLaunchHostFunc((cudaStream_t)stream, work, x); // <-
        }
        """),
    ("cpp-persisting-l2", "kernels/k.cu", """
        extern "C" int launch(float* x, void* stream) {
          cudaStreamAttrValue attr = {};
          attr.accessPolicyWindow.base_ptr = x; // <-
          return 0;
        }
        """),
    ("cpp-device-config", "kernels/k.cu", """
        extern "C" int launch(float* x, void* stream) {
          cudaDeviceReset(); // <-
          return 0;
        }
        """),
    ("cpp-system-call", "kernels/k.cpp", """
        #include <cstdlib>
        extern "C" int launch(float* x, void*) { return std::system("nvidia-smi -lgc 300"); } // <-
        """),
    ("cpp-system-call", "kernels/k.cpp", """
        #include <dlfcn.h>
        extern "C" int launch(float* x, void*) {
          void* h = dlopen("libtorch_cuda.so", RTLD_NOW); // <-
          return h != nullptr;
        }
        """),
    ("cpp-file-access", "kernels/k.cpp", """
        #include <fstream>
        extern "C" int launch(float* x, void*) {
          std::ifstream f("model.py"); // <-
          return 0;
        }
        """),
    ("cpp-file-access", "kernels/k.cpp", """
        #include <cstdlib>
        extern "C" int launch(float* x, void*) { return getenv("CUDA_AGENT_TIMING") != nullptr; } // <-
        """),
    ("cpp-sleep", "kernels/k.cpp", """
        #include <thread>
        #include <chrono>
        extern "C" int launch(float* x, void*) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5)); // <-
          return 0;
        }
        """),
    ("cpp-symbol-interposition", "kernels/k.cu", """
        #include <cuda_runtime.h>
        extern "C" cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { // <-
          *ms = 0.001f;
          return cudaSuccess;
        }
        """),
    ("cpp-load-time-hook", "kernels/k.cpp", """
        __attribute__((constructor)) static void patch_on_load() {} // <-
        """),
    ("cpp-runtime-code", "kernels/k.cu", """
        #include <nvrtc.h>
        void f(const char* src) {
          nvrtcProgram p;
          nvrtcCreateProgram(&p, src, "k.cu", 0, nullptr, nullptr); // <-
        }
        """),
    ("cpp-precision-downgrade", "kernels/k.cu", """
        #include <cuda_fp16.h>
        __global__ void k(const float* x, float* y) {
          __half h = __float2half(x[0]); // <-
          y[0] = __half2float(h);
        }
        """),
    ("cpp-precision-downgrade", "kernels/k.cu", """
        #include <mma.h>
        using namespace nvcuda;
        __global__ void k() {
          wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a; // <-
        }
        """),
    ("cpp-precision-downgrade", "kernels/k.cu", """
        __global__ void k(unsigned* a, float* c) {
          asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};" // <-
                       : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]));
        }
        """),
    ("cpp-precision-downgrade", "kernels/k.cu", """
        #include <cublas_v2.h>
        void f(cublasHandle_t h) { cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH); } // <-
        """),
    ("cpp-precision-downgrade", "kernels/k.cu", """
        #include <cudnn.h>
        void f(cudnnConvolutionDescriptor_t d) { cudnnSetConvolutionMathType(d, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION); } // <-
        """),
    ("cpp-precision-downgrade", "kernels/k.cu", """
        __global__ void k(const float* x, float* y) {
          half2 v; // <-
        }
        """),
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        at::Tensor f(at::Tensor a) {
          a[0] = 1; // <-
          return a;
        }
        """),
    ("cpp-torch-compute", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        at::Tensor f(const at::Tensor& a, const at::Tensor& b) {
          return a.operator+(b); // <-
        }
        """),
    ("cpp-python-api", "kernels/op_binding.cpp", """
        #include "cuda_agent_binding.h"
        void patch() {
          pybind11::module_::import("torch").attr("allclose") = pybind11::none(); // <-
        }
        """),
    ("cpp-python-api", "kernels/k.cpp", """
        extern "C" int PyRun_SimpleString(const char*);
        extern "C" int launch(float* x, void*) { return PyRun_SimpleString("import torch"); } // <-
        """),
    ("cpp-token-paste", "kernels/k.cu", """
        #define CAT(a, b) a##b
        extern "C" int launch(float* x, void* stream) {
          cudaStream_t s;
          CAT(cudaStream, Create)(&s); // <-
          return 0;
        }
        """),
]


@pytest.mark.parametrize("rule,fname,code", CPP_ATTACKS, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(CPP_ATTACKS)])
def test_cpp_attack_is_flagged_at_its_line(tmp_path, rule, fname, code):
    code = textwrap.dedent(code).lstrip("\n")
    line = _marked_line(code, "// <-") if "// <-" in code else next(
        i + 1 for i, ln in enumerate(code.splitlines()) if "at::mat" in ln
    )
    ws = _workspace(tmp_path, {fname: code})
    found = check_sources(ws, task_source=FP32_TASK)
    assert rule in _rules_at(found, f"{fname}:{line}"), found
    v = next(v for v in found if v.rule == rule)
    assert v.exploit_class == RULES[rule].exploit_class and v.message


def test_cpp_rule_ids_all_covered():
    cpp_rules = {r for r in RULES if r.startswith("cpp-")}
    assert cpp_rules <= {r for r, _, _ in CPP_ATTACKS}


# ------------------------------------------------------------------------------------ C++ negatives

CPP_CLEAN = [
    ("kernels/k.cu", """
        // at::add(x, y); cudaStreamCreate(&s); system("ls"); __half h; std::thread t;
        /* cublasSaxpy(h, n, &a, x, 1, y, 1);  cudnnActivationForward(...) */
        #include <cstdio>
        __global__ void k(float* x) {
          const char* msg = "at::matmul cudaDeviceReset() popen( getenv(";
          char q = '"';
          int half = blockDim.x / 2;
          for (; half > 0; half >>= 1) x[threadIdx.x] += half * 2;
        }
        """),
    ("kernels/k.cu", """
        #include <cublas_v2.h>
        #include <cudnn.h>
        void f(cublasHandle_t h, cublasLtHandle_t lt, cudnnHandle_t d, cudaStream_t s, void* ws) {
          cublasCreate(&h); cublasSetStream(h, s); cublasSetWorkspace(h, ws, 1 << 20);
          cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
          cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, nullptr, 1, 1, nullptr, 1, 1, nullptr, nullptr, 1, 1, 1);
          cublasLtMatmul(lt, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, s);
          cudnnConvolutionForward(d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, ws, 0, nullptr, nullptr, nullptr);
          cudnnConvolutionBiasActivationForward(d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, ws, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
        }
        """),
    ("kernels/k_binding.cpp", """
        #include "cuda_agent_binding.h"
        #include <vector>
        #include <algorithm>
        at::Tensor f(const at::Tensor& a, at::Tensor b) {
          auto out = at::empty_like(a);
          auto z = at::zeros({a.size(0), 4}, a.options().dtype(at::kFloat));
          auto s = at::empty_strided(a.sizes(), a.strides(), a.options());
          std::vector<int64_t> dims(a.sizes().begin(), a.sizes().end());
          int64_t m = std::max<int64_t>(a.numel() * 2, b.size(0) + 1);
          auto v = a.view({-1});
          bool ok = a.is_contiguous() && a.dim() == 2 && a.scalar_type() == at::kFloat && dims.at(0) > 0;
          float* p = out.data_ptr<float>() + m;
          (void)p; (void)ok; (void)v; (void)z; (void)s;
          return out;
        }
        CUDA_AGENT_OPS(m) { m.def("f", &f); }
        """),
    ("kernels/k.cpp", """
        #include <omp.h>
        #include <thread>
        #include <vector>
        extern "C" int launch(float* x, long n, void*) {
        #pragma omp parallel for simd
          for (long i = 0; i < n; ++i) x[i] *= 2;
          std::vector<std::thread> pool;
          for (int t = 0; t < 2; ++t) pool.emplace_back([=] { x[t] += 1; });
          for (auto& th : pool) th.join();
          return 0;
        }
        """),
]


@pytest.mark.parametrize("fname,code", CPP_CLEAN, ids=range(len(CPP_CLEAN)))
@pytest.mark.parametrize("profile", ["strict", "kernelbench"])
def test_cpp_legitimate_code_is_clean(tmp_path, fname, code, profile):
    ws = _workspace(tmp_path, {fname: code})
    assert check_sources(ws, task_source=FP32_TASK, profile=profile) == []


def test_bf16_task_allows_bf16_and_tensor_cores(tmp_path):
    code = """
        #include <cuda_bf16.h>
        #include <mma.h>
        using namespace nvcuda;
        __global__ void k(const __nv_bfloat16* a, float* c) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
          __nv_bfloat16 v = __float2bfloat16(c[0]);
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0}, {%1}, {%2}, {%3};" :: "f"(c[0]));
        }
        """
    ws = _workspace(tmp_path, {"kernels/k.cu": code})
    assert check_sources(ws, task_source=BF16_TASK) == []
    fp32 = check_sources(ws, task_source=FP32_TASK)
    assert {v.rule for v in fp32} == {"cpp-precision-downgrade"}
    assert task_is_low_precision(BF16_TASK) and not task_is_low_precision(FP32_TASK)


def test_torch_header_allowed_in_kernelbench_profile(tmp_path):
    ws = _workspace(tmp_path, {"kernels/k.cu": "#include <torch/extension.h>\n__global__ void k() {}\n"})
    assert [v.rule for v in check_sources(ws, profile="strict")] == ["cpp-torch-header"]
    assert check_sources(ws, profile="kernelbench") == []


def test_tensor_names_are_scoped_to_their_function(tmp_path):
    """A kernel's float* x and the wrapper's torch::Tensor x are different variables."""
    code = """
        #include <torch/extension.h>
        __global__ void k(const float* x, float* y, int n) {
          const float* p = x + blockIdx.x;
          y[threadIdx.x] = p[0] * 2.f;
        }
        torch::Tensor run(torch::Tensor x) {
          auto y = torch::empty_like(x);
          k<<<1, 1>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)x.numel());
          return y;
        }
        """
    f = tmp_path / "model_new.py"
    q = "'" * 3
    f.write_text("from torch.utils.cpp_extension import load_inline\nSRC = " + q + textwrap.dedent(code) + q + "\nm = load_inline('m', cpp_sources='', cuda_sources=SRC, extra_cuda_cflags=['-O3', '-DBLOCK=256'])\n")
    assert check_sources(f, profile="kernelbench") == []
    f.write_text(f.read_text().replace("return y;", "return y + x;"))
    assert check_sources(f, profile="kernelbench") == []  # torch in C++ is allowed where torch is
    assert {(v.rule, v.where) for v in check_sources(f, profile="strict")} >= {("cpp-torch-compute", "model_new.py:11")}


def test_stream_with_join_is_allowed(tmp_path):
    code = """
        extern "C" int launch(float* x, void* stream) {
          static cudaStream_t side;
          cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
          cudaEvent_t e;
          cudaEventRecord(e, side);
          cudaStreamWaitEvent((cudaStream_t)stream, e, 0);
          return 0;
        }
        """
    assert check_sources(_workspace(tmp_path, {"kernels/k.cu": code})) == []


# ------------------------------------------------------------------------------------ Python attacks

PY_ATTACKS = [
    ("py-forbidden-import", "import threading # <-"),
    ("py-forbidden-import", "from inspect import currentframe # <-"),
    ("py-forbidden-import", "import ctypes # <-"),
    ("py-forbidden-import", "import timeit # <-"),
    ("py-forbidden-import", "from cuda_agent.sandbox import compare # <-"),
    ("py-import-not-allowed", "import random # <-"),
    ("py-foreign-compute", "import numpy as np # <-\nZ = np.exp(2.0)"),
    ("py-torch-internals", "T = torch\nT._C._set_grad_enabled(False) # <-"),
    ("py-torch-internals", "from torch.utils._python_dispatch import TorchDispatchMode # <-"),
    ("py-torch-internals", "lib = torch.library.Library('aten', 'IMPL') # <-"),
    ("py-torch-internals", "torch.ops.load_library('prebuilt.so') # <-"),
    ("py-torch-compiler", "fast = torch.compile(lambda x: x) # <-"),
    ("py-frame-access", "def peek(fn):\n    return fn.__globals__ # <-"),
    ("py-frame-access", "import sys\nframe = sys._getframe(1) # <-"),
    ("py-extra-stream", "side = torch.cuda.Stream() # <-"),
    ("py-extra-stream", "torch.cuda.set_stream(torch.cuda.Stream()) # <-\ntorch.cuda.current_stream().wait_stream(torch.cuda.Stream())"),
    ("py-timer", "start = torch.cuda.Event(enable_timing=True) # <-"),
    ("py-timer", "def t(a, b):\n    return a.elapsed_time(b) # <-"),
    ("py-process-state", "import os\nMODE = os.environ.get('CUDA_AGENT_PHASE') # <-"),
    ("py-process-state", "import sys\nTIMING = 'profile' in sys.argv # <-"),
    ("py-file-access", "REF = open('model.py').read() # <-"),
    ("py-dynamic-code", "mm = getattr(torch, 'mat' + 'mul') # <-"),
    ("py-dynamic-code", "eval('torch.matmul') # <-"),
    ("py-dynamic-code", "g = globals() # <-"),
    ("py-monkeypatch", "torch.allclose = lambda *a, **k: True # <-"),
    ("py-monkeypatch", "setattr(torch.testing, 'assert_close', lambda *a, **k: None) # <-"),
    ("py-monkeypatch", "torch.cuda.Event.elapsed_time = lambda self, other: 0.001 # <-"),
    ("py-monkeypatch", "vars(torch)['matmul'] = None # <-"),
    ("py-monkeypatch", "torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o) # <-"),
    ("py-try-fallback", "def f(x):\n    try: # <-\n        return ops.run(x)\n    except RuntimeError:\n        return x"),
    ("py-reference-model", "from model import Model # <-"),
    ("py-reference-model", "class Cheat(Model): # <-\n    pass"),
    ("py-reference-model", "REF = Model() # <-"),
    ("py-lazy-tensor", "class Lazy(torch.Tensor): # <-\n    pass"),
    ("py-lazy-tensor", "class M:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None): # <-\n        return func(*args)"),
    ("py-lazy-tensor", "t = torch.Tensor._make_subclass(object, torch.empty(1)) # <-"),
    ("py-precision-downgrade", "def f(x):\n    return ops.run(x.half()) # <-"),
    ("py-precision-downgrade", "DT = torch.bfloat16 # <-"),
    ("py-precision-downgrade", "torch.backends.cuda.matmul.allow_tf32 = True # <-"),
    ("py-precision-downgrade", "torch.set_float32_matmul_precision('high') # <-"),
    ("py-precision-downgrade", "ctx = torch.autocast('cuda') # <-"),
    ("py-unresolvable-source", "from torch.utils.cpp_extension import load_inline\ndef src():\n    return ''\nm = load_inline('m', cpp_sources=src()) # <-"),
    ("py-syntax-error", "def broken(:  # <-"),
    ("py-monkeypatch", "type(torch.empty(1)).__eq__ = lambda a, b: True # <-"),
    ("py-dynamic-code", "import functools\npatch = functools.partial(setattr, torch) # <-"),
    ("py-unresolvable-source", "import functools\nfrom torch.utils.cpp_extension import load_inline\nL = functools.partial(load_inline, 'm') # <-"),
    ("py-build-flags", "from torch.utils.cpp_extension import load_inline\nm = load_inline('m', cpp_sources='int f();', extra_cflags=['-DFAST=at::matmul']) # <-"),
    ("py-build-flags", "from torch.utils.cpp_extension import load_inline\nm = load_inline('m', cpp_sources='int f();', extra_ldflags=['-Wl,--wrap=cudaEventElapsedTime']) # <-"),
]


@pytest.mark.parametrize("rule,code", PY_ATTACKS, ids=[f"{r}-{i}" for i, (r, _) in enumerate(PY_ATTACKS)])
def test_python_attack_is_flagged_at_its_line(tmp_path, rule, code):
    head = "import torch\nimport torch.nn as nn\nfrom cuda_agent.ext import ops\n"
    src = head + code + "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return ops.run(x)\n"
    line = _marked_line(src, "# <-")
    f = tmp_path / "model_new.py"
    f.write_text(src)
    found = check_sources(f, task_source=FP32_TASK, profile="strict")
    assert rule in _rules_at(found, f"model_new.py:{line}"), found


def test_numpy_scalar_types_for_kernel_arguments_are_not_foreign_compute(tmp_path):
    """CuPy solutions pass ``np.int64(n)`` to a RawKernel: numpy for scalar types alone is fine."""
    f = tmp_path / "model_new.py"
    f.write_text("import numpy as np\nimport cupy as cp\nN = np.int64(4)\n")
    assert check_sources(f, task_source=FP32_TASK, profile="strict") == []
    f.write_text("import numpy as np\nimport cupy as cp\nN = np.int64(4)\nY = np.exp(N)\n")
    assert {v.rule for v in check_sources(f, task_source=FP32_TASK, profile="strict")} == {"py-foreign-compute"}


def test_python_rule_ids_all_covered():
    py_rules = {r for r in RULES if r.startswith("py-")}
    assert py_rules <= {r for r, _ in PY_ATTACKS}


KB_ALLOWED = ["import numpy as np\nZ = np.exp(2.0)", "import random", "fast = torch.compile(lambda x: x)", "def f(x):\n    try:\n        return x\n    except Exception:\n        return x"]


@pytest.mark.parametrize("code", KB_ALLOWED)
def test_kernelbench_profile_allows_torch_side_conveniences(tmp_path, code):
    f = tmp_path / "model_new.py"
    f.write_text("import torch\n" + code + "\n")
    assert check_sources(f, task_source=FP32_TASK, profile="kernelbench") == []
    assert check_sources(f, task_source=FP32_TASK, profile="strict") != []


def test_kernelbench_profile_keeps_anti_cheat_rules(tmp_path):
    f = tmp_path / "model_new.py"
    f.write_text("import torch\nimport gc\ntorch.allclose = lambda *a, **k: True\nx = torch.randn(3).half()\n")
    rules = {v.rule for v in check_sources(f, task_source=FP32_TASK, profile="kernelbench")}
    assert rules == {"py-forbidden-import", "py-monkeypatch", "py-precision-downgrade"}


def test_python_negatives(tmp_path):
    src = textwrap.dedent(
        '''\
        # torch._C, torch.allclose = ..., import threading, open("model.py"): all in a comment
        import math
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from cuda_agent.ext import ops

        NOTE = "torch.allclose = lambda *a: True; sys._getframe(); x.half()"
        torch.set_float32_matmul_precision("highest")


        class ModelNew(nn.Module):
            def __init__(self, n: int):
                super().__init__()
                self.w = nn.Parameter(torch.empty(n, n))
                setattr(self, "scale", 1.0 / math.sqrt(n))
                self.side = torch.cuda.Stream() if torch.cuda.is_available() else None

            def forward(self, x):
                y = ops.run(x, self.w, getattr(self, "scale"))
                if self.side is not None:
                    torch.cuda.current_stream().wait_stream(self.side)
                return y
        '''
    )
    f = tmp_path / "model_new.py"
    f.write_text(src)
    assert check_sources(f, task_source=FP32_TASK, profile="strict") == []


def test_bf16_task_allows_python_casts(tmp_path):
    f = tmp_path / "model_new.py"
    f.write_text("import torch\ndef f(x):\n    return x.bfloat16().to(torch.bfloat16)\n")
    assert check_sources(f, task_source=BF16_TASK) == []
    assert {v.rule for v in check_sources(f, task_source=FP32_TASK)} == {"py-precision-downgrade"}


# ------------------------------------------------------------------------------------ load_inline


def test_load_inline_strings_are_checked_with_model_new_lines(tmp_path):
    src = textwrap.dedent(
        '''\
        import torch
        from torch.utils.cpp_extension import load_inline

        HEADER = "#include <torch/extension.h>\\n"
        cuda_src = HEADER + r"""
        // cudaStreamCreate in a comment is fine
        torch::Tensor f(torch::Tensor x) {
            auto y = torch::empty_like(x);
            cudaStream_t s; cudaStreamCreate(&s);
            return x.matmul(y);
        }
        """
        cpp_src = ("torch::Tensor f(torch::Tensor x);\\n"
                   "torch::Tensor g(torch::Tensor x) { return torch::relu(x); }\\n")
        mod = load_inline("m", cpp_sources=[cpp_src], cuda_sources=cuda_src, functions=["f"])
        '''
    )
    f = tmp_path / "model_new.py"
    f.write_text(src)
    found = check_sources(f, profile="kernelbench")
    got = {(v.rule, v.where) for v in found}
    assert ("cpp-extra-stream", "model_new.py:9") in got
    strict = {(v.rule, v.where) for v in check_sources(f, profile="strict")}
    assert ("cpp-torch-compute", "model_new.py:10") in strict  # .matmul
    assert ("cpp-torch-compute", "model_new.py:14") in strict  # torch::relu on the second implicit-concat line
    assert len(found) == 1, found  # kernelbench: only the stream (torch in C++ is allowed there)


def test_cpp_extension_load_files_are_checked(tmp_path):
    (tmp_path / "k.cu").write_text("#include <torch/extension.h>\nvoid f() { system(\"id\"); }\n")
    f = tmp_path / "model_new.py"
    f.write_text("from torch.utils.cpp_extension import load\nm = load(name='m', sources=['k.cu'])\n")
    found = check_sources(f, profile="kernelbench")
    # k.cu is found twice (as a file of the directory is not scanned for a single-file solution)
    assert {(v.rule, v.where) for v in found} == {("cpp-system-call", "k.cu:2")}


# ------------------------------------------------------------------------------------ fixtures


@pytest.mark.parametrize("fixture", ["legit_cuda", "legit_cpu", "legit_libs", "legit_load_inline.py", "legit_kernelbench_style.py"])
@pytest.mark.parametrize("profile", ["strict", "kernelbench"])
def test_legitimate_fixture_solutions_are_clean(fixture, profile):
    assert check_sources(FIXTURES / fixture, profile=profile) == []


EXPECTED_ATTACK_FIXTURES = {
    "attack_fallback": {("py-reference-model", "model_new.py:4"), ("py-try-fallback", "model_new.py:11"), ("py-reference-model", "model_new.py:8")},
    "attack_timer": {("py-monkeypatch", "model_new.py:9"), ("cpp-symbol-interposition", "kernels/timer.cu:6"), ("cpp-extra-stream", "kernels/timer.cu:15")},
    "attack_binding_compute": {("cpp-torch-compute", "kernels/mm_binding.cpp:6"), ("cpp-torch-compute", "kernels/mm_binding.cpp:8"), ("cpp-torch-header", "kernels/mm_binding.cpp:2"), ("cpp-cublas-non-gemm", "kernels/mm.cu:7")},
    "attack_inline.py": {("cpp-torch-compute", "attack_inline.py:11"), ("cpp-persisting-l2", "attack_inline.py:14"), ("py-frame-access", "attack_inline.py:24"), ("py-forbidden-import", "attack_inline.py:1")},
}


@pytest.mark.parametrize("fixture", sorted(EXPECTED_ATTACK_FIXTURES))
def test_attack_fixture_solutions_are_flagged(fixture):
    found = check_sources(FIXTURES / fixture, task_source=FP32_TASK, profile="strict")
    assert {(v.rule, v.where) for v in found} == EXPECTED_ATTACK_FIXTURES[fixture]


# ------------------------------------------------------------------------------------ bad input


def test_bad_input_gives_a_violation_not_a_traceback(tmp_path):
    assert [v.rule for v in check_sources(tmp_path / "nope")] == ["source-error"]
    (tmp_path / "x.txt").write_text("hi")
    assert [v.rule for v in check_sources(tmp_path / "x.txt")] == ["source-error"]
    (tmp_path / "k.cu").write_bytes(b"\xff\xfe /* unterminated \n at::add(")
    assert check_sources(tmp_path / "k.cu") == []  # unterminated comment swallows the rest
    with pytest.raises(ValueError, match="unknown rules profile"):
        check_sources(tmp_path, profile="lenient")


def test_rules_table_lists_every_rule():
    table = rules_table()
    assert all(f"`{r}`" in table for r in RULES)


def test_docs_list_every_rule():
    doc = (Path(__file__).parents[1] / "docs" / "static-rules.md").read_text()
    missing = [r for r in RULES if f"`{r}`" not in doc]
    assert not missing, f"docs/static-rules.md does not list {missing}"
