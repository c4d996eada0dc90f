// Fixed runtime of cuda-agent extensions: current stream and error strings.
// CUDA_AGENT_CUDA_RUNTIME is set when torch itself has CUDA (a CPU-only torch can still
// compile and link CUDA sources, e.g. in CI, but cannot run them).
// Built once per machine (content-addressed object cache) and linked into every extension.
#ifdef CUDA_AGENT_CUDA_RUNTIME
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
extern "C" void* cuda_agent_stream() {
  return (void*)c10::cuda::getCurrentCUDAStream().stream();
}
extern "C" const char* cuda_agent_error_string(int code) {
  return cudaGetErrorString((cudaError_t)code);
}
#else
extern "C" void* cuda_agent_stream() { return nullptr; }
extern "C" const char* cuda_agent_error_string(int code) {
  return code == 0 ? "no error" : "CPU kernel returned an error code";
}
#endif
