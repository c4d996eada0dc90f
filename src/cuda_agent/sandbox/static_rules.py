"""Static checks on a candidate's sources: parse, never grep.

Entry point: :func:`check_sources` (a workspace directory, a ``model_new.py``, or one C++
file) -> a list of :class:`~cuda_agent.sandbox.results.Violation`, each with the rule id,
``file:line`` and the exploit class of ``notes/exploits.md`` it defends.

* Python (``model_new.py`` and the local modules it imports) is read with :mod:`ast`, with
  the import aliases resolved (``import torch as T; T._C`` is ``torch._C``).
* C++/CUDA (``kernels/**``, the strings given to ``load_inline`` and the files given to
  ``cpp_extension.load``) is read with :mod:`.cpp_lexer`, so comments and string literals
  neither hide nor fake a match.

Every rule is a :class:`Rule` in :data:`RULES` (id, exploit class, the profiles it applies
to, one-line summary); the checks themselves are plain functions in :data:`CPP_CHECKS` and
:data:`PY_CHECKS`, and a user can register more with :func:`cpp_check` / :func:`py_check`.
docs/static-rules.md lists the rules and their known limits.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..registry import Registry
from .cpp_lexer import CHAR, IDENT, NUMBER, PUNCT, STRING, Lexed, Token, tokenize
from .results import Violation
from .sources import CPP_SUFFIXES, cpp_files, is_binding, is_header

PROFILES = ("strict", "kernelbench")
BOTH = frozenset(PROFILES)
STRICT = frozenset({"strict"})


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Rule:
    """A static rule: id, the exploit class it defends, the profiles it applies to."""

    id: str
    exploit_class: int | None
    summary: str
    profiles: frozenset[str] = BOTH


RULES: Registry = Registry("static rule")


def _rule(id: str, cls: int | None, summary: str, profiles: frozenset[str] = BOTH) -> str:
    RULES.add(id, Rule(id, cls, summary, profiles))
    return id


# C++ / CUDA
# torch, cuBLAS/cuDNN and run-time compiled code are allowed in the kernelbench profile (its
# protocol allows torch anywhere): those rules are the strict profile's
R_TORCH_HEADER = _rule("cpp-torch-header", 2, "torch/ATen/c10/pybind11 header in a kernel file (or beyond cuda_agent_binding.h in a binding)", STRICT)
R_INCLUDE_PATH = _rule("cpp-include-path", 17, "#include of an absolute or parent path, or a computed #include")
R_TORCH_COMPUTE = _rule("cpp-torch-compute", 2, "torch/ATen compute in C++ (at::/torch:: functions, tensor methods or operators)", STRICT)
R_OP_OVERRIDE = _rule("cpp-op-override", 5, "registering kernels for existing (aten) operators")
R_CUBLAS = _rule("cpp-cublas-non-gemm", 2, "cuBLAS outside the GEMM family and its handle/stream/workspace setup", STRICT)
R_CUDNN = _rule("cpp-cudnn-non-conv", 2, "cuDNN outside convolution and its descriptors/handles/workspace", STRICT)
R_LIBRARY = _rule("cpp-library-call", 2, "other compute libraries (cuFFT, cuSPARSE, cuSOLVER, cuTENSOR)", STRICT)
R_STREAM = _rule("cpp-extra-stream", 10, "extra streams, threads or host callbacks without a visible join")
R_L2 = _rule("cpp-persisting-l2", 13, "persisting-L2 access policy windows / limits")
R_DEVICE_CONFIG = _rule("cpp-device-config", 18, "device-wide configuration (cudaDeviceSetLimit, cudaDeviceReset, ...)")
R_SYSTEM = _rule("cpp-system-call", 17, "processes, network, dynamic loading (system, popen, fork, exec*, socket, dlopen)")
R_FILE = _rule("cpp-file-access", 16, "files and environment from C++ (fopen, fstream, getenv, ...)")
R_SLEEP = _rule("cpp-sleep", 14, "host sleeps (sleep, usleep, nanosleep, sleep_for)")
R_INTERPOSE = _rule("cpp-symbol-interposition", 11, "defining a CUDA/cuBLAS/libc/infrastructure symbol (interposition of timers, sync, allocation)")
R_LOAD_HOOK = _rule("cpp-load-time-hook", 5, "code that runs when the library is loaded (constructor attributes, .init_array)")
R_RUNTIME_CODE = _rule("cpp-runtime-code", 2, "compiling or loading device code at run time (NVRTC, cuModuleLoad*, cuLibraryLoad*)", STRICT)
R_CPP_PRECISION = _rule("cpp-precision-downgrade", 8, "FP16/BF16/FP8/TF32 types, intrinsics, tensor-core MMA or math modes in an FP32 task")
R_PYTHON_API = _rule("cpp-python-api", 5, "the Python interpreter from C++ (py::module_::import, py::exec/eval, .attr(), Py* C API)")
R_TOKEN_PASTE = _rule("cpp-token-paste", 2, "token pasting (##) that builds a sensitive identifier")
# Python
R_PY_SYNTAX = _rule("py-syntax-error", None, "Python source that does not parse")
R_PY_IMPORT = _rule("py-forbidden-import", None, "imports of modules used for cheating (threads, processes, frames, code loading, timers)")
R_PY_NOT_ALLOWED = _rule("py-import-not-allowed", None, "imports outside the strict allow-list", STRICT)
R_PY_FOREIGN = _rule("py-foreign-compute", 1, "compute libraries other than the solution's own kernels (numpy, triton, cupy, ...)", STRICT)
R_PY_INTERNALS = _rule("py-torch-internals", 5, "torch internals: torch._C, _dynamo, dispatch modes, overrides, torch.library, load_library")
R_PY_COMPILER = _rule("py-torch-compiler", 1, "torch.compile / jit / fx / export inside the solution", STRICT)
R_PY_FRAME = _rule("py-frame-access", 3, "reading frames, tracebacks, function globals/closures or sys.modules")
R_PY_STREAM = _rule("py-extra-stream", 10, "extra CUDA streams without a visible join, or changing the current stream")
R_PY_TIMER = _rule("py-timer", 11, "timing or profiler state read inside the solution")
R_PY_PROCESS = _rule("py-process-state", 17, "process state: argv, environment, os/sys functions beyond os.path")
R_PY_FILE = _rule("py-file-access", 16, "opening files", STRICT)
R_PY_DYNAMIC = _rule("py-dynamic-code", 5, "exec/eval/compile/__import__/globals, getattr on modules with computed names")
R_PY_PATCH = _rule("py-monkeypatch", 5, "assigning to attributes of modules, torch or the reference; global module hooks")
R_PY_TRY = _rule("py-try-fallback", 1, "try/except inside a function of the solution (fallback path)", STRICT)
R_PY_REFERENCE = _rule("py-reference-model", 1, "using the reference Model (subclassing, instantiating, importing model.py)")
R_PY_LAZY = _rule("py-lazy-tensor", 9, "tensor subclasses, __torch_function__/__torch_dispatch__")
R_PY_PRECISION = _rule("py-precision-downgrade", 8, "half/bfloat16/fp8 dtypes, autocast, TF32 switches in an FP32 task")
R_PY_BUILD_FLAGS = _rule("py-build-flags", 2, "load_inline/load compiler or linker flags that inject code or symbols (-D with code, -include, -Wl,--wrap, ...)")
R_PY_UNRESOLVED = _rule("py-unresolvable-source", 2, "C++ sources for load_inline/load that cannot be resolved statically")
R_SOURCE_ERROR = _rule("source-error", None, "a source that cannot be found or read")


@dataclass
class Context:
    """State of one :func:`check_sources` run: profile, task precision, found violations."""

    profile: str
    fp32_task: bool
    root: Path
    violations: list[Violation] = field(default_factory=list)
    _seen: set[tuple[str, str, str]] = field(default_factory=set)

    def flag(self, rule_id: str, message: str, where: str, exploit_class: int | None = None) -> None:
        rule = RULES[rule_id]
        if self.profile not in rule.profiles:
            return
        key = (rule_id, where, message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.violations.append(Violation(rule_id, message, where, exploit_class or rule.exploit_class))


@dataclass
class CppUnit:
    """One C++/CUDA source: a file under kernels/ or a string given to load_inline."""

    name: str
    """Display path (relative to the solution root), used in ``where``."""
    kind: str
    """``kernel`` (.cu/.cpp), ``binding`` (*_binding.cpp), ``header`` or ``inline`` (torch allowed in headers)."""
    lexed: Lexed
    torch_aware: bool = False
    """The unit can see torch types (binding, inline, or includes a torch/binding header)."""

    @property
    def tokens(self) -> list[Token]:
        return self.lexed.tokens

    def where(self, line: int) -> str:
        return f"{self.name}:{line}"


CppCheck = Callable[[CppUnit, "list[CppUnit]", Context], None]
PyCheck = Callable[["PyModule", Context], None]
CPP_CHECKS: list[CppCheck] = []
PY_CHECKS: list[PyCheck] = []


def cpp_check(fn: CppCheck) -> CppCheck:
    """Register a C++ check ``fn(unit, all_units, ctx)``."""
    CPP_CHECKS.append(fn)
    return fn


def py_check(fn: PyCheck) -> PyCheck:
    """Register a Python check ``fn(module, ctx)``."""
    PY_CHECKS.append(fn)
    return fn


# --------------------------------------------------------------------------- entry point




def check_sources(
    solution_dir_or_file: Path | str, *, task_source: str | None = None, profile: str = "strict"
) -> list[Violation]:
    """Run every static rule of ``profile`` on a solution and return the violations.

    ``solution_dir_or_file``: a workspace directory (``model_new.py`` + ``kernels/``), a
    single ``model_new.py`` (KernelBench style, C++ inside ``load_inline`` strings), or one
    C++/CUDA file.  ``task_source`` is the reference's Python source; it decides whether the
    task is FP32 (then precision downgrades are flagged).  Without it, a ``model.py`` next
    to the solution is read; failing that the task is taken as FP32 (every KernelBench task is).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown rules profile {profile!r}; choose one of {', '.join(PROFILES)}")
    path = Path(solution_dir_or_file)
    root = path if path.is_dir() else path.parent
    if task_source is None and (root / "model.py").is_file():
        try:
            task_source = (root / "model.py").read_text(errors="replace")
        except OSError:
            task_source = None
    ctx = Context(profile=profile, fp32_task=not task_is_low_precision(task_source), root=root)
    if not path.exists():
        ctx.flag(R_SOURCE_ERROR, f"solution not found: {path}", str(path))
        return ctx.violations

    units: list[CppUnit] = []
    py_files: list[Path] = []
    if path.is_dir():
        if (path / "model_new.py").is_file():
            py_files.append(path / "model_new.py")
        for f in sorted(cpp_files(path)):
            units.append(_file_unit(f, root, ctx))
    elif path.suffix == ".py":
        py_files.append(path)
    elif path.suffix in CPP_SUFFIXES:
        units.append(_file_unit(path, root, ctx))
    else:
        ctx.flag(R_SOURCE_ERROR, f"not a solution (a directory, a .py or a C++/CUDA file): {path.name}", path.name)
        return ctx.violations

    seen: set[Path] = set()
    while py_files:
        f = py_files.pop(0).resolve()
        if f in seen:
            continue
        seen.add(f)
        mod = _load_py(f, root, ctx)
        if mod is None:
            continue
        for check in PY_CHECKS:
            check(mod, ctx)
        units.extend(mod.cpp_units)
        py_files.extend(mod.local_imports)

    units = [u for u in units if u is not None]
    _mark_torch_aware(units)
    for unit in units:
        for check in CPP_CHECKS:
            check(unit, units, ctx)
    ctx.violations.sort(key=lambda v: (_where_key(v.where), v.rule))
    return ctx.violations


def _where_key(where: str) -> tuple[str, int]:
    name, _, line = where.rpartition(":")
    return (name, int(line)) if line.isdigit() else (where, 0)


def _rel(p: Path, root: Path) -> str:
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return p.name


def _file_unit(p: Path, root: Path, ctx: Context) -> CppUnit | None:
    name = _rel(p, root)
    try:
        src = p.read_text(errors="replace")
    except OSError as e:
        ctx.flag(R_SOURCE_ERROR, f"cannot read {name}: {e.strerror or e}", name)
        return None
    if is_binding(p):
        kind = "binding"
    elif is_header(p):
        kind = "header"
    else:
        kind = "kernel"
    return CppUnit(name, kind, tokenize(src))


# --------------------------------------------------------------------------- task precision

LOW_PRECISION_DTYPES = {"float16", "half", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "complex32", "chalf"}


def task_is_low_precision(task_source: str | None) -> bool:
    """True if the reference itself computes in half/bfloat16/fp8 (then they are allowed)."""
    if not task_source:
        return False
    try:
        tree = ast.parse(task_source)
    except SyntaxError:
        return bool(re.search(r"\b(float16|bfloat16|half)\b", task_source))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (node.attr in LOW_PRECISION_DTYPES or node.attr.startswith("float8")):
            return True
        if isinstance(node, ast.Constant) and node.value in ("float16", "bfloat16", "half"):
            return True
    return False


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


def _mark_torch_aware(units: list[CppUnit]) -> None:
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
            if ctx.profile == "kernelbench" and t.text in TENSOR_LAYOUT:
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


# =========================================================================== Python rules

STRICT_ALLOWED_IMPORTS = frozenset(
    {"torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.parameter", "torch.utils.cpp_extension",
     "math", "typing", "typing_extensions", "dataclasses", "functools", "itertools", "operator", "collections",
     "enum", "abc", "numbers", "__future__", "os", "os.path", "cuda_agent", "cuda_agent.ext", "warnings", "collections.abc",
     # kernel languages: the solution writes its kernels in them (the dispatcher guard still sees any torch op)
     "triton", "triton.language", "cupy", "tilelang", "tilelang.language", "cutlass", "cutlass.cute",
     # scratch directories for builds (each job has a private /tmp and home)
     "tempfile", "shutil", "time"}
)
FORBIDDEN_IMPORTS: dict[str, int] = {
    "ctypes": 5, "cffi": 5, "subprocess": 17, "socket": 17, "ssl": 17, "http": 17, "urllib": 17, "requests": 17,
    "threading": 10, "_thread": 10, "multiprocessing": 10, "asyncio": 10, "concurrent": 10, "sched": 10,
    "inspect": 3, "gc": 3, "traceback": 3, "tracemalloc": 3, "weakref": 3, "importlib": 5, "builtins": 5,
    "pickle": 5, "marshal": 5, "dill": 5, "cloudpickle": 5, "runpy": 5, "code": 5, "codeop": 5, "atexit": 5,
    "unittest": 5, "pytest": 5, "timeit": 11, "cProfile": 12, "profile": 12, "pstats": 12,
    "signal": 18, "resource": 18, "faulthandler": 3, "glob": 17, "fcntl": 17, "pty": 17,
    "mmap": 3, "cuda_agent.sandbox": 5, "cuda_agent.eval": 5, "cuda_agent.tasks": 3, "model": 1,
}
# libraries whose functions compute for the solution (kernel languages such as Triton or CuPy's
# RawKernel are the solution's own code and are allowed)
FOREIGN_COMPUTE = frozenset({"numpy", "scipy", "jax", "jaxlib", "tensorflow", "tvm", "flashinfer", "xformers", "flash_attn", "apex", "einops", "transformers", "thunder", "opt_einsum"})
TORCH_INTERNAL_PREFIXES = ("torch._C", "torch._dynamo", "torch._inductor", "torch._ops", "torch._prims", "torch._refs", "torch._subclasses", "torch._functorch", "torch._higher_order_ops", "torch._guards", "torch._library", "torch._decomp", "torch._tensor", "torch._VF", "torch.utils._python_dispatch", "torch.overrides", "torch.library", "torch.ops.load_library", "torch.classes", "torch._jit_internal", "torch._utils_internal", "torch._logging", "torch.utils.hooks", "torch.autograd.graph")
COMPILER_PREFIXES = ("torch.compile", "torch.jit", "torch.fx", "torch.export", "torch.cuda.graphs", "torch.cuda.make_graphed_callables", "torch.cuda.CUDAGraph", "torch.cuda.graph")
STREAM_PREFIXES = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream", "torch.Stream", "torch.cuda.streams")
STREAM_ALWAYS = ("torch.cuda.set_stream", "torch.cuda.StreamContext", "torch.cuda._set_stream_by_id", "torch.cuda.default_stream")
TIMER_NAMES = ("torch.profiler", "torch.autograd.profiler", "torch.cuda.profiler", "torch.cuda.is_current_stream_capturing", "torch.cuda.Event", "torch.Event", "torch.cuda.nvtx", "torch.cuda.jiterator")
FRAME_ATTRS = frozenset({"f_back", "f_locals", "f_globals", "f_code", "f_builtins", "tb_frame", "tb_next", "gi_frame", "cr_frame", "ag_frame", "__traceback__", "__globals__", "__closure__", "__code__", "__builtins__", "__subclasses__", "_getframe", "_current_frames", "__kwdefaults__", "__defaults__"})
# In the kernelbench profile (torch allowed, KernelBench's own protocol) the static rules reject
# hacks, not style: only these imports (frames, raw memory, the evaluator, the reference) count
KERNELBENCH_FORBIDDEN = frozenset({"ctypes", "cffi", "inspect", "gc", "traceback", "tracemalloc", "faulthandler",
                                   "builtins", "cuda_agent.sandbox", "cuda_agent.eval", "cuda_agent.tasks", "model",
                                   # work hidden in threads (10) and the network (17): no kernel needs them
                                   "threading", "_thread", "multiprocessing", "concurrent", "asyncio",
                                   "socket", "ssl", "http", "urllib", "requests"})
# process state that a single-file solution uses honestly (build directories, TORCH_CUDA_ARCH_LIST)
OS_SCRATCH = frozenset({"makedirs", "mkdir", "getcwd", "listdir", "scandir", "remove", "unlink", "rmdir", "stat",
                        "walk", "cpu_count"})
# ... and what is left of process state in the kernelbench profile: starting or signalling processes
OS_PROCESS = ("fork", "forkpty", "kill", "killpg", "system", "popen", "exec", "spawn", "posix_spawn", "setsid")
SYS_OK = frozenset({"version_info", "maxsize", "float_info", "byteorder", "platform", "version", "hexversion"})
OS_OK = frozenset({"path", "sep", "linesep", "curdir", "pardir", "extsep", "cpu_count", "fspath", "PathLike"})
LOWP_TORCH = frozenset(f"torch.{d}" for d in LOW_PRECISION_DTYPES | {"float8_e4m3fn", "float8_e5m2"})
LOWP_SWITCHES = ("torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32", "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction", "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction", "torch.set_float32_matmul_precision", "torch.autocast", "torch.cuda.amp", "torch.amp", "torch.cpu.amp", "torch.backends.fp32_precision", "torch.backends.cuda.matmul.fp32_precision", "torch.backends.cudnn.fp32_precision")
DYNAMIC_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "input"})
MODULE_HOOK_RE = re.compile(r"(^|\.)register_module_\w+$|(^|\.)register_(forward|backward)_?\w*hook$")


@dataclass
class PyModule:
    """A parsed Python file with its import aliases resolved."""

    path: Path
    name: str
    tree: ast.Module
    source: str
    aliases: dict[str, str] = field(default_factory=dict)
    """Local name -> dotted module path (``T`` -> ``torch``, ``F`` -> ``torch.nn.functional``)."""
    local_modules: dict[str, Path] = field(default_factory=dict)
    """Imported names that are files of the solution."""
    defined: set[str] = field(default_factory=set)
    """Names defined at module level (classes, functions, assignments)."""
    cpp_units: list[CppUnit] = field(default_factory=list)
    local_imports: list[Path] = field(default_factory=list)

    def where(self, node: ast.AST) -> str:
        return f"{self.name}:{getattr(node, 'lineno', 0)}"

    def dotted(self, node: ast.AST) -> str | None:
        """``torch.cuda.Stream`` for an Attribute/Name chain rooted in an import alias."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__" and node.args and isinstance(node.args[0], ast.Constant):
            base = str(node.args[0].value)
        elif isinstance(node, ast.Name) and node.id in self.aliases:
            base = self.aliases[node.id]
        else:
            return None
        return ".".join([base, *reversed(parts)])


def _load_py(path: Path, root: Path, ctx: Context) -> PyModule | None:
    name = _rel(path, root)
    try:
        source = path.read_text(errors="replace")
    except OSError as e:
        ctx.flag(R_SOURCE_ERROR, f"cannot read {name}: {e.strerror or e}", name)
        return None
    try:
        tree = ast.parse(source, filename=name)
    except (SyntaxError, ValueError) as e:
        line = getattr(e, "lineno", 0) or 0
        ctx.flag(R_PY_SYNTAX, f"{name} does not parse: {getattr(e, 'msg', e)}", f"{name}:{line}")
        return None
    mod = PyModule(path, name, tree, source)
    base = path.parent
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                local = base / (a.name.replace(".", "/") + ".py")
                if local.is_file() and a.name != "model":
                    mod.local_modules[a.asname or a.name.split(".")[0]] = local
                    mod.local_imports.append(local)
                mod.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            modname = node.module or ""
            local = base / ("/".join([".."] * max(node.level - 1, 0) + [modname.replace(".", "/")]) + ".py") if modname else None
            if local is not None and local.is_file() and modname != "model":
                mod.local_imports.append(local)
            for a in node.names:
                full = f"{modname}.{a.name}" if modname else a.name
                mod.aliases[a.asname or a.name] = full
                if node.level and not modname and (base / f"{a.name}.py").is_file():
                    mod.local_imports.append(base / f"{a.name}.py")
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            mod.defined.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    mod.defined.add(t.id)
    # simple aliases: `cuda = torch.cuda`
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            d = mod.dotted(node.value)
            if d is not None and node.targets[0].id not in mod.aliases:
                mod.aliases[node.targets[0].id] = d
    _collect_inline_sources(mod, ctx)
    return mod


def _import_names(mod: PyModule) -> Iterable[tuple[ast.AST, str]]:
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                continue
            yield node, node.module or ""
            for a in node.names:
                yield node, f"{node.module}.{a.name}"


def _is_local(mod: PyModule, name: str) -> bool:
    return (mod.path.parent / (name.replace(".", "/") + ".py")).is_file() and name != "model"


def _forbidden_key(name: str) -> str | None:
    parts = name.split(".")
    for k in (name, ".".join(parts[:2]), parts[0]):
        if k in FORBIDDEN_IMPORTS:
            return k
    return None


NUMPY_SCALARS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "intp", "uintp",
                           "float16", "float32", "float64", "bool_", "dtype"})


def _numpy_scalars_only(mod: PyModule) -> bool:
    """numpy imported for scalar types alone (``np.int64(n)`` as a CuPy RawKernel argument)."""
    refs = [d for _, d in _dotted_refs(mod) if d == "numpy" or d.startswith("numpy.")]
    return all(d.split(".")[1] in NUMPY_SCALARS for d in refs if d != "numpy")


@py_check
def _check_imports(mod: PyModule, ctx: Context) -> None:
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            modules, members = [a.name for a in node.names], []
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules, members = [node.module], [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in modules + members:
            if _is_local(mod, name) or _is_local(mod, name.rpartition(".")[0] or name):
                continue
            key = _forbidden_key(name)
            if key is not None and ctx.profile == "kernelbench" and key not in KERNELBENCH_FORBIDDEN:
                key = None
            if key == "model":
                ctx.flag(R_PY_REFERENCE, "import of the reference module (model.py): a solution must not use the reference", mod.where(node))
            elif key is not None:
                ctx.flag(R_PY_IMPORT, f"import of {name}: not allowed in a solution (exploit class {FORBIDDEN_IMPORTS[key]})", mod.where(node), FORBIDDEN_IMPORTS[key])
            elif name.split(".")[0] in FOREIGN_COMPUTE and not (name == "numpy" and _numpy_scalars_only(mod)):
                ctx.flag(R_PY_FOREIGN, f"import of {name}: compute must come from the solution's own kernels", mod.where(node))
            elif (name in modules and name not in STRICT_ALLOWED_IMPORTS and not name.startswith("cuda_agent.ext.")
                  and not (name == "numpy" and _numpy_scalars_only(mod))):
                ctx.flag(R_PY_NOT_ALLOWED, f"import of {name}: the strict rules allow torch, torch.nn(.functional), math, typing, dataclasses, functools, os.path and cuda_agent.ext", mod.where(node))
            else:
                continue
            break


def _dotted_refs(mod: PyModule) -> Iterable[tuple[ast.AST, str]]:
    """Every maximal Attribute/Name chain that resolves through an import alias, and from-imports."""
    inner: set[int] = set()
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(mod.tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in inner:
            d = mod.dotted(node)
            if d is not None:
                yield node, d
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                yield node, f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name


def _has_prefix(name: str, prefixes: Iterable[str]) -> str | None:
    for p in prefixes:
        if name == p or name.startswith(p + "."):
            return p
    return None


@py_check
def _check_torch_refs(mod: PyModule, ctx: Context) -> None:
    attrs = {n.attr for n in ast.walk(mod.tree) if isinstance(n, ast.Attribute)}
    stream_joined = bool(attrs & {"wait_stream", "wait_event", "synchronize"})
    highest = {  # set_float32_matmul_precision("highest") keeps full FP32
        id(n.func) for n in ast.walk(mod.tree)
        if isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == "highest"
    }
    # os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0" configures a build; reading the environment
    # (to tell a timing run from a verification) stays off limits in the strict profile
    env_writes = {id(t.value) for n in ast.walk(mod.tree) if isinstance(n, ast.Assign) for t in n.targets
                  if isinstance(t, ast.Subscript) and mod.dotted(t.value) == "os.environ"}
    for node, name in _dotted_refs(mod):
        w = mod.where(node)
        if p := _has_prefix(name, TORCH_INTERNAL_PREFIXES):
            ctx.flag(R_PY_INTERNALS, f"{name}: torch internals ({p}) can bypass or patch the checker", w)
        elif p := _has_prefix(name, COMPILER_PREFIXES):
            ctx.flag(R_PY_COMPILER, f"{name}: compiled torch code is torch compute, not the solution's kernels", w)
        elif p := _has_prefix(name, STREAM_ALWAYS):
            ctx.flag(R_PY_STREAM, f"{name}: changing the current stream hides work from the timer", w)
        elif (p := _has_prefix(name, STREAM_PREFIXES)) and not stream_joined:
            ctx.flag(R_PY_STREAM, f"{name}: work on another stream must be joined (wait_stream / wait_event / synchronize)", w)
        elif p := _has_prefix(name, TIMER_NAMES):
            ctx.flag(R_PY_TIMER, f"{name}: a solution must not time itself or look at the profiler", w)
        elif ctx.fp32_task and (name in LOWP_TORCH or name.split(".")[-1].startswith("float8_") and name.startswith("torch.")):
            ctx.flag(R_PY_PRECISION, f"{name}: reduced precision in an FP32 task", w)
        elif ctx.fp32_task and (p := _has_prefix(name, LOWP_SWITCHES)) and id(node) not in highest:
            ctx.flag(R_PY_PRECISION, f"{name}: TF32/reduced-precision switch in an FP32 task", w)
        top, _, rest = name.partition(".")
        attr = rest.split(".")[0] if rest else ""
        if top == "sys" and attr and attr not in SYS_OK:
            rule = R_PY_FRAME if attr in ("_getframe", "_current_frames", "modules", "exc_info", "settrace", "setprofile", "gettrace", "getprofile", "last_traceback") else R_PY_PROCESS
            if rule == R_PY_PROCESS and ctx.profile == "kernelbench" and attr != "argv":
                continue  # sys.path, sys.stdout, sys.exit: harmless in the sandbox
            ctx.flag(rule, f"{name}: {'frames and loaded modules' if rule == R_PY_FRAME else 'process state'} are off limits to a solution", w)
        elif top == "os" and attr and attr not in OS_OK | OS_SCRATCH and id(node) not in env_writes:
            if ctx.profile != "kernelbench" or attr.startswith(OS_PROCESS):
                ctx.flag(R_PY_PROCESS, f"{name}: only os.path and scratch directories are allowed in a solution", w)


def _is_setting(mod: PyModule, target: ast.AST, dotted: str | None) -> bool:
    """Assignments that configure rather than patch: ``torch.backends.cudnn.benchmark = True``,
    ``os.environ["TORCH_CUDA_ARCH_LIST"] = ...``.  The TF32/reduced-precision switches among the
    backends' settings are the precision rule's business (FP32 tasks)."""
    if dotted and dotted.startswith("torch.backends.") and not _has_prefix(dotted, LOWP_SWITCHES):
        return True
    if isinstance(target, ast.Subscript):
        base = mod.dotted(target.value) if isinstance(target.value, (ast.Attribute, ast.Name)) else None
        return base == "os.environ"
    return False


@py_check
def _check_ast_patterns(mod: PyModule, ctx: Context) -> None:
    ref_names = {k for k, v in mod.aliases.items() if v == "model.Model" or v.startswith("model.")} | ({"Model"} if "Model" not in mod.defined else set())
    module_names = {k for k, v in mod.aliases.items() if "." not in v or v.split(".")[0] in ("torch", "os", "sys", "math", "time", "builtins", "cuda_agent")}
    shadowed = mod.defined | {a.arg for n in ast.walk(mod.tree) if isinstance(n, ast.arguments) for a in n.args + n.kwonlyargs}

    def root_name(node: ast.AST) -> ast.Name | None:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type":
            return node.func  # type(x).attr = ...: patches the class of an object (a tensor, a module)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("vars", "__import__") and node.args:
            return root_name(node.args[0]) or (node.func if node.func.id == "__import__" else None)
        return node if isinstance(node, ast.Name) else None

    def is_module_or_ref(node: ast.AST) -> str | None:
        r = root_name(node)
        if r is None:
            return None
        if r.id in ("__import__", "type"):
            return f"{r.id}(...)"
        if r.id in module_names or r.id in ref_names:
            return mod.aliases.get(r.id, r.id)
        return None

    targets_all: list[ast.AST] = [
        sub for n in ast.walk(mod.tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete))
        for t in (n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]) for sub in ast.walk(t)
        if isinstance(sub, (ast.Attribute, ast.Subscript))
    ]
    # a try/except at import time guards a build (load_inline): the result records a failed build
    # and strict requires the solution's own code to run; inside a function it is a fallback path
    in_functions = {id(n) for f in ast.walk(mod.tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    for n in ast.walk(f) if isinstance(n, (ast.Try, getattr(ast, "TryStar", ast.Try)))}
    reported: set[int] = set()  # Name nodes already reported as a base class or a call
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.ClassDef):
            reported.update(id(b) for b in node.bases)
        elif isinstance(node, ast.Call):
            reported.add(id(node.func))
    for node in ast.walk(mod.tree):
        w = mod.where(node)
        # assignments to attributes of modules / the reference
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for sub in ast.walk(t) if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                if isinstance(sub, (ast.Attribute, ast.Subscript)) and (owner := is_module_or_ref(sub)):
                    d = mod.dotted(sub) if isinstance(sub, ast.Attribute) else None
                    if _is_setting(mod, sub, d):
                        continue
                    ctx.flag(R_PY_PATCH, f"assignment to {d or owner + '...'}: patching modules or the reference is not allowed", w)
        if isinstance(node, ast.Call):
            f = node.func
            fname = f.id if isinstance(f, ast.Name) else None
            if attr_name := (f.attr if isinstance(f, ast.Attribute) else ""):
                if attr_name in ("__setattr__", "__delattr__"):
                    ctx.flag(R_PY_PATCH, f".{attr_name}(): patching objects through dunder setters is not allowed", w)
            if fname in ("setattr", "delattr") and node.args and is_module_or_ref(node.args[0]):
                ctx.flag(R_PY_PATCH, f"{fname}() on {is_module_or_ref(node.args[0])}: patching modules or the reference is not allowed", w)
            elif fname in ("getattr", "hasattr") and len(node.args) >= 2 and (owner := is_module_or_ref(node.args[0])):
                constant = isinstance(node.args[1], ast.Constant)
                # hasattr(torch, "compile") asks about the installed version; a constant getattr is a
                # plain lookup in the kernelbench profile (torch ops are allowed there anyway)
                if not constant or (owner.split(".")[0] == "torch" and fname == "getattr" and ctx.profile != "kernelbench"):
                    ctx.flag(R_PY_DYNAMIC, f"{fname}() on {owner}: look names up directly so they can be checked", w)
            elif fname in DYNAMIC_BUILTINS and fname not in shadowed:
                ctx.flag(R_PY_DYNAMIC, f"{fname}(): dynamic code and namespace access are not allowed in a solution", w)
            elif fname == "open" and fname not in shadowed:
                ctx.flag(R_PY_FILE, "open(): a solution must not read or write files", w)
            elif fname in ref_names:
                ctx.flag(R_PY_REFERENCE, f"{fname}(...): instantiating the reference model is a fallback", w)
            dotted = mod.dotted(f) if isinstance(f, ast.Attribute) else None
            attr = f.attr if isinstance(f, ast.Attribute) else ""
            if dotted and MODULE_HOOK_RE.search(dotted) and dotted.startswith("torch"):
                ctx.flag(R_PY_PATCH, f"{dotted}(): global module hooks reach the reference and the checker", w)
            if attr in ("_make_subclass", "_make_wrapper_subclass", "as_subclass"):
                ctx.flag(R_PY_LAZY, f".{attr}(): tensor subclasses are not allowed (deferred or faked results)", w)
            if ctx.fp32_task and attr in ("half", "bfloat16") and not node.args:
                ctx.flag(R_PY_PRECISION, f".{attr}(): reduced precision in an FP32 task", w)
        elif isinstance(node, ast.ClassDef):
            for b in node.bases:
                d = mod.dotted(b)
                if isinstance(b, ast.Name) and b.id in ref_names:
                    ctx.flag(R_PY_REFERENCE, f"class {node.name}({b.id}): inheriting from the reference model is a fallback", mod.where(b))
                elif d in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter", "torch.nn.parameter.Parameter"):
                    ctx.flag(R_PY_LAZY, f"class {node.name}({d}): tensor subclasses are not allowed (deferred or faked results)", mod.where(b))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("__torch_function__", "__torch_dispatch__"):
            ctx.flag(R_PY_LAZY, f"def {node.name}: intercepting torch calls is not allowed", w)
        elif isinstance(node, ast.Attribute):
            if node.attr in ("__class__", "__dict__") and any(node is getattr(t, "value", None) for t in targets_all):
                ctx.flag(R_PY_PATCH, f".{node.attr} assignment: changing an object's class or namespace is not allowed", w)
            if node.attr == "elapsed_time":
                ctx.flag(R_PY_TIMER, ".elapsed_time: a solution must not time itself", w)
            elif node.attr in FRAME_ATTRS:
                ctx.flag(R_PY_FRAME, f".{node.attr}: frames, globals and closures of other code are off limits", w)
            elif node.attr in ("__torch_function__", "__torch_dispatch__"):
                ctx.flag(R_PY_LAZY, f".{node.attr}: intercepting torch calls is not allowed", w)
        elif (
            isinstance(node, ast.Name) and node.id in DYNAMIC_BUILTINS | {"setattr", "delattr", "open"}
            and id(node) not in reported and node.id not in shadowed and isinstance(node.ctx, ast.Load)
        ):
            ctx.flag(R_PY_DYNAMIC, f"{node.id} used as a value: builtins that run code or patch objects must be called directly", w)
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            ctx.flag(R_PY_FRAME, f"{node.id}: interpreter internals are off limits", w)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))) and node.handlers and id(node) in in_functions:
            ctx.flag(R_PY_TRY, "try/except in a solution: a failing kernel must fail, not fall back", w)
        elif isinstance(node, ast.Name) and node.id in ref_names and isinstance(node.ctx, ast.Load) and id(node) not in reported:
            ctx.flag(R_PY_REFERENCE, "Model: the reference model is not available to a solution", w)


# --------------------------------------------------------------------------- load_inline / load


@dataclass
class _Piece:
    text: str
    line_map: list[int]


def _const_string(mod: PyModule, node: ast.AST, env: dict[str, ast.AST], depth: int = 0) -> _Piece | None:
    """Resolve a string expression built from literals, + , implicit concatenation, module-level names, and '\\n'.join([...])."""
    if depth > 20:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _literal_piece(mod, node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _const_string(mod, node.left, env, depth + 1), _const_string(mod, node.right, env, depth + 1)
        return _join([a, b]) if a and b else None
    if isinstance(node, ast.Name) and node.id in env:
        return _const_string(mod, env[node.id], env, depth + 1)
    if isinstance(node, (ast.List, ast.Tuple)):
        parts = [_const_string(mod, e, env, depth + 1) for e in node.elts]
        if any(p is None for p in parts):
            return None
        return _join([p for p in parts if p], sep="\n")
    if (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
        and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str) and len(node.args) == 1
        and isinstance(node.args[0], (ast.List, ast.Tuple))
    ):
        parts = [_const_string(mod, e, env, depth + 1) for e in node.args[0].elts]
        if any(p is None for p in parts):
            return None
        return _join([p for p in parts if p], sep=node.func.value.value)
    return None


def _literal_piece(mod: PyModule, node: ast.Constant) -> _Piece:
    text = node.value
    seg = ast.get_source_segment(mod.source, node) or ""
    n_dec = text.count("\n")
    n_src = seg.count("\n")
    base = node.lineno
    if n_dec == n_src and seg.lstrip("rRbBuUfF").startswith(('"""', "'''")):
        line_map = [base + k for k in range(n_dec + 1)]
    elif n_src == 0:
        line_map = [base] * (n_dec + 1)
    else:  # implicit concatenation or escaped newlines: map proportionally, never past the literal
        line_map = [base + min(k, n_src) for k in range(n_dec + 1)]
    return _Piece(text, line_map)


def _char_lines(p: _Piece) -> list[int]:
    out, k = [], 0
    for ch in p.text:
        out.append(p.line_map[min(k, len(p.line_map) - 1)])
        if ch == "\n":
            k += 1
    return out


def _join(pieces: list[_Piece], sep: str = "") -> _Piece:
    """Concatenate pieces (with ``sep`` between them), keeping each character's source line."""
    text, lines = "", []
    for k, p in enumerate(pieces):
        if k and sep:
            text += sep
            lines += [lines[-1] if lines else p.line_map[0]] * len(sep)
        text += p.text
        lines += _char_lines(p)
    line_map, at_start = [], True
    for ch, ln in zip(text, lines):
        if at_start:
            line_map.append(ln)
            at_start = False
        if ch == "\n":
            at_start = True
    if at_start:
        line_map.append(lines[-1] if lines else (pieces[0].line_map[0] if pieces else 1))
    return _Piece(text, line_map)


SAFE_DEFINE = re.compile(r"^-D\s*[A-Za-z_]\w*(=[\w.+-]*)?$")
BAD_FLAG = re.compile(r"^(-include|-imacros|--preinclude|-U|--wrap|-Wl,.*(--wrap|--defsym|-init|-fini|--undefined|-z\s*initfirst|--dynamic-list)|-Xlinker|-fplugin|-specs|--compiler-bindir|-ccbin|-B)")


def _check_build_flags(mod: PyModule, ctx: Context, call: ast.Call, env: dict[str, ast.AST]) -> None:
    for k in call.keywords:
        if k.arg not in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_sycl_cflags", "extra_include_paths"):
            continue
        flags = _const_string_list(k.value, env)
        if flags is None:
            ctx.flag(R_PY_UNRESOLVED, f"{k.arg}=... is not a list of literal flags: it cannot be checked", mod.where(k.value))
            continue
        for fl in flags:
            fl = fl.strip()
            if k.arg == "extra_include_paths":
                if fl.startswith("/") or ".." in Path(fl).parts:
                    ctx.flag(R_PY_BUILD_FLAGS, f"include path {fl!r}: only the solution's own directory may be added", mod.where(k.value))
            elif (fl.startswith("-D") and not SAFE_DEFINE.match(fl)) or BAD_FLAG.match(fl):
                ctx.flag(R_PY_BUILD_FLAGS, f"flag {fl!r} injects code or symbols the static checks cannot see", mod.where(k.value))


def _collect_inline_sources(mod: PyModule, ctx: Context) -> None:
    env: dict[str, ast.AST] = {}
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            # a name assigned twice cannot be resolved statically
            env[node.targets[0].id] = node.value if node.targets[0].id not in env else ast.Name("<reassigned>")
        elif isinstance(node, (ast.AugAssign,)) and isinstance(node.target, ast.Name):
            env[node.target.id] = ast.Name("<reassigned>")
    handled: set[int] = set()
    for node in ast.walk(mod.tree):
        if not isinstance(node, ast.Call):
            continue
        d = mod.dotted(node.func) if isinstance(node.func, (ast.Attribute, ast.Name)) else None
        fname = d or (node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else "")
        last = fname.split(".")[-1]
        if last in ("load_inline", "load") and (last == "load_inline" or (d or "").startswith("torch.utils.cpp_extension")):
            handled.add(id(node.func))
            _check_build_flags(mod, ctx, node, env)
        if last == "load_inline":
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            pos = ["name", "cpp_sources", "cuda_sources"]
            for k, v in zip(pos, node.args):
                kw.setdefault(k, v)
            for key in ("cpp_sources", "cuda_sources", "sycl_sources"):
                if key not in kw:
                    continue
                piece = _const_string(mod, kw[key], env)
                if piece is None:
                    ctx.flag(R_PY_UNRESOLVED, f"load_inline({key}=...) is not built from string literals: it cannot be checked", mod.where(kw[key]))
                    continue
                lexed = tokenize(piece.text, line_map=piece.line_map)
                mod.cpp_units.append(CppUnit(mod.name, "inline", lexed))
            if any(k.arg is None for k in node.keywords):
                ctx.flag(R_PY_UNRESOLVED, "load_inline(**kwargs): sources passed through ** cannot be checked", mod.where(node))
        elif last == "load" and (d or "").startswith("torch.utils.cpp_extension"):
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if len(node.args) > 1:
                kw.setdefault("sources", node.args[1])
            src = kw.get("sources")
            files = _const_string_list(src, env) if src is not None else None
            if files is None:
                ctx.flag(R_PY_UNRESOLVED, "cpp_extension.load(sources=...) is not a list of literal paths: it cannot be checked", mod.where(node))
                continue
            for f in files:
                p = (mod.path.parent / f)
                if not p.is_file():
                    ctx.flag(R_PY_UNRESOLVED, f"cpp_extension.load source {f!r} is not a file of the solution", mod.where(node))
                    continue
                unit = _file_unit(p, ctx.root, ctx)
                if unit is not None:
                    unit.kind = "inline"
                    mod.cpp_units.append(unit)
    inner = {id(n.value) for n in ast.walk(mod.tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(mod.tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in inner and id(node) not in handled:
            d = mod.dotted(node)
            if d and d.startswith("torch.utils.cpp_extension.") and not isinstance(getattr(node, "ctx", None), ast.Store):
                ctx.flag(R_PY_UNRESOLVED, f"{d} used other than as a direct load_inline(...)/load(...) call: its sources cannot be checked", mod.where(node))


def _const_string_list(node: ast.AST, env: dict[str, ast.AST]) -> list[str] | None:
    if isinstance(node, ast.Name) and node.id in env:
        node = env[node.id]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


def rules_table() -> str:
    """Markdown table of the registered rules (id, class, profiles, summary)."""
    rows = ["| rule | class | profiles | what it flags |", "|---|---|---|---|"]
    for r in RULES.values():
        rows.append(f"| `{r.id}` | {r.exploit_class or '-'} | {', '.join(sorted(r.profiles))} | {r.summary} |")
    return "\n".join(rows)
