"""The C++/CUDA rules: ``kernels/**``, the strings given to ``load_inline`` and the files
given to ``cpp_extension.load``, read with :mod:`.cpp_lexer` (comments and string literals
neither hide nor fake a match).  Each check is registered with ``@cpp_check``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from ...rules_profile import RulesProfile
from ..exploits import Exploit
from .base import STRICT, Context, CppUnit, cpp_check, define_rule
from .cpp_lexer import CHAR, IDENT, NUMBER, PUNCT, STRING, Token

# C++ / CUDA
# torch, cuBLAS/cuDNN and run-time compiled code are allowed in the kernelbench profile (its
# protocol allows torch anywhere): those rules are the strict profile's
R_TORCH_HEADER = define_rule("cpp-torch-header", Exploit.LIBRARIES_IN_CPP, "torch/ATen/c10/pybind11 header in a kernel file (or beyond cuda_agent_binding.h in a binding)", STRICT)
R_INCLUDE_PATH = define_rule("cpp-include-path", Exploit.ESCAPE, "#include of an absolute or parent path, or a computed #include")
R_TORCH_COMPUTE = define_rule("cpp-torch-compute", Exploit.LIBRARIES_IN_CPP, "torch/ATen compute in C++ (at::/torch:: functions, tensor methods or operators)", STRICT)
R_OP_OVERRIDE = define_rule("cpp-op-override", Exploit.PATCHING_THE_CHECKER, "registering kernels for existing (aten) operators")
R_CUBLAS = define_rule("cpp-cublas-non-gemm", Exploit.LIBRARIES_IN_CPP, "cuBLAS outside the GEMM family and its handle/stream/workspace setup", STRICT)
R_CUDNN = define_rule("cpp-cudnn-non-conv", Exploit.LIBRARIES_IN_CPP, "cuDNN outside convolution and its descriptors/handles/workspace", STRICT)
R_LIBRARY = define_rule("cpp-library-call", Exploit.LIBRARIES_IN_CPP, "other compute libraries (cuFFT, cuSPARSE, cuSOLVER, cuTENSOR)", STRICT)
R_STREAM = define_rule("cpp-extra-stream", Exploit.HIDDEN_WORK, "extra streams, threads or host callbacks without a visible join")
R_L2 = define_rule("cpp-persisting-l2", Exploit.WARM_CACHE, "persisting-L2 access policy windows / limits")
R_DEVICE_CONFIG = define_rule("cpp-device-config", Exploit.CRASH_OR_HANG, "device-wide configuration (cudaDeviceSetLimit, cudaDeviceReset, ...)")
R_SYSTEM = define_rule("cpp-system-call", Exploit.ESCAPE, "processes, network, dynamic loading (system, popen, fork, exec*, socket, dlopen)")
R_FILE = define_rule("cpp-file-access", Exploit.PROTECTED_FILES, "files and environment from C++ (fopen, fstream, getenv, ...)")
R_SLEEP = define_rule("cpp-sleep", Exploit.SLOWER_BASELINE, "host sleeps (sleep, usleep, nanosleep, sleep_for)")
R_INTERPOSE = define_rule("cpp-symbol-interposition", Exploit.PATCHING_TIMERS, "defining a CUDA/cuBLAS/libc/infrastructure symbol (interposition of timers, sync, allocation)")
R_LOAD_HOOK = define_rule("cpp-load-time-hook", Exploit.PATCHING_THE_CHECKER, "code that runs when the library is loaded (constructor attributes, .init_array)")
R_RUNTIME_CODE = define_rule("cpp-runtime-code", Exploit.LIBRARIES_IN_CPP, "compiling or loading device code at run time (NVRTC, cuModuleLoad*, cuLibraryLoad*)", STRICT)
R_CPP_PRECISION = define_rule("cpp-precision-downgrade", Exploit.PRECISION_DOWNGRADE, "FP16/BF16/FP8/TF32 types, intrinsics, tensor-core MMA or math modes in an FP32 task")
R_PYTHON_API = define_rule("cpp-python-api", Exploit.PATCHING_THE_CHECKER, "the Python interpreter from C++ (py::module_::import, py::exec/eval, .attr(), Py* C API)")
R_TOKEN_PASTE = define_rule("cpp-token-paste", Exploit.LIBRARIES_IN_CPP, "token pasting (##) that builds a sensitive identifier")


# =========================================================================== C++ rules

TORCH_HEADER_RE = re.compile(r"^(torch|ATen|c10|caffe2|pybind11|THC|TH)/|^(Python|torch|pybind11)\.h$")
BINDING_HEADER = "cuda_agent_binding.h"
KEYWORDS = frozenset(
    """alignas alignof asm auto bool break case catch char char8_t char16_t char32_t class const consteval
    constexpr constinit const_cast continue co_await co_return co_yield decltype default delete do double
    dynamic_cast else enum explicit export extern false float for friend goto if inline int long mutable
    namespace new noexcept nullptr operator private protected public register reinterpret_cast requires
    return short signed sizeof static static_assert static_cast struct switch template this thread_local
    throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
    __global__ __device__ __host__ __forceinline__ __restrict__ __shared__ __constant__ __launch_bounds__
    __asm__ __volatile__ __attribute__ __inline__ defined""".split()
)

# Names allowed after at:: / torch:: (every component of the qualified name must be here).
TORCH_ALLOWED = frozenset(
    """Tensor TensorBase TensorOptions ScalarType Device DeviceType IntArrayRef ArrayRef Scalar Layout MemoryFormat
    optional nullopt OptionalIntArrayRef TensorAccessor PackedTensorAccessor PackedTensorAccessor32
    PackedTensorAccessor64 GenericPackedTensorAccessor RestrictPtrTraits DefaultPtrTraits
    empty empty_like empty_strided zeros zeros_like ones ones_like full full_like from_blob
    dtype device layout requires_grad memory_format elementSize toString typeMetaToScalarType
    kFloat kFloat32 kDouble kFloat64 kInt kInt32 kLong kInt64 kShort kInt16 kChar kInt8 kByte kUInt8 kBool
    kHalf kFloat16 kBFloat16 Half BFloat16 kCUDA kCPU kStrided Contiguous device_of
    cuda getCurrentCUDAStream getDefaultCUDAStream CUDAStream CUDAGuard OptionalCUDAGuard
    getCurrentDeviceProperties getDeviceProperties current_device device_count getCurrentCUDABlasHandle
    getCurrentCUDABlasLtHandle DeviceGuard OptionalDeviceGuard NoGradGuard InferenceMode Generator""".split()
)
C10_DENIED = frozenset({"DispatchKey", "Library", "Dispatcher", "OperatorHandle", "OperatorName", "impl", "getStreamFromPool", "DispatchKeySet", "KernelFunction", "BoxedKernel"})
# Tensor methods that compute (flagged on member calls in files that can see torch types).
TENSOR_COMPUTE = frozenset(
    """add add_ sub sub_ mul mul_ div div_ true_divide matmul mm bmm addmm addmm_ addmv baddbmm addbmm mv dot
    vdot outer ger einsum sum nansum mean prod max min amax amin aminmax argmax argmin std var norm
    logsumexp softmax log_softmax relu relu_ gelu silu sigmoid sigmoid_ tanh tanh_ exp exp_ exp2 expm1
    log log_ log2 log10 log1p sqrt sqrt_ rsqrt rsqrt_ pow pow_ abs abs_ neg neg_ clamp clamp_ clamp_min
    clamp_max clip where masked_fill masked_fill_ masked_scatter index_select index_add index_add_
    index_copy index_fill index_put index_put_ gather scatter scatter_ scatter_add scatter_add_
    scatter_reduce cumsum cumsum_ cumprod sort argsort topk kthvalue median mode fill_ zero_ normal_
    uniform_ random_ bernoulli bernoulli_ exponential_ repeat repeat_interleave masked_select nonzero
    unique lerp addcmul addcmul_ addcdiv addcdiv_ floor ceil round trunc frac sign reciprocal erf erfc
    erfinv sin cos tan asin acos atan atan2 sinh cosh eq ne lt gt le ge eq_ ne_ lt_ gt_ le_ ge_
    logical_and logical_or logical_not logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not
    fmod remainder square flip roll tril triu diag diagonal_scatter cross renorm dist cov corrcoef
    histc bincount count_nonzero hardtanh hardtanh_ leaky_relu elu selu mish softplus logit
    conv1d conv2d conv3d linear layer_norm batch_norm group_norm dropout
    contiguous reshape flatten clone to copy_ cpu cuda type_as float double half bfloat16 int long""".split()
)
# In the kernelbench profile layout/copy methods are tolerated (torch ops are allowed in its Python).
TENSOR_LAYOUT = frozenset({"contiguous", "reshape", "flatten", "clone", "to", "copy_", "cpu", "cuda", "type_as", "float", "double", "int", "long"})
VIEW_METHODS = frozenset({"view", "reshape", "as_strided", "narrow", "select", "slice", "unsqueeze", "squeeze", "permute", "transpose", "t", "expand", "expand_as", "contiguous", "detach", "alias", "flatten", "view_as", "clone", "to"})
ADL_SAFE = frozenset({"device_of", "move", "swap", "forward", "addressof", "ref", "cref", "make_pair", "make_tuple", "tie", "get"})

CUBLAS_OK = re.compile(
    r"^cublas(Create|Destroy|SetStream|GetStream|SetWorkspace|SetMathMode|GetMathMode|SetPointerMode|GetPointerMode"
    r"|SetAtomicsMode|GetAtomicsMode|GetStatusString|GetStatusName|GetVersion|GetProperty|GetCudartVersion)(_v2)?$"
    r"|^cublas\w*[Gg]emm\w*$"
    r"|^cublasLt(Create|Destroy|Matmul\w*|MatrixLayout\w*|GetVersion|GetCudartVersion|GetProperty|GetStatusString|GetStatusName|Logger\w*)$"
)
CUDNN_OK = re.compile(
    r"^cudnn(Create|Destroy|SetStream|GetStream|GetErrorString|GetVersion|GetCudartVersion|GetProperty|QueryRuntimeError)$"
    r"|^cudnn\w*Descriptor\w*$"
    r"|^cudnn(Get|Find)Convolution\w*$|^cudnnConvolution\w*$|^cudnnSetConvolution\w*$|^cudnnGetConvolution\w*$"
    r"|^cudnnIm2Col$"
)
OTHER_LIBRARY = re.compile(r"^(cufft|cusparse|cusolver|cutensor)[A-Z_]\w*$")
STREAM_NAMES = frozenset({"cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cuStreamCreate", "cuStreamCreateWithPriority", "getStreamFromPool", "cudaStreamPerThread", "CU_STREAM_PER_THREAD"})
STREAM_JOINS = frozenset({"cudaStreamWaitEvent", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cuStreamWaitEvent", "cuStreamSynchronize", "cuCtxSynchronize", "cudaEventSynchronize", "cuEventSynchronize"})
CALLBACK_NAMES = frozenset({"cudaLaunchHostFunc", "cuLaunchHostFunc", "cudaStreamAddCallback", "cuStreamAddCallback"})
L2_NAMES = frozenset({"accessPolicyWindow", "cudaLimitPersistingL2CacheSize", "cudaStreamAttributeAccessPolicyWindow", "cudaKernelNodeAttributeAccessPolicyWindow", "cudaLaunchAttributeAccessPolicyWindow", "cudaAccessPropertyPersisting", "CU_LIMIT_PERSISTING_L2_CACHE_SIZE", "CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW", "CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW", "CU_ACCESS_PROPERTY_PERSISTING", "cudaAccessPolicyWindow", "CUaccessPolicyWindow"})
DEVICE_CONFIG = frozenset({"cudaDeviceSetLimit", "cuCtxSetLimit", "cudaDeviceReset", "cudaSetDeviceFlags", "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxSetFlags", "cudaSetDevice", "cudaThreadExit", "cudaThreadSetLimit", "cuCtxDestroy"})
SYSTEM_CALLS = frozenset({"system", "popen", "fork", "vfork", "clone", "execl", "execle", "execlp", "execv", "execve", "execvp", "execvpe", "fexecve", "posix_spawn", "posix_spawnp", "socket", "connect", "kill", "daemon", "ptrace", "dlopen", "dlsym", "dlmopen", "dlvsym", "syscall", "prctl", "setrlimit"})
FILE_CALLS = frozenset({"fopen", "freopen", "fdopen", "open", "openat", "creat", "getenv", "secure_getenv", "setenv", "putenv", "unsetenv", "clearenv", "chdir", "unlink", "rmdir", "mkdir", "opendir", "readlink", "truncate", "ftruncate", "symlink", "link"})
FILE_TYPES = frozenset({"ifstream", "ofstream", "fstream", "filebuf", "basic_ifstream", "basic_ofstream", "basic_fstream", "filesystem", "environ"})
SLEEP_CALLS = frozenset({"sleep", "usleep", "nanosleep", "clock_nanosleep", "sleep_for", "sleep_until", "Sleep"})
RUNTIME_CODE = re.compile(r"^(nvrtc[A-Z]\w*|cuModuleLoad\w*|cuLibraryLoad\w*|cudaLibraryLoad\w*|cuLinkCreate\w*|cuLinkAddData\w*|nvJitLink\w*)$")
INTERPOSE = re.compile(
    r"^(cuda[A-Z]\w*|cu(Launch|Stream|Event|Ctx|Mem|Module|Device|Init|Graph|Func|GetProcAddress|Driver|Library|Kernel)\w*"
    r"|cublas\w*|cudnn\w*|nccl\w*|nvrtc\w*|cupti\w*|pthread_\w+|cuda_agent_\w+"
    r"|clock_gettime|gettimeofday|clock|time|timespec_get|dlsym|dlopen|malloc|free|calloc|realloc|__cxa_atexit|atexit|exit|_exit|abort)$"
)
HALF_TYPES = frozenset({"half", "half2"})
LOWP_IDENT = re.compile(
    r"^(__half2?|__nv_bfloat162?|nv_bfloat162?|__nv_fp8\w*|__nv_fp6\w*|__nv_fp4\w*|__float_to_tf32|__tf32\w*"
    r"|__h(add|sub|mul|div|fma|neg|abs|max|min|sqrt|exp|log|eq|ne|lt|gt|le|ge|sin|cos|rcp|rsqrt|floor|ceil)\w*|__h2div"
    r"|h2?(sqrt|exp|exp2|log|log2|rcp|rsqrt|sin|cos|floor|ceil|trunc)|kHalf|kFloat16|kBFloat16|Half|BFloat16|tf32)$"
    r"|^__\w*(half|bfloat16|bfloat162)\w*$"
)
LOWP_CONSTANTS = re.compile(
    r"^(CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_TENSOR_OP_MATH|CUBLAS_COMPUTE_32F_FAST_\w+|CUBLAS_COMPUTE_16F\w*"
    r"|CUDA_R_16F|CUDA_R_16BF|CUDA_C_16F|CUDA_C_16BF|CUDA_R_8F_\w+|CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION|CUDNN_DATA_HALF|CUDNN_DATA_BFLOAT16"
    r"|CUDNN_DATA_FP8\w*|CUBLASLT_\w*FAST\w*)$"
)
PTX_LOWP = re.compile(r"\b(w?g?mma|wgmma)\b|\.(f16|bf16|tf32|e4m3|e5m2|f16x2|bf16x2|e4m3x2|e5m2x2)\b")


def _prev(toks: list[Token], i: int) -> Token | None:
    return toks[i - 1] if i > 0 else None


def _next(toks: list[Token], i: int, k: int = 1) -> Token | None:
    return toks[i + k] if i + k < len(toks) else None


def _text(t: Token | None) -> str:
    return t.text if t is not None else ""


def _is_member(toks: list[Token], i: int) -> bool:
    return _text(_prev(toks, i)) in (".", "->", ".*", "->*")


def _qualifier(toks: list[Token], i: int) -> str | None:
    """For ident ``i`` preceded by ``X::``, the identifier X (``""`` for a leading ``::``)."""
    if _text(_prev(toks, i)) != "::":
        return None
    q = toks[i - 2] if i >= 2 else None
    return q.text if q is not None and q.kind == IDENT else ""


def _is_call(toks: list[Token], i: int) -> bool:
    return _text(_next(toks, i)) == "("


def _free_call_or_std(toks: list[Token], i: int) -> bool:
    """ident ``i`` is called as a free function: unqualified, ``::name`` or ``std::name``."""
    if _is_member(toks, i) or not _is_call(toks, i):
        return False
    q = _qualifier(toks, i)
    return q in (None, "", "std", "this_thread")


def _match_paren(toks: list[Token], i: int) -> int:
    """Index of the token closing the bracket at ``i`` (or the last index)."""
    open_, close = toks[i].text, {"(": ")", "[": "]", "{": "}", "<": ">"}[toks[i].text]
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text == open_:
            depth += 1
        elif toks[j].text == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def _qualified_names(toks: list[Token]) -> Iterable[tuple[int, list[str]]]:
    """Maximal ``a::b::c`` chains: (index of the first identifier, components)."""
    i, n = 0, len(toks)
    while i < n:
        t = toks[i]
        if t.kind == IDENT and _text(_next(toks, i)) == "::" and _qualifier(toks, i) is None:
            parts, j = [t.text], i
            while j + 2 < n and toks[j + 1].text == "::" and toks[j + 2].kind == IDENT:
                parts.append(toks[j + 2].text)
                j += 2
            yield i, parts
            i = j + 1
            continue
        i += 1


def mark_torch_aware(units: list[CppUnit]) -> None:
    by_name = {Path(u.name).name: u for u in units}
    for u in units:
        u.torch_aware = u.kind in ("binding", "inline") or any(
            d.header and (TORCH_HEADER_RE.search(d.header) or d.header.endswith(BINDING_HEADER)) for d in u.lexed.directives
        )
    changed = True
    while changed:  # a unit that includes a torch-aware local header is torch-aware
        changed = False
        for u in units:
            if u.torch_aware:
                continue
            for d in u.lexed.directives:
                if d.header and not d.system and (h := by_name.get(Path(d.header).name)) is not None and h.torch_aware:
                    u.torch_aware = changed = True
                    break


@cpp_check
def _check_includes(unit: CppUnit, units: list[CppUnit], ctx: Context) -> None:
    for d in unit.lexed.directives:
        if d.name in ("include", "include_next", "import", "embed"):
            if d.header is None:
                ctx.flag(R_INCLUDE_PATH, f"computed #{d.name} {d.body!r}: the target cannot be checked", unit.where(d.line))
                continue
            h = d.header
            if h.startswith(("/", "~")) or ".." in Path(h).parts or re.match(r"^[A-Za-z]:[\\/]", h) or d.name == "embed":
                ctx.flag(R_INCLUDE_PATH, f"#{d.name} of {h!r}: only headers of the solution and of the toolchain may be included", unit.where(d.line))
            torchy = bool(TORCH_HEADER_RE.search(h))
            if unit.kind in ("kernel", "header") and (torchy or h.endswith(BINDING_HEADER)):
                ctx.flag(R_TORCH_HEADER, f"#include <{h}> in a kernel file: kernels must not use torch (put torch code in a *_binding.cpp)", unit.where(d.line))
            elif unit.kind == "binding" and torchy:
                ctx.flag(R_TORCH_HEADER, f"#include <{h}> in a binding: include only {BINDING_HEADER} from torch", unit.where(d.line))


def _scopes(toks: list[Token]) -> list[int]:
    """Per token, the index of the outermost ``{`` of the function it belongs to (-1 at file scope).

    A function's parameter list belongs to its body's scope; ``namespace X {`` and
    ``extern "C" {`` blocks are transparent.
    """
    scope = [-1] * len(toks)
    depth, current, transparent = 0, -1, []
    pending: list[int] = []  # file-scope tokens since the last ';' or '}' (a function header)
    for i, t in enumerate(toks):
        if t.text == "{" and t.kind == PUNCT:
            prev = _prev(toks, i)
            if depth == 0 and prev is not None and (prev.text == "namespace" or _text(_prev(toks, i - 1)) == "namespace" or prev.kind == STRING):
                transparent.append(True)
                pending = []
                continue
            transparent.append(False)
            if depth == 0:
                current = i
                for k in pending:
                    scope[k] = i
                pending = []
            depth += 1
        elif t.text == "}" and t.kind == PUNCT and transparent:
            if transparent.pop():
                continue
            depth -= 1
            if depth == 0:
                scope[i] = current
                current = -1
                continue
        if depth > 0:
            scope[i] = current
        elif t.text == ";":
            pending = []
        else:
            pending.append(i)
    return scope


def _tensor_names(toks: list[Token]) -> tuple[set[int], set[int]]:
    """Token indices that name tensor variables (declared ``at::Tensor x`` or ``auto y = at::empty(...)``
    in the same function or at file scope), and the indices of the declarations themselves."""
    names: set[str] = set()  # "scope:name" (scope -1 = file scope)
    decl: set[int] = set()
    scope = _scopes(toks)

    def key(j: int) -> str:
        return f"{scope[j]}:{toks[j].text}"

    def known(j: int) -> bool:
        return key(j) in names or f"-1:{toks[j].text}" in names

    for _ in range(2):
        for i, t in enumerate(toks):
            if t.kind != IDENT:
                continue
            if t.text == "Tensor" and _qualifier(toks, i) in (None, "at", "torch"):
                j = i + 1
                while j < len(toks) and toks[j].text in ("const", "&", "&&", "__restrict__"):
                    j += 1
                if j + 1 < len(toks) and toks[j].kind == IDENT and toks[j + 1].text in (",", ")", "=", ";", "{", "(", "["):
                    names.add(key(j))
                    decl.add(j)
            elif t.text == "auto":
                j = i + 1
                while j < len(toks) and toks[j].text in ("const", "&", "&&"):
                    j += 1
                if j + 2 < len(toks) and toks[j].kind == IDENT and toks[j + 1].text == "=":
                    rhs, after = toks[j + 2], _next(toks, j + 2)
                    if rhs.text in ("at", "torch") and after is not None and after.text == "::":
                        k = j + 2
                        while k + 2 < len(toks) and toks[k + 1].text == "::":
                            k += 2
                        if toks[k].text in ("empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
                                            "full", "full_like", "from_blob"):
                            names.add(key(j))
                            decl.add(j)
                    elif known(j + 2) and after is not None:
                        if after.text == ";" or (after.text == "." and _text(_next(toks, j + 3)) in VIEW_METHODS):
                            names.add(key(j))
                            decl.add(j)
    occurrences = {j for j in range(len(toks)) if toks[j].kind == IDENT and known(j) and not _is_member(toks, j) and _qualifier(toks, j) is None}
    return occurrences, decl


def _declared_functions(toks: list[Token]) -> set[str]:
    out: set[str] = set()
    for i, t in enumerate(toks):
        if t.kind == IDENT and _is_call(toks, i):
            p = _prev(toks, i)
            if p is not None and ((p.kind == IDENT and p.text not in ("return", "else", "new", "throw", "case", "co_return", "delete", "sizeof")) or p.text in ("*", "&", "&&", ">")):
                out.add(t.text)
    return out


BIN_OPS = frozenset("+ - * / % & | ^ << >> == != < > <= >= += -= *= /= %= &= |= ^= <<= >>=".split())


def _is_operand_end(t: Token | None) -> bool:
    return t is not None and ((t.kind == IDENT and t.text not in KEYWORDS) or t.kind in (NUMBER, STRING, CHAR) or t.text in (")", "]"))


@cpp_check
def _check_torch_compute(unit: CppUnit, units: list[CppUnit], ctx: Context) -> None:
    toks = unit.tokens
    for i, parts in _qualified_names(toks):
        root, rest = parts[0], parts[1:]
        line = toks[i].line
        if root in ("at", "torch", "aten"):
            bad = [p for p in rest if p not in TORCH_ALLOWED]
            if bad or root == "aten":
                name = "::".join(parts)
                ctx.flag(R_TORCH_COMPUTE, f"{name}: only allocation, views and metadata from torch are allowed in C++ (write the compute as a kernel)", unit.where(line))
        elif root == "c10" and any(p in C10_DENIED for p in rest):
            ctx.flag(R_TORCH_COMPUTE, f"{'::'.join(parts)}: calling operators through the dispatcher is torch compute", unit.where(line))
    tensors, declaring = _tensor_names(toks) if unit.torch_aware else (set(), set())
    declared = _declared_functions(toks) if unit.torch_aware else set()
    for i, t in enumerate(toks):
        if t.kind != IDENT:
            continue
        nxt = _next(toks, i)
        if t.text in ("TORCH_LIBRARY_IMPL",) or (
            t.text in ("TORCH_LIBRARY", "TORCH_LIBRARY_FRAGMENT") and _text(_next(toks, i, 2)) in ("aten", "prims", "_")
        ):
            ctx.flag(R_OP_OVERRIDE, f"{t.text}(...{_text(_next(toks, i, 2))}...): registering kernels for existing operators is not allowed; define new ops with CUDA_AGENT_OPS", unit.where(t.line))
        if not unit.torch_aware:
            continue
        if t.text in ("at", "torch") and _text(nxt) != "::" and not _is_member(toks, i) and _qualifier(toks, i) is None and _text(_prev(toks, i)) != "#":
            ctx.flag(R_TORCH_COMPUTE, f"'{t.text}' used outside a qualified name (using-directive, namespace alias or macro): the torch names it brings in cannot be checked", unit.where(t.line))
        if t.text == "operator" and _is_member(toks, i):
            ctx.flag(R_TORCH_COMPUTE, ".operator...(): explicit operator calls on tensors are torch compute", unit.where(t.line))
        if i in tensors and _text(nxt) == "[" and i not in declaring:
            close = _match_paren(toks, i + 1)
            after = _text(_next(toks, close))
            if after == "=" or after in BIN_OPS:
                ctx.flag(R_TORCH_COMPUTE, f"{t.text}[...] {after} ...: indexing arithmetic/assignment on a tensor runs torch operators", unit.where(t.line))
        if _is_member(toks, i) and _text(nxt) in ("(", "<") and t.text in TENSOR_COMPUTE:
            if ctx.profile == RulesProfile.KERNELBENCH and t.text in TENSOR_LAYOUT:
                continue
            ctx.flag(R_TORCH_COMPUTE, f".{t.text}(): tensor compute method in C++ (only data_ptr, sizes, strides, options, views and other metadata are allowed)", unit.where(t.line))
        if (
            i in tensors and i not in declaring and not _is_member(toks, i) and _qualifier(toks, i) is None
            and _text(nxt) not in (".", "->", "(", "[", "::")
        ):
            prev, before = _prev(toks, i), toks[i - 2] if i >= 2 else None
            binary_after = _text(nxt) in BIN_OPS
            binary_before = prev is not None and prev.text in BIN_OPS and _is_operand_end(before)
            unary_before = prev is not None and prev.text in ("-", "~", "!") and not _is_operand_end(before)
            if binary_after or binary_before or unary_before:
                ctx.flag(R_TORCH_COMPUTE, f"arithmetic on tensor '{t.text}' in C++ calls torch operators", unit.where(t.line))
        if (
            i not in tensors and _is_call(toks, i) and not _is_member(toks, i) and _qualifier(toks, i) is None
            and t.text not in KEYWORDS and t.text not in declared and t.text not in ADL_SAFE and not t.text.isupper()
            and tensors
        ):
            close = _match_paren(toks, i + 1)
            args, depth, cur = [], 0, []
            for k in range(i + 2, close):
                tok = toks[k]
                if tok.text in "([{":
                    depth += 1
                elif tok.text in ")]}":
                    depth -= 1
                if tok.text == "," and depth == 0:
                    args.append(cur)
                    cur = []
                else:
                    cur.append(k)
            args.append(cur)
            if any(len(a) == 1 and a[0] in tensors for a in args):
                ctx.flag(R_TORCH_COMPUTE, f"{t.text}(tensor, ...): an unqualified call on tensors resolves to torch operators by argument-dependent lookup", unit.where(t.line))


PY_CPP_API = re.compile(r"^(Py[A-Z][A-Za-z]*_\w+|PyRun\w*|Py_(Initialize|Finalize|CompileString)\w*)$")


@cpp_check
def _check_python_api(unit: CppUnit, units: list[CppUnit], ctx: Context) -> None:
    toks = unit.tokens
    for i, parts in _qualified_names(toks):
        if parts[0] in ("py", "pybind11") and any(p in ("import", "exec", "eval", "eval_file", "globals", "reinterpret_steal", "reinterpret_borrow") for p in parts[1:]):
            ctx.flag(R_PYTHON_API, f"{'::'.join(parts)}: reaching into the Python interpreter from C++ can patch the checker", unit.where(toks[i].line))
    for i, t in enumerate(toks):
        if t.kind != IDENT:
            continue
        if PY_CPP_API.match(t.text):
            ctx.flag(R_PYTHON_API, f"{t.text}: the Python C API from a solution can patch the checker", unit.where(t.line))
        elif t.text == "attr" and _is_member(toks, i) and _is_call(toks, i) and unit.torch_aware:
            ctx.flag(R_PYTHON_API, ".attr(...): Python attribute access from C++ can patch the checker", unit.where(t.line))
        elif t.text in ("asm", "__asm__", "__asm") and _text(_next(toks, i)) in ("(", "volatile", "__volatile__"):
            j = i + 1
            while j < len(toks) and toks[j].text != "(":
                j += 1
            if j < len(toks) and any(
                s.kind == STRING and re.search(r"\b(syscall|sysenter|int\s+\$?0x80)\b", s.value) for s in toks[j : _match_paren(toks, j) + 1]
            ):
                ctx.flag(R_SYSTEM, "inline assembly system call", unit.where(t.line))


@cpp_check
def _check_libraries(unit: CppUnit, units: list[CppUnit], ctx: Context) -> None:
    for i, t in enumerate(unit.tokens):
        if t.kind != IDENT or t.text.endswith("_t") or _is_member(unit.tokens, i):
            continue
        name = t.text
        if name.startswith("cublas") and not CUBLAS_OK.match(name):
            ctx.flag(R_CUBLAS, f"{name}: cuBLAS is allowed for GEMM only (cublas*gemm*, cublasLtMatmul and handle/stream/workspace/math-mode setup)", unit.where(t.line))
        elif name.startswith("cudnn") and not CUDNN_OK.match(name):
            ctx.flag(R_CUDNN, f"{name}: cuDNN is allowed for convolutions only (cudnnConvolution*, descriptors, handles, workspace)", unit.where(t.line))
        elif OTHER_LIBRARY.match(name):
            ctx.flag(R_LIBRARY, f"{name}: library compute is not allowed (write the kernel)", unit.where(t.line))
        elif RUNTIME_CODE.match(name):
            ctx.flag(R_RUNTIME_CODE, f"{name}: device code compiled or loaded at run time escapes every check", unit.where(t.line))


def _all_idents(units: list[CppUnit]) -> set[str]:
    out: set[str] = set()
    for u in units:
        out.update(t.text for t in u.tokens if t.kind == IDENT)
    return out


@cpp_check
def _check_streams_threads(unit: CppUnit, units: list[CppUnit], ctx: Context) -> None:
    toks = unit.tokens
    everywhere = _all_idents(units)
    stream_joined = bool(everywhere & STREAM_JOINS)
    thread_joined = "join" in everywhere or "pthread_join" in everywhere
    future_waited = bool(everywhere & {"get", "wait"})
    for i, t in enumerate(toks):
        if t.kind != IDENT:
            continue
        q = _qualifier(toks, i)
        if t.text in STREAM_NAMES and not stream_joined:
            ctx.flag(R_STREAM, f"{t.text}: work on another stream must be joined to the current stream (cudaStreamWaitEvent / cudaStreamSynchronize)", unit.where(t.line))
        elif t.text in CALLBACK_NAMES:
            ctx.flag(R_STREAM, f"{t.text}: host callbacks run work on a driver thread outside the timed stream", unit.where(t.line))
        elif t.text in ("thread", "jthread") and q == "std" and not thread_joined:
            ctx.flag(R_STREAM, f"std::{t.text} without join(): work on another thread escapes timing", unit.where(t.line))
        elif t.text == "pthread_create" and not thread_joined:
            ctx.flag(R_STREAM, "pthread_create without pthread_join: work on another thread escapes timing", unit.where(t.line))
        elif t.text == "async" and q == "std" and not future_waited:
            ctx.flag(R_STREAM, "std::async without get()/wait(): work on another thread escapes timing", unit.where(t.line))
        elif t.text == "detach" and _is_member(toks, i) and _is_call(toks, i):
            ctx.flag(R_STREAM, ".detach(): a detached thread keeps running outside the timed call", unit.where(t.line))


@cpp_check
def _check_environment(unit: CppUnit, units: list[CppUnit], ctx: Context) -> None:
    toks = unit.tokens
    for i, t in enumerate(toks):
        if t.kind != IDENT:
            continue
        name = t.text
        if name in L2_NAMES:
            ctx.flag(R_L2, f"{name}: persisting-L2 windows keep data cached across the timer's cache flush", unit.where(t.line))
        elif name in DEVICE_CONFIG and not _is_member(toks, i):
            ctx.flag(R_DEVICE_CONFIG, f"{name}: device-wide configuration changes affect other jobs and the baseline", unit.where(t.line))
        elif name in SYSTEM_CALLS and _free_call_or_std(toks, i):
            ctx.flag(R_SYSTEM, f"{name}(): processes, sockets and dynamic loading are not allowed in a solution", unit.where(t.line))
        elif (name in FILE_CALLS and _free_call_or_std(toks, i)) or (name in FILE_TYPES and not _is_member(toks, i) and _qualifier(toks, i) in (None, "", "std")):
            ctx.flag(R_FILE, f"{name}: a solution must not read or write files or the environment", unit.where(t.line))
        elif name in SLEEP_CALLS and (_free_call_or_std(toks, i) or _qualifier(toks, i) == "this_thread"):
            ctx.flag(R_SLEEP, f"{name}: sleeping in a solution distorts timing", unit.where(t.line))
        elif name in ("__attribute__",) and _text(_next(toks, i)) == "(":
            close = _match_paren(toks, i + 1)
            inner = toks[i + 1 : close]
            if any(x.text in ("constructor", "destructor", "__constructor__", "__destructor__") for x in inner) or any(
                x.kind == STRING and re.search(r"init_array|fini_array|\.ctors|\.dtors|preinit", x.value) for x in inner
            ):
                ctx.flag(R_LOAD_HOOK, "__attribute__((constructor/section)): code that runs at load time is not allowed", unit.where(t.line))
        elif name in ("constructor", "destructor") and _qualifier(toks, i) == "gnu":
            ctx.flag(R_LOAD_HOOK, f"[[gnu::{name}]]: code that runs at load time is not allowed", unit.where(t.line))


TYPE_KEYWORDS = frozenset("void int long double float char bool unsigned auto short signed const".split())


def _function_definition(toks: list[Token], i: int) -> bool:
    """ident ``i`` names a function being defined: ``type name(...) [qualifiers] {``."""
    p = _prev(toks, i)
    if p is None or _text(_next(toks, i)) != "(":
        return False
    if not ((p.kind == IDENT and (p.text not in KEYWORDS or p.text in TYPE_KEYWORDS)) or p.text in ("*", "&", ">")):
        return False
    j = _match_paren(toks, i + 1) + 1
    while j < len(toks) and (toks[j].kind == IDENT or toks[j].text in ("&", "&&", "->", "::", "*", "<", ">")):
        if toks[j].text in ("__attribute__", "throw", "noexcept") and _text(_next(toks, j)) == "(":
            j = _match_paren(toks, j + 1) + 1
            continue
        j += 1
    return j < len(toks) and toks[j].text == "{"


@cpp_check
def _check_interposition(unit: CppUnit, units: list[CppUnit], ctx: Context) -> None:
    toks = unit.tokens
    for i, t in enumerate(toks):
        if t.kind == IDENT and INTERPOSE.match(t.text) and _qualifier(toks, i) is None and _function_definition(toks, i):
            ctx.flag(R_INTERPOSE, f"defines {t.text}(): a solution must not define symbols of CUDA, its libraries, libc timing/allocation or the infrastructure", unit.where(t.line))


@cpp_check
def _check_precision(unit: CppUnit, units: list[CppUnit], ctx: Context) -> None:
    if not ctx.fp32_task:
        return
    toks = unit.tokens
    for i, t in enumerate(toks):
        if t.kind == IDENT:
            name = t.text
            if LOWP_IDENT.match(name) or LOWP_CONSTANTS.match(name):
                ctx.flag(R_CPP_PRECISION, f"{name}: reduced precision in an FP32 task", unit.where(t.line))
            elif name == "wmma" and _text(_next(toks, i)) == "::":
                ctx.flag(R_CPP_PRECISION, "wmma: tensor-core MMA (FP16/BF16/TF32 inputs) in an FP32 task", unit.where(t.line))
            elif name in HALF_TYPES and _half_as_type(toks, i):
                ctx.flag(R_CPP_PRECISION, f"{name}: reduced precision type in an FP32 task", unit.where(t.line))
            elif name in ("asm", "__asm__", "__asm") and not _is_member(toks, i):
                j = i + 1
                while j < len(toks) and toks[j].text in ("volatile", "__volatile__", "goto", "inline"):
                    j += 1
                if j < len(toks) and toks[j].text == "(":
                    for s in toks[j : _match_paren(toks, j) + 1]:
                        if s.kind == STRING and (m := PTX_LOWP.search(s.value)):
                            ctx.flag(R_CPP_PRECISION, f"inline PTX {m.group(0)!r}: tensor-core / reduced-precision instruction in an FP32 task", unit.where(s.line))
                            break


def _half_as_type(toks: list[Token], i: int) -> bool:
    """``half``/``half2`` used as a type (declaration, cast, template argument), not as a variable named half."""
    if _is_member(toks, i):
        return False
    if _qualifier(toks, i) is not None:
        return True
    p, n = _text(_prev(toks, i)), _next(toks, i)
    if n is None:
        return False
    if n.kind == IDENT:
        return True  # half x / half2 acc
    if p == "(" and n.text == ")":
        after = _next(toks, i, 2)
        return _text(toks[i - 2] if i >= 2 else None) in ("sizeof", "alignof") or (
            after is not None and (after.kind in (IDENT, NUMBER) or after.text == "(")
        )
    if (p == "<" and n.text in (">", ",")) or (p == "," and n.text == ">"):
        return True
    if n.text in ("*", "&") and p in ("", ";", "{", "}", "const", "static", "__shared__", "extern", "__restrict__"):
        nn = _next(toks, i, 2)
        return nn is not None and nn.kind == IDENT
    return False


def _sensitive_name(name: str, fp32: bool) -> str | None:
    """The rule a bare identifier would break by name alone (used on names built by ``##``)."""
    if name in ("at", "torch", "aten"):
        return R_TORCH_COMPUTE
    if name.startswith("cublas") and not name.endswith("_t") and not CUBLAS_OK.match(name):
        return R_CUBLAS
    if name.startswith("cudnn") and not name.endswith("_t") and not CUDNN_OK.match(name):
        return R_CUDNN
    if OTHER_LIBRARY.match(name):
        return R_LIBRARY
    if RUNTIME_CODE.match(name):
        return R_RUNTIME_CODE
    if name in STREAM_NAMES or name in CALLBACK_NAMES:
        return R_STREAM
    if name in L2_NAMES:
        return R_L2
    if name in DEVICE_CONFIG:
        return R_DEVICE_CONFIG
    if name in SYSTEM_CALLS:
        return R_SYSTEM
    if name in FILE_CALLS or name in FILE_TYPES:
        return R_FILE
    if name in SLEEP_CALLS:
        return R_SLEEP
    if fp32 and (LOWP_IDENT.match(name) or LOWP_CONSTANTS.match(name) or name in HALF_TYPES or name == "wmma"):
        return R_CPP_PRECISION
    return None


def _paste_macros(toks: list[Token]) -> dict[str, tuple[list[str], list[Token]]]:
    """Function-like and object-like macros whose body uses ``##``: name -> (params, body)."""
    out: dict[str, tuple[list[str], list[Token]]] = {}
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.in_directive and t.kind == IDENT and (i == 0 or not toks[i - 1].in_directive or toks[i - 1].line != t.line):
            # first body token of a #define line is the macro name (the lexer drops the word "define")
            j = i + 1
            params: list[str] = []
            if j < len(toks) and toks[j].text == "(" and toks[j].in_directive:
                close = _match_paren(toks, j)
                params = [x.text for x in toks[j + 1 : close] if x.kind == IDENT]
                j = close + 1
            body = []
            while j < len(toks) and toks[j].in_directive and toks[j].line == t.line:
                body.append(toks[j])
                j += 1
            if any(b.text == "##" for b in body):
                out[t.text] = (params, body)
            i = j
            continue
        i += 1
    return out


@cpp_check
def _check_token_paste(unit: CppUnit, units: list[CppUnit], ctx: Context) -> None:
    """Expand ``##`` in macros with the arguments of each use and check the names it builds."""
    toks = unit.tokens
    macros = {}
    for u in units:  # macros may come from a header of the solution
        macros.update(_paste_macros(u.tokens))
    if not macros:
        return
    for i, t in enumerate(toks):
        if t.kind != IDENT or t.text not in macros or t.in_directive:
            continue
        params, body = macros[t.text]
        args: list[str] = []
        if params:
            if _text(_next(toks, i)) != "(":
                continue
            close = _match_paren(toks, i + 1)
            cur: list[str] = []
            depth = 0
            for x in toks[i + 2 : close]:
                depth += x.text in "([{"
                depth -= x.text in ")]}"
                if x.text == "," and depth == 0:
                    args.append("".join(cur))
                    cur = []
                else:
                    cur.append(x.text)
            args.append("".join(cur))
        subst = dict(zip(params, args))
        words = [subst.get(b.text, b.text) if b.kind == IDENT else b.text for b in body]
        built: list[str] = []
        k = 0
        while k < len(words):
            w = words[k]
            while k + 2 < len(words) and words[k + 1] == "##":
                w += words[k + 2]
                k += 2
            built.append(w)
            k += 1
        for name in built:
            for piece in re.findall(r"[A-Za-z_$][\w$]*", name):
                if (rule := _sensitive_name(piece, ctx.fp32_task)) is not None:
                    ctx.flag(R_TOKEN_PASTE, f"{t.text}(...) pastes tokens into {piece!r} ({rule}): hidden names are not allowed", unit.where(t.line))
