"""The Python rules: ``model_new.py`` and the local modules it imports, read with :mod:`ast`
with the import aliases resolved (``import torch as T; T._C`` is ``torch._C``); the C++
sources that ``load_inline``/``load`` calls name become units for the C++ rules.  Each check
is registered with ``@py_check``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ...rules_profile import RulesProfile
from ..exploits import Exploit
from .base import LOW_PRECISION_DTYPES, STRICT, Context, CppUnit, define_rule, file_unit, py_check, read_source
from .cpp_lexer import tokenize

# Python
R_PY_SYNTAX = define_rule("py-syntax-error", None, "Python source that does not parse")
R_PY_IMPORT = define_rule("py-forbidden-import", None, "imports of modules used for cheating (threads, processes, frames, code loading, timers)")
R_PY_NOT_ALLOWED = define_rule("py-import-not-allowed", None, "imports outside the strict allow-list", STRICT)
R_PY_FOREIGN = define_rule("py-foreign-compute", Exploit.FALLBACK_TO_PYTORCH, "compute libraries other than the solution's own kernels (numpy, triton, cupy, ...)", STRICT)
R_PY_INTERNALS = define_rule("py-torch-internals", Exploit.PATCHING_THE_CHECKER, "torch internals: torch._C, _dynamo, dispatch modes, overrides, torch.library, load_library")
R_PY_COMPILER = define_rule("py-torch-compiler", Exploit.FALLBACK_TO_PYTORCH, "torch.compile / jit / fx / export inside the solution", STRICT)
R_PY_FRAME = define_rule("py-frame-access", Exploit.READING_THE_ANSWER, "reading frames, tracebacks, function globals/closures or sys.modules")
R_PY_STREAM = define_rule("py-extra-stream", Exploit.HIDDEN_WORK, "extra CUDA streams without a visible join, or changing the current stream")
R_PY_TIMER = define_rule("py-timer", Exploit.PATCHING_TIMERS, "timing or profiler state read inside the solution")
R_PY_PROCESS = define_rule("py-process-state", Exploit.ESCAPE, "process state: argv, environment, os/sys functions beyond os.path")
R_PY_FILE = define_rule("py-file-access", Exploit.PROTECTED_FILES, "opening files", STRICT)
R_PY_DYNAMIC = define_rule("py-dynamic-code", Exploit.PATCHING_THE_CHECKER, "exec/eval/compile/__import__/globals, getattr on modules with computed names")
R_PY_PATCH = define_rule("py-monkeypatch", Exploit.PATCHING_THE_CHECKER, "assigning to attributes of modules, torch or the reference; global module hooks")
R_PY_TRY = define_rule("py-try-fallback", Exploit.FALLBACK_TO_PYTORCH, "try/except inside a function of the solution (fallback path)", STRICT)
R_PY_REFERENCE = define_rule("py-reference-model", Exploit.FALLBACK_TO_PYTORCH, "using the reference Model (subclassing, instantiating, importing model.py)")
R_PY_LAZY = define_rule("py-lazy-tensor", Exploit.LAZY_RESULTS, "tensor subclasses, __torch_function__/__torch_dispatch__")
R_PY_PRECISION = define_rule("py-precision-downgrade", Exploit.PRECISION_DOWNGRADE, "half/bfloat16/fp8 dtypes, autocast, TF32 switches in an FP32 task")
R_PY_BUILD_FLAGS = define_rule("py-build-flags", Exploit.LIBRARIES_IN_CPP, "load_inline/load compiler or linker flags that inject code or symbols (-D with code, -include, -Wl,--wrap, ...)")
R_PY_UNRESOLVED = define_rule("py-unresolvable-source", Exploit.LIBRARIES_IN_CPP, "C++ sources for load_inline/load that cannot be resolved statically")


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


def load_py(path: Path, root: Path, ctx: Context) -> PyModule | None:
    got = read_source(path, root, ctx)
    if got is None:
        return None
    name, source = got
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
            if key is not None and ctx.profile == RulesProfile.KERNELBENCH and key not in KERNELBENCH_FORBIDDEN:
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
            if rule == R_PY_PROCESS and ctx.profile == RulesProfile.KERNELBENCH and attr != "argv":
                continue  # sys.path, sys.stdout, sys.exit: harmless in the sandbox
            ctx.flag(rule, f"{name}: {'frames and loaded modules' if rule == R_PY_FRAME else 'process state'} are off limits to a solution", w)
        elif top == "os" and attr and attr not in OS_OK | OS_SCRATCH and id(node) not in env_writes:
            if ctx.profile != RulesProfile.KERNELBENCH or attr.startswith(OS_PROCESS):
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
    _Patterns(mod, ctx).check()


class _Patterns:
    """The syntactic hack patterns of one module, node by node: patching modules or the
    reference, dynamic code, files, the reference as a fallback, tensor subclasses and torch
    interception, timers, frames, reduced precision, try/except fallbacks."""

    def __init__(self, mod: PyModule, ctx: Context) -> None:
        self.mod, self.ctx = mod, ctx
        self.ref_names = ({k for k, v in mod.aliases.items() if v == "model.Model" or v.startswith("model.")}
                          | ({"Model"} if "Model" not in mod.defined else set()))
        self.module_names = {k for k, v in mod.aliases.items() if "." not in v or v.split(".")[0] in (
            "torch", "os", "sys", "math", "time", "builtins", "cuda_agent")}
        self.shadowed = mod.defined | {a.arg for n in ast.walk(mod.tree) if isinstance(n, ast.arguments)
                                       for a in n.args + n.kwonlyargs}
        self.targets_all: list[ast.AST] = [
            sub for n in ast.walk(mod.tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete))
            for t in (n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]) for sub in ast.walk(t)
            if isinstance(sub, (ast.Attribute, ast.Subscript))
        ]
        # a try/except at import time guards a build (load_inline): the result records a failed build
        # and strict requires the solution's own code to run; inside a function it is a fallback path
        self.in_functions = {id(n) for f in ast.walk(mod.tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                             for n in ast.walk(f) if isinstance(n, (ast.Try, getattr(ast, "TryStar", ast.Try)))}
        self.reported: set[int] = set()  # Name nodes already reported as a base class or a call
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.ClassDef):
                self.reported.update(id(b) for b in node.bases)
            elif isinstance(node, ast.Call):
                self.reported.add(id(node.func))

    def check(self) -> None:
        for node in ast.walk(self.mod.tree):
            w = self.mod.where(node)
            self._assignment(node, w)
            if isinstance(node, ast.Call):
                self._call(node, w)
            elif isinstance(node, ast.ClassDef):
                self._class(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("__torch_function__", "__torch_dispatch__"):
                self.ctx.flag(R_PY_LAZY, f"def {node.name}: intercepting torch calls is not allowed", w)
            elif isinstance(node, ast.Attribute):
                self._attribute(node, w)
            else:
                self._other(node, w)

    def _root_name(self, node: ast.AST) -> ast.Name | None:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type":
            return node.func  # type(x).attr = ...: patches the class of an object (a tensor, a module)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("vars", "__import__") and node.args:
            return self._root_name(node.args[0]) or (node.func if node.func.id == "__import__" else None)
        return node if isinstance(node, ast.Name) else None

    def _module_or_ref(self, node: ast.AST) -> str | None:
        """The module or reference object that ``node`` reaches into (None: neither)."""
        r = self._root_name(node)
        if r is None:
            return None
        if r.id in ("__import__", "type"):
            return f"{r.id}(...)"
        if r.id in self.module_names or r.id in self.ref_names:
            return self.mod.aliases.get(r.id, r.id)
        return None

    def _assignment(self, node: ast.AST, w) -> None:
        """Assignments to attributes of modules / the reference."""
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            return
        for t in targets:
            for sub in ast.walk(t) if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                if isinstance(sub, (ast.Attribute, ast.Subscript)) and (owner := self._module_or_ref(sub)):
                    d = self.mod.dotted(sub) if isinstance(sub, ast.Attribute) else None
                    if _is_setting(self.mod, sub, d):
                        continue
                    self.ctx.flag(R_PY_PATCH, f"assignment to {d or owner + '...'}: patching modules or the reference is not allowed", w)

    def _call(self, node: ast.Call, w) -> None:
        ctx, f = self.ctx, node.func
        fname = f.id if isinstance(f, ast.Name) else None
        attr = f.attr if isinstance(f, ast.Attribute) else ""
        if attr in ("__setattr__", "__delattr__"):
            ctx.flag(R_PY_PATCH, f".{attr}(): patching objects through dunder setters is not allowed", w)
        if fname in ("setattr", "delattr") and node.args and self._module_or_ref(node.args[0]):
            ctx.flag(R_PY_PATCH, f"{fname}() on {self._module_or_ref(node.args[0])}: patching modules or the reference is not allowed", w)
        elif fname in ("getattr", "hasattr") and len(node.args) >= 2 and (owner := self._module_or_ref(node.args[0])):
            constant = isinstance(node.args[1], ast.Constant)
            # hasattr(torch, "compile") asks about the installed version; a constant getattr is a
            # plain lookup in the kernelbench profile (torch ops are allowed there anyway)
            if not constant or (owner.split(".")[0] == "torch" and fname == "getattr" and ctx.profile != RulesProfile.KERNELBENCH):
                ctx.flag(R_PY_DYNAMIC, f"{fname}() on {owner}: look names up directly so they can be checked", w)
        elif fname in DYNAMIC_BUILTINS and fname not in self.shadowed:
            ctx.flag(R_PY_DYNAMIC, f"{fname}(): dynamic code and namespace access are not allowed in a solution", w)
        elif fname == "open" and fname not in self.shadowed:
            ctx.flag(R_PY_FILE, "open(): a solution must not read or write files", w)
        elif fname in self.ref_names:
            ctx.flag(R_PY_REFERENCE, f"{fname}(...): instantiating the reference model is a fallback", w)
        dotted = self.mod.dotted(f) if isinstance(f, ast.Attribute) else None
        if dotted and MODULE_HOOK_RE.search(dotted) and dotted.startswith("torch"):
            ctx.flag(R_PY_PATCH, f"{dotted}(): global module hooks reach the reference and the checker", w)
        if attr in ("_make_subclass", "_make_wrapper_subclass", "as_subclass"):
            ctx.flag(R_PY_LAZY, f".{attr}(): tensor subclasses are not allowed (deferred or faked results)", w)
        if ctx.fp32_task and attr in ("half", "bfloat16") and not node.args:
            ctx.flag(R_PY_PRECISION, f".{attr}(): reduced precision in an FP32 task", w)

    def _class(self, node: ast.ClassDef) -> None:
        for b in node.bases:
            d = self.mod.dotted(b)
            if isinstance(b, ast.Name) and b.id in self.ref_names:
                self.ctx.flag(R_PY_REFERENCE, f"class {node.name}({b.id}): inheriting from the reference model is a fallback", self.mod.where(b))
            elif d in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter", "torch.nn.parameter.Parameter"):
                self.ctx.flag(R_PY_LAZY, f"class {node.name}({d}): tensor subclasses are not allowed (deferred or faked results)", self.mod.where(b))

    def _attribute(self, node: ast.Attribute, w) -> None:
        ctx = self.ctx
        if node.attr in ("__class__", "__dict__") and any(node is getattr(t, "value", None) for t in self.targets_all):
            ctx.flag(R_PY_PATCH, f".{node.attr} assignment: changing an object's class or namespace is not allowed", w)
        if node.attr == "elapsed_time":
            ctx.flag(R_PY_TIMER, ".elapsed_time: a solution must not time itself", w)
        elif node.attr in FRAME_ATTRS:
            ctx.flag(R_PY_FRAME, f".{node.attr}: frames, globals and closures of other code are off limits", w)
        elif node.attr in ("__torch_function__", "__torch_dispatch__"):
            ctx.flag(R_PY_LAZY, f".{node.attr}: intercepting torch calls is not allowed", w)

    def _other(self, node: ast.AST, w) -> None:
        ctx = self.ctx
        if (
            isinstance(node, ast.Name) and node.id in DYNAMIC_BUILTINS | {"setattr", "delattr", "open"}
            and id(node) not in self.reported and node.id not in self.shadowed and isinstance(node.ctx, ast.Load)
        ):
            ctx.flag(R_PY_DYNAMIC, f"{node.id} used as a value: builtins that run code or patch objects must be called directly", w)
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            ctx.flag(R_PY_FRAME, f"{node.id}: interpreter internals are off limits", w)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))) and node.handlers and id(node) in self.in_functions:
            ctx.flag(R_PY_TRY, "try/except in a solution: a failing kernel must fail, not fall back", w)
        elif isinstance(node, ast.Name) and node.id in self.ref_names and isinstance(node.ctx, ast.Load) and id(node) not in self.reported:
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
                unit = file_unit(p, ctx.root, ctx)
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
