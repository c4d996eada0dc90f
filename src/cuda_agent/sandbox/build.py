"""Build a solution's ``kernels/`` into one torch extension, through a content-addressed cache.

Layout of a solution's sources (what a source and a header are: sources.py, shared with the
static rules; ``kernels/`` at any depth):
  kernels/**.cu              CUDA kernels + ``extern "C"`` launchers, compiled by nvcc, no torch headers
  kernels/**.cpp|.cc|.cxx    plain C++ kernels (CPU backend), compiled by the C++ compiler, no torch headers
  kernels/**_binding.cpp     op registration against the fixed header ``cuda_agent_binding.h``
  kernels/**.c               refused (not compiled), with a message saying so
  every other file           headers and anything an ``#include`` may name: in every object's key

Every object file is stored under ``<cache>/obj/<key>.o`` where the key hashes the source,
every non-source file under kernels/ (and any source that some file includes), the flags, the
compiler version, the torch version and the GPU arch; the fixed
runtime is one such object, so it is compiled once per machine.  Missing objects and the
link are driven by ninja.  The linked library is content-addressed too, so an unchanged
solution costs one hash and no compiler call.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cache import cache_root
from .process import kill_tree
from .results import BuildResult
from .sources import REFUSED_SUFFIXES, included_names, is_binding, is_source, kernel_sources, key_files

INFRA_DIR = Path(__file__).parent / "infra"
EXT_NAME = "cuda_agent_ext"


def _sha(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:24]


def _version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


@dataclass(frozen=True)
class Toolchain:
    """Compilers and flags for one device kind; ``key`` goes into every cache key."""

    device: str
    cxx: str
    nvcc: str | None
    arch: str | None
    torch_flags: tuple[str, ...]
    plain_flags: tuple[str, ...]
    nvcc_flags: tuple[str, ...]
    link_flags: tuple[str, ...]
    runtime_cuda: bool
    key: str = field(default="")


def _cuda_home() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and Path(home, "bin", "nvcc").exists():
        return home
    try:
        from torch.utils.cpp_extension import CUDA_HOME

        if CUDA_HOME and Path(CUDA_HOME, "bin", "nvcc").exists():
            return CUDA_HOME
    except ImportError:
        pass
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return "/usr/local/cuda"
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = Path(nvcc).resolve().parent.parent
        if (home / "include" / "cuda_runtime_api.h").exists():
            return str(home)
    return None


def _gpu_arch() -> str:
    env = os.environ.get("CUDA_AGENT_ARCH")  # e.g. "90", "90a", "80"
    if env:
        return env
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{major}{minor}"
    except Exception:
        pass
    return "90"


def _nvidia_pkg_dirs(name: str) -> tuple[str | None, str | None]:
    """include/lib of a pip ``nvidia-<name>`` package (e.g. cudnn), if installed."""
    try:
        import importlib.util

        spec = importlib.util.find_spec(f"nvidia.{name}")
        if spec and spec.submodule_search_locations:
            base = Path(list(spec.submodule_search_locations)[0])
            inc, lib = base / "include", base / "lib"
            return (str(inc) if inc.is_dir() else None, str(lib) if lib.is_dir() else None)
    except Exception:
        pass
    return None, None


@functools.lru_cache(maxsize=4)
def toolchain(device: str) -> Toolchain:
    import torch
    from torch.utils import cpp_extension as ce

    cxx = os.environ.get("CXX", "c++")
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    tinc = ce.include_paths()
    tlib = ce.library_paths()[0]
    common = ["-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    torch_flags = ["-O2", *common, *[f for p in tinc for f in ("-isystem", p)], f"-I{INFRA_DIR}",
                   "-Wno-unused-parameter"]
    plain_flags = ["-O3", *common, "-fopenmp"]
    if platform.machine() in ("x86_64", "AMD64"):
        plain_flags.append("-march=native")
    link = ["-shared", f"-L{tlib}", f"-Wl,-rpath,{tlib}", "-lc10", "-ltorch_cpu", "-ltorch", "-fopenmp"]
    nvcc = arch = None
    nvcc_flags: list[str] = []
    runtime_cuda = False
    if device == "cuda":
        home = _cuda_home()
        if not home:
            raise RuntimeError("no CUDA toolkit found: set CUDA_HOME or put nvcc on PATH")
        nvcc = str(Path(home, "bin", "nvcc"))
        arch = _gpu_arch()
        num = re.sub(r"\D", "", arch)
        nvcc_flags = ["-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-lineinfo", "--expt-relaxed-constexpr",
                      f"-gencode=arch=compute_{num},code=sm_{arch}", "-DCUDA_AGENT_CUDA"]
        torch_flags.append("-DCUDA_AGENT_CUDA")
        cuinc = str(Path(home, "include"))
        culib = str(Path(home, "lib64"))
        runtime_cuda = bool(torch.version.cuda) and Path(tinc[0], "c10", "cuda", "CUDAStream.h").exists()
        torch_flags += ["-isystem", cuinc]
        plain_flags += ["-isystem", cuinc]
        link += [f"-L{culib}", f"-Wl,-rpath,{culib}", "-lcudart"]
        if any(Path(culib).glob("libcublas.so*")):
            link.append("-lcublas")
        dnn_inc, dnn_lib = _nvidia_pkg_dirs("cudnn")
        if dnn_inc and dnn_lib:
            torch_flags += ["-isystem", dnn_inc]
            plain_flags += ["-isystem", dnn_inc]
            nvcc_flags += ["-isystem", dnn_inc]
            link += [f"-L{dnn_lib}", f"-Wl,-rpath,{dnn_lib}", "-l:libcudnn.so.9"] if any(
                Path(dnn_lib).glob("libcudnn.so.9*")) else []
        if runtime_cuda:
            link += ["-lc10_cuda", "-ltorch_cuda"]
            torch_flags.append("-DCUDA_AGENT_CUDA_RUNTIME")
    cpu = ""
    try:
        cpu = next((l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")), "")
    except OSError:
        pass
    key = _sha(device, torch.__version__, _version([cxx, "--version"]),
               _version([nvcc, "--version"]) if nvcc else "", str(arch), cpu,
               *torch_flags, *plain_flags, *nvcc_flags, *link)
    return Toolchain(device, cxx, nvcc, arch, tuple(torch_flags), tuple(plain_flags), tuple(nvcc_flags),
                     tuple(link), runtime_cuda, key)


# --- diagnostics ------------------------------------------------------------------------

_ERR = re.compile(r"^(?P<loc>[^\s:][^:]*?(?::\d+(?::\d+)?|\(\d+\)))\s*:\s*(?P<kind>fatal error|error)\b.*$")
_LINK_ERR = re.compile(r"(undefined reference|multiple definition|cannot find -l|ld returned)")


def trim_log(log: str, root: Path | None = None, max_errors: int = 8, max_chars: int = 4000) -> str:
    """Keep what a reader needs: the first errors with file:line and two lines of context,
    paths relative to the solution, no template back-traces or ninja chatter."""
    if root is not None:
        log = log.replace(str(root.resolve()) + "/", "").replace(str(root) + "/", "")
    lines = log.splitlines()
    out: list[str] = []
    n = 0
    for i, line in enumerate(lines):
        if _ERR.match(line.strip()) or _LINK_ERR.search(line):
            if n >= max_errors:
                out.append(f"... ({sum(1 for l in lines[i:] if _ERR.match(l.strip()))} more errors)")
                break
            n += 1
            out.append(line.strip())
            if line.lstrip().startswith("/"):  # error inside a system header: name the user's line
                here = next((l.strip() for l in lines[max(0, i - 60):i + 60]
                             if "required from here" in l and not l.lstrip().startswith("/")), None)
                if here:
                    out.append("    " + here)
            for ctx in lines[i + 1:i + 3]:
                if _ERR.match(ctx.strip()) or _LINK_ERR.search(ctx) or ctx.startswith(("[", "ninja", "FAILED")):
                    break
                if ctx.strip() and "required from" not in ctx and "In instantiation" not in ctx:
                    out.append("    " + ctx.strip())
    if not out:  # no recognisable error line: keep the tail
        out = [l for l in lines if l.strip() and not l.startswith("[")][-30:]
    text = "\n".join(out)
    return text if len(text) <= max_chars else text[:max_chars] + "\n... (truncated)"


# --- the build --------------------------------------------------------------------------

@dataclass
class _Obj:
    src: Path
    rule: str
    key: str
    label: str


def _ninja() -> str:
    exe = shutil.which("ninja")
    if exe:
        return exe
    try:
        import ninja

        return str(Path(ninja.BIN_DIR) / "ninja")
    except ImportError:
        raise RuntimeError("ninja is not installed: pip install ninja") from None


def _q(p: str | Path) -> str:
    return str(p).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _deps(kdir: Path, files: list[Path]) -> bytes:
    """What every object's key holds besides its own source: each non-source file under kernels/
    and each source that some file includes (by name and content)."""
    included = included_names(files)
    return b"".join(p.relative_to(kdir).as_posix().encode() + b"\0" + p.read_bytes() for p in files
                    if not is_source(p) or p.name in included)


def build(kernels_dir: str | Path, device: str = "cuda", *, timeout: float = 300.0,
          jobs: int | None = None) -> BuildResult:
    """Compile ``kernels_dir`` into one extension library; never raises for bad sources."""
    t0 = time.perf_counter()
    kdir = Path(kernels_dir)
    srcs = kernel_sources(kdir)
    refusal = _refusal(kdir, srcs, device)
    if refusal:
        return BuildResult(ok=False, log=refusal)
    try:
        tc = toolchain(device)
    except Exception as e:
        return BuildResult(ok=False, log=f"toolchain: {e}")
    objs = _objects(kdir, srcs, tc)
    if isinstance(objs, str):
        return BuildResult(ok=False, log=objs)

    cache = cache_root() / "build"
    (cache / "obj").mkdir(parents=True, exist_ok=True)
    lib = cache / "lib" / _sha(tc.key, *[o.key for o in objs]) / f"{EXT_NAME}.so"
    cached = [o.label for o in objs if (cache / "obj" / f"{o.key}.o").exists()]
    if lib.exists():
        return BuildResult(ok=True, so_path=str(lib), seconds=time.perf_counter() - t0, cached=cached)

    todo = [o for o in objs if not (cache / "obj" / f"{o.key}.o").exists()]
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    try:
        tmp_lib = _write_ninja_file(tmp, tc, kdir, objs, todo, cache)
        try:
            ran = _run_ninja(tmp, jobs, timeout)
        except OSError as e:
            return BuildResult(ok=False, log=f"cannot run ninja: {e}", seconds=time.perf_counter() - t0)
        if ran is None:
            return BuildResult(ok=False, log=f"build timed out after {timeout:.0f} s; the compiler was killed "
                                             f"(does a source never finish compiling: endless template or "
                                             f"constexpr recursion, an #include of a pipe or device?)",
                               seconds=time.perf_counter() - t0, cached=cached)
        returncode, out_text = ran
        # keep every object that did compile, even when another failed or the link failed
        for o in todo:
            if (tmp / f"{o.key}.o").exists():
                os.replace(tmp / f"{o.key}.o", cache / "obj" / f"{o.key}.o")
        if returncode != 0 or not tmp_lib.exists():
            return BuildResult(ok=False, log=trim_log(out_text, kdir), seconds=time.perf_counter() - t0,
                               compiled=[o.label for o in todo], cached=cached)
        lib.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp_lib, lib)
        return BuildResult(ok=True, so_path=str(lib), seconds=time.perf_counter() - t0,
                           compiled=[o.label for o in todo], cached=cached)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _refusal(kdir: Path, srcs: list[Path], device: str) -> str | None:
    """Why these sources cannot make a workspace extension for ``device`` (None: they can)."""
    if not srcs:
        return f"no sources in {kdir} (expected kernels/*.cu, *.cpp and *_binding.cpp)"
    refused = [s for s in srcs if s.suffix in REFUSED_SUFFIXES]
    if refused:
        names = ", ".join(f"kernels/{s.relative_to(kdir).as_posix()}" for s in refused)
        return f"{names}: C sources are not built; rename to .cpp (compiled as C++)"
    if device == "cpu" and any(s.suffix == ".cu" for s in srcs):
        return "CUDA sources (.cu) cannot be built for --device cpu; use kernels/*.cpp for CPU kernels"
    if not any(is_binding(s) for s in srcs):
        return "no *_binding.cpp: register your ops with CUDA_AGENT_OPS(m) in kernels/<name>_binding.cpp"
    return None


def _objects(kdir: Path, srcs: list[Path], tc: Toolchain) -> list[_Obj] | str:
    """One object per source plus the runtime's, each keyed by the toolchain, its rule and
    flags, its text, every header it may include and our own infrastructure (or why a file
    could not be read)."""
    try:
        deps = _deps(kdir, key_files(kdir))
    except OSError as e:
        return f"cannot read kernels/: {e}"
    infra = b"".join(p.read_bytes() for p in sorted(INFRA_DIR.iterdir()))
    objs: list[_Obj] = []
    for s in srcs:
        if s.suffix == ".cu":
            rule, flags = "nvcc", tc.nvcc_flags
        elif is_binding(s):
            rule, flags = "cxx_torch", tc.torch_flags
        else:
            rule, flags = "cxx_plain", tc.plain_flags
        rel = s.relative_to(kdir).as_posix()
        try:
            text = s.read_bytes()
        except OSError as e:
            return f"cannot read kernels/{rel}: {e.strerror or e}"
        objs.append(_Obj(s, rule, _sha(tc.key, rule, *flags, rel, text, deps, infra), rel))
    rt_rule = "cxx_torch_cuda_rt" if tc.runtime_cuda else "cxx_torch"
    rt_src = INFRA_DIR / "cuda_agent_runtime.cpp"
    objs.append(_Obj(rt_src, rt_rule, _sha(tc.key, rt_rule, infra), rt_src.name))
    return objs


def _write_ninja_file(tmp: Path, tc: Toolchain, kdir: Path, objs: list[_Obj], todo: list[_Obj],
                      cache: Path) -> Path:
    """``tmp/build.ninja``: compile ``todo`` into ``tmp``, link them with the cached objects.
    Returns the library it links."""
    inc = f"-I{_q(kdir.resolve())}"
    lines = [
        f"rule cxx_torch\n  command = {tc.cxx} {' '.join(map(_q, tc.torch_flags))} {inc} -c $in -o $out",
        f"rule cxx_torch_cuda_rt\n  command = {tc.cxx} {' '.join(map(_q, tc.torch_flags))} -c $in -o $out",
        f"rule cxx_plain\n  command = {tc.cxx} {' '.join(map(_q, tc.plain_flags))} {inc} -c $in -o $out",
        f"rule link\n  command = {tc.cxx} $in {' '.join(map(_q, tc.link_flags))} -o $out",
    ]
    if tc.nvcc:
        lines.append(f"rule nvcc\n  command = {tc.nvcc} {' '.join(map(_q, tc.nvcc_flags))} {inc} "
                     f"-ccbin {tc.cxx} -c $in -o $out")
    objpaths = []
    for o in objs:
        if o in todo:
            out = tmp / f"{o.key}.o"
            lines.append(f"build {_q(out)}: {o.rule} {_q(o.src.resolve())}")
        else:
            out = cache / "obj" / f"{o.key}.o"
        objpaths.append(out)
    tmp_lib = tmp / f"{EXT_NAME}.so"
    lines.append(f"build {_q(tmp_lib)}: link {' '.join(_q(p) for p in objpaths)}")
    (tmp / "build.ninja").write_text("\n".join(lines) + "\n")
    return tmp_lib


def _run_ninja(tmp: Path, jobs: int | None, timeout: float) -> tuple[int, str] | None:
    """(exit code, output) of ninja in ``tmp``; None when it ran past ``timeout`` (then the
    whole tree is killed: ninja starts every compiler in a process group of its own)."""
    cmd = [_ninja(), "-C", str(tmp), "-j", str(jobs or max(2, os.cpu_count() or 2))]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    try:
        out_text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        return None
    return proc.returncode, out_text
