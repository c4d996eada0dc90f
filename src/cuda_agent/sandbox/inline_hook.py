"""Runner side of single-file solutions' extensions: what was built, and whether it ran.

Installed by the runner before the solution is imported:

- ``torch.utils.cpp_extension.load_inline`` and ``load`` send a build request to the judge
  (``inline_build.py``: a trusted, content-keyed cache) and load the library it returns.  The
  runner's file tree is read-only and its home private, so a build of its own would start from
  nothing every check; through the judge an unchanged source loads in well under a second.
  Calls that reach torch's builder some other way still work: they build in the job's private
  scratch (``TORCH_EXTENSIONS_DIR``), only slower.
- Every build and its outcome is recorded, also one that fails inside a ``try/except`` that
  falls back to torch: the result then says the extension never loaded.
- The extension's functions (and Triton and CuPy kernels, and a workspace's ``torch.ops.kernels``) are
  counted while the judge asks, so the result can say whether any of the solution's own code
  ran during ``forward``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c", ".h", ".cuh", ".hpp", ".hh", ".inl", ".inc")
MAX_SCAN = 256

events: list[dict] = []
"""One entry per build request: name, api, ok, cached, seconds, error (first lines)."""
calls: Counter = Counter()
"""Calls of the solution's own functions since the last :func:`reset`."""
_counting = False


def reset(on: bool) -> None:
    global _counting
    calls.clear()
    _counting = on


class _Counted:
    """A callable of the solution (an extension function, a torch op) that adds one to
    ``calls[name]`` per call while counting is on; everything else goes to the original
    (``ops.name.default``, ``__doc__``)."""

    __slots__ = ("_fn", "_name")

    def __init__(self, fn: Callable, name: str) -> None:
        self._fn, self._name = fn, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _counting:
            calls[self._name] += 1
        return self._fn(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._fn, attr)


def counted(fn: Callable, name: str) -> Callable:
    return _Counted(fn, name)


def _count_module(mod: Any, ext: str) -> Any:
    for attr in dir(mod):
        if attr.startswith("_"):
            continue
        fn = getattr(mod, attr, None)
        if callable(fn) and not isinstance(fn, type):
            try:
                setattr(mod, attr, counted(fn, f"{ext}.{attr}"))
            except (AttributeError, TypeError):
                pass
    return mod


def _scan(d: Path, prefix: str, out: dict[str, str]) -> None:
    """Source/header files under ``d`` into ``out`` (relative to ``prefix``), bounded."""
    n = 0
    for root, _, names in os.walk(d):
        for name in sorted(names):
            p = Path(root) / name
            if p.suffix in SOURCE_SUFFIXES and n < MAX_SCAN:
                try:
                    out[f"{prefix}/{p.relative_to(d)}"] = p.read_text(errors="replace")
                    n += 1
                except OSError:
                    pass


def _request(api: str, args: dict) -> dict:
    req: dict = {"api": api, "name": args.get("name")}
    for k in ("cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
              "with_cuda", "is_python_module", "with_pytorch_error_handling", "is_standalone", "no_implicit_headers"):
        if k in args:
            v = args[k]
            req[k] = list(v) if isinstance(v, tuple) else v
    files: dict[str, str] = {}
    incs = args.get("extra_include_paths") or []
    req["include_dirs"] = []
    for i, d in enumerate([incs] if isinstance(incs, str) else incs):
        _scan(Path(d), f"inc{i}", files)
        req["include_dirs"].append(f"inc{i}")
    if api == "load":
        srcs = args.get("sources") or []
        req["sources"] = []
        for i, s in enumerate([srcs] if isinstance(srcs, str) else srcs):
            p = Path(s)
            for sib in sorted(p.parent.iterdir())[:MAX_SCAN] if p.parent.is_dir() else []:
                if sib.is_file() and sib.suffix in SOURCE_SUFFIXES:
                    files[f"src{i}/{sib.name}"] = sib.read_text(errors="replace")
            files[f"src{i}/{p.name}"] = p.read_text(errors="replace")
            req["sources"].append(f"src{i}/{p.name}")
    req["files"] = files
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        req["arch_list"] = os.environ["TORCH_CUDA_ARCH_LIST"]
    return req


def _load(path: str, name: str, python_module: bool) -> Any:
    if not python_module:
        import torch

        torch.ops.load_library(path)
        return path
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return _count_module(mod, name)


def _through_judge(orig: Callable, api: str, ask: Callable[[dict], dict]) -> Callable:
    sig = inspect.signature(orig)

    def build(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = dict(bound.arguments)
        name = str(a.get("name"))
        ev: dict = {"name": name, "api": api, "ok": False}
        events.append(ev)
        try:
            rep = ask(_request(api, a))
        except OSError as e:  # a source file that does not exist: torch would fail the same way
            ev["error"] = str(e)[:300]
            raise
        ev["cached"] = bool(rep.get("cached"))
        for k in ("pch", "pch_seconds"):  # the precompiled torch/extension.h: used, not used, offered; made now
            if rep.get(k):
                ev[k] = rep[k]
        ev["seconds"] = round(time.perf_counter() - t0, 3)
        if not rep.get("ok"):
            log = str(rep.get("log") or "the build failed")
            ev["error"] = log[:2000]
            raise RuntimeError(log)
        try:
            out = _load(rep["path"], name, a.get("is_python_module", True) is not False)
        except BaseException as e:
            ev["error"] = f"built, but loading failed: {type(e).__name__}: {e}"[:600]
            raise
        ev["ok"] = True
        return out

    build.__name__ = orig.__name__
    build.__doc__ = orig.__doc__
    build.__wrapped__ = orig  # type: ignore[attr-defined]
    return build


def install(ask: Callable[[dict], dict]) -> None:
    """Route ``load_inline``/``load`` through ``ask`` (a build request to the judge), and count
    CuPy's kernels from the moment the solution imports CuPy."""
    import torch.utils.cpp_extension as ce

    ce.load_inline = _through_judge(ce.load_inline, "load_inline", ask)
    ce.load = _through_judge(ce.load, "load", ask)
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport({"cupy": _count_cupy}))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patches[name](module)`` right after ``name`` is first imported.  CuPy's kernels are
    usually made at the solution's import time (``_k = cp.RawKernel(src, "f")`` at module level),
    so patching after the import would miss them; importing CuPy in every runner just in case
    would cost every check its import time."""

    def __init__(self, patches: dict[str, Callable[[Any], None]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.patches:
            return None
        sys.meta_path.remove(self)  # let the other finders find it
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, patch = spec.loader, self.patches[name]

        class _Patching(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                try:
                    patch(module)
                except Exception:  # noqa: BLE001 - an unknown CuPy layout: its calls go uncounted
                    pass

        spec.loader = _Patching()
        return spec


def _count_cupy(cp: Any) -> None:
    """CuPy's kernel objects as subclasses that count their launches: ``RawKernel``,
    ``ElementwiseKernel``, ``ReductionKernel`` by their name, and the functions that
    ``RawModule.get_function`` returns.  (They are C types: their ``__call__`` cannot be patched
    in place, but they can be subclassed.)"""
    for cls_name in ("RawKernel", "ElementwiseKernel", "ReductionKernel"):
        base = getattr(cp, cls_name, None)
        if not isinstance(base, type):
            continue

        def __call__(self: Any, *args: Any, _base: type = base, **kwargs: Any) -> Any:
            if _counting:
                calls[f"cupy.{getattr(self, 'name', type(self).__name__)}"] += 1
            return _base.__call__(self, *args, **kwargs)

        try:
            setattr(cp, cls_name, type(cls_name, (base,), {"__call__": __call__, "__module__": base.__module__}))
        except TypeError:  # a final type
            continue
    module = getattr(cp, "RawModule", None)
    if isinstance(module, type):
        def get_function(self: Any, name: str, _base: type = module) -> Any:
            return counted(_base.get_function(self, name), f"cupy.{name}")

        try:
            cp.RawModule = type("RawModule", (module,), {"get_function": get_function,
                                                         "__module__": module.__module__})
        except TypeError:
            pass


def count_kernel_languages() -> None:
    """Count Triton kernel launches (after the solution is imported: only if it uses Triton)."""
    jit = sys.modules.get("triton.runtime.jit")
    cls = getattr(jit, "JITFunction", None) if jit is not None else None
    if cls is not None and not getattr(cls.run, "__wrapped__", None):
        orig = cls.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _counting:
                calls[f"triton.{getattr(self, '__name__', 'kernel')}"] += 1
            return orig(self, *args, **kwargs)

        run.__wrapped__ = orig  # type: ignore[attr-defined]
        cls.run = run


def report() -> dict:
    return {"extensions": list(events), "custom_calls": dict(calls)}
