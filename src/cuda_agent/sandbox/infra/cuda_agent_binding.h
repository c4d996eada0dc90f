// cuda_agent_binding.h -- the fixed binding infrastructure of a cuda-agent workspace.
//
// Include it (and nothing heavier from torch) in kernels/*_binding.cpp.  It gives:
//   * at::Tensor and the allocation functions at::empty / at::empty_like / at::zeros
//   * CA_CHECK(cond, msg...)           -> raise a Python RuntimeError with a message
//   * CA_CHECK_INPUT(t)                -> t is on the build's device and contiguous
//   * cuda_agent_stream()              -> the current CUDA stream (nullptr on CPU builds);
//                                         pass it to your launcher and launch on it
//   * CA_CHECK_LAUNCH(expr)            -> expr returns a cudaError_t-like int; 0 = success
//   * CUDA_AGENT_OPS(m) { m.def("name", &fn); }  -> register ops, called from Python as
//                                         ops.name(...) after `from cuda_agent.ext import ops`
// Kernels live in kernels/*.cu (or kernels/*.cpp for CPU builds) with extern "C" launchers;
// they must not include torch headers.  Torch compute (at::add, at::matmul, ...) is forbidden
// in bindings under the strict rules: only allocation, views and metadata.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

extern "C" void* cuda_agent_stream();
extern "C" const char* cuda_agent_error_string(int code);

#define CA_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)

#ifdef CUDA_AGENT_CUDA
#define CA_CHECK_INPUT(t)                                                        \
  TORCH_CHECK((t).is_cuda(), #t " must be a CUDA tensor");                       \
  TORCH_CHECK((t).is_contiguous(), #t " must be contiguous")
#else
#define CA_CHECK_INPUT(t)                                                        \
  TORCH_CHECK((t).device().is_cpu(), #t " must be a CPU tensor");                \
  TORCH_CHECK((t).is_contiguous(), #t " must be contiguous")
#endif

#define CA_CHECK_LAUNCH(expr)                                                    \
  do {                                                                           \
    int _ca_err = (int)(expr);                                                   \
    TORCH_CHECK(_ca_err == 0, "kernel launch failed: ", cuda_agent_error_string(_ca_err), \
                " (", #expr, ")");                                               \
  } while (0)

#define CUDA_AGENT_OPS(m) TORCH_LIBRARY_FRAGMENT(kernels, m)
