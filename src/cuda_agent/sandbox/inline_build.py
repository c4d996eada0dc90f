"""Single-file solutions' extensions (``torch.utils.cpp_extension.load_inline`` / ``load``),
built on the trusted side and reused across checks.

A KernelBench-style ``model_new.py`` builds its kernels when it is imported.  Inside the
runner that call is intercepted (``inline_hook.py``) and sent to the judge as a *build
request*: the sources, functions and flags, nothing else.  The judge answers it here:

- the key is the sha256 of everything that determines the library (the request itself, the
  contents of its include directories, torch/CUDA/Python versions, the GPU architecture), so
  an edited header or flag is a new build and an unchanged source is a cache hit (~0 s
  instead of the 20-80 s that torch's JIT build of ``torch/extension.h`` costs);
- the build itself runs torch's own ``load_inline``/``load`` in a contained process (the
  sandbox's launcher: no network, read-only tree, only its staging directory writable), since
  the flags are the candidate's: a ``-fplugin`` or ``-B`` cannot touch the judge;
- only this side writes the cache (``<cache>/inline/<key>``); the runner, which cannot see
  the cache, gets a copy of the library in its job directory;
- a compiler failure is cached too (the same source fails the same way), a timeout is not;
- a cold build skips most of its C++ front end: ``torch/extension.h`` (what every extension
  includes first, and what most of a C++ build's seconds go to) is precompiled once per toolchain
  and flag set into ``<cache>/pch`` and offered to the compiler read-only (``_pch``); gcc checks
  that it matches the compile and falls back to the header otherwise.

Run as ``python -m cuda_agent.sandbox.inline_build REQUEST.json OUT_DIR`` it is that builder.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable

from .cache import cache_root

MAX_FILES = 256
MAX_BYTES = 16 << 20
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
STRINGS = ("cpp_sources", "cuda_sources", "extra_cflags", "extra_cuda_cflags", "extra_ldflags")
FLAGS = ("with_cuda", "is_python_module", "with_pytorch_error_handling", "is_standalone", "no_implicit_headers")
LIB_SUFFIX = ".so"


class BadRequest(ValueError):
    """A build request that is not of the expected form (forged, or an API we do not know)."""


def _strings(v, what: str) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return v
    raise BadRequest(f"{what} must be a string or a list of strings")


def normalize(req: dict) -> dict:
    """The request in one canonical form (what the key is computed over); raises BadRequest."""
    if not isinstance(req, dict):
        raise BadRequest("not an object")
    name = req.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadRequest(f"extension name {name!r} is not an identifier")
    out: dict = {"api": req.get("api"), "name": name}
    if out["api"] not in ("load_inline", "load"):
        raise BadRequest(f"unknown api {out['api']!r}")
    for k in STRINGS:
        out[k] = _strings(req.get(k), k)
    fns = req.get("functions")
    if fns is not None and not (isinstance(fns, str) or (isinstance(fns, list) and all(isinstance(x, str) for x in fns))
                                or (isinstance(fns, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                                  for k, v in fns.items()))):
        raise BadRequest("functions must be a string, a list of strings or a dict of strings")
    out["functions"] = fns
    for k in FLAGS:
        v = req.get(k)
        if v is not None and not isinstance(v, bool):
            raise BadRequest(f"{k} must be a boolean")
        out[k] = v
    files = req.get("files") or {}
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise BadRequest("files must map relative paths to texts")
    if len(files) > MAX_FILES or sum(len(v) for v in files.values()) > MAX_BYTES:
        raise BadRequest(f"more than {MAX_FILES} files or {MAX_BYTES >> 20} MB of sources")
    for k in files:
        if k.startswith("/") or ".." in Path(k).parts:
            raise BadRequest(f"file path {k!r} is not relative")
    out["files"] = dict(sorted(files.items()))
    out["sources"] = _strings(req.get("sources"), "sources")  # load(): paths relative to files/
    out["include_dirs"] = _strings(req.get("include_dirs"), "include_dirs")  # relative to files/
    out["arch_list"] = req.get("arch_list") if isinstance(req.get("arch_list"), str) else None
    if out["is_standalone"]:
        raise BadRequest("is_standalone executables are not supported (build a Python module or a torch.ops library)")
    return out


def _toolchain_tag(device: str) -> dict:
    import platform

    import torch

    tag = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
           "machine": platform.machine(), "device": device}
    if device == "cuda":
        sm = _pool_arch()
        if sm is None and torch.cuda.is_available():
            sm = "%d.%d" % torch.cuda.get_device_capability(torch.cuda.current_device())
        if sm:
            tag["sm"] = sm
    return tag


def _pool_arch() -> str | None:
    """The pool's ``CUDA_AGENT_ARCH`` (``90``, ``90a``) as torch writes an architecture (``9.0``,
    ``9.0a``): a pool builder, which makes no CUDA context, builds for the target of the slots
    and under the same key they look up."""
    env = os.environ.get("CUDA_AGENT_ARCH", "")
    digits, suffix = (env[:-1], "a") if env.endswith("a") else (env, "")
    return f"{digits[:-1]}.{digits[-1]}{suffix}" if len(digits) >= 2 and digits.isdigit() else None


def key(req: dict, device: str) -> str:
    blob = json.dumps({"request": req, "toolchain": _toolchain_tag(device)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def server(device: str, job_dir: Path, timeout: float,
           aside: Callable[[], AbstractContextManager] | None = None) -> Callable[[dict], dict]:
    """The runner's ``on_build``: its build requests answered into ``job_dir``.  A build not in
    the cache yet runs inside ``aside()`` (the check lets its device lock go meanwhile: a cold
    build is a minute of CPU work that no other judge's timing on the device need wait for)."""
    def answer(req: dict) -> dict:
        if aside is None or cached(req, device):
            return serve(req, device, job_dir, timeout)
        with aside():
            return serve(req, device, job_dir, timeout)
    return answer


def cached(req: dict, device: str) -> bool:
    """Whether ``req`` would be answered from the cache (a refused request is answered at once too)."""
    try:
        return (_entry(normalize(req), device) / "result.json").is_file()
    except Exception:  # noqa: BLE001 - a request serve() refuses: answered at once, nothing built
        return True


def _entry(req: dict, device: str) -> Path:
    """The cache directory of a (normalized) request."""
    return cache_root() / "inline" / key(req, device)


def server_for(job_file: Path, timeout: float) -> Callable[[dict], dict]:
    """``server`` for the job in ``job_file`` (its device, its directory)."""
    device = json.loads(Path(job_file).read_text()).get("device", "cuda")
    return server(device, Path(job_file).parent, timeout)


def serve(req: dict, device: str, job_dir: Path, timeout: float = 600.0) -> dict:
    """Answer one build request: ``{"ok": True, "path": library copied into job_dir, "cached",
    "seconds"}`` or ``{"ok": False, "log": ...}``.  Never raises."""
    t0 = time.perf_counter()
    try:
        req = normalize(req)
    except BadRequest as e:
        return {"ok": False, "log": f"the build request was refused: {e}", "seconds": 0.0}
    try:
        entry = _entry(req, device)
        k, root = entry.name, entry.parent
        root.mkdir(parents=True, exist_ok=True)
        with open(root / f"{k}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two checks of the same source build it once
            cached = (entry / "result.json").is_file()
            if not cached:
                _build(req, device, entry, timeout)
        res = json.loads((entry / "result.json").read_text())
        res["cached"] = cached
        if res.get("ok"):
            dst = Path(job_dir) / "ext" / k
            dst.mkdir(parents=True, exist_ok=True)
            lib = dst / res["library"]
            shutil.copy2(entry / res["library"], lib)
            res["path"] = str(lib)
        res["seconds"] = round(time.perf_counter() - t0, 3)
        res["key"] = k
        return res
    except Exception as e:  # noqa: BLE001 - a failing build is a verdict, never a judge crash
        return {"ok": False, "log": f"the build could not run: {type(e).__name__}: {e}",
                "seconds": round(time.perf_counter() - t0, 3)}


def _build(req: dict, device: str, entry: Path, timeout: float) -> None:
    """Build in a contained staging job; move the library (or the failure) into ``entry``."""
    from .process import job_root, run_contained

    t0 = time.perf_counter()
    pch = _pch(req, device, timeout)
    pch_s = time.perf_counter() - t0
    job = job_root("cuda-agent-inline-")
    try:
        (job / "request.json").write_text(json.dumps(req))
        (job / "job.json").write_text(json.dumps({"expose_ro": [str(pch)] if pch else []}))
        env = {"MAX_JOBS": str(os.cpu_count() or 1), "PYTHONDONTWRITEBYTECODE": "1"}
        if pch:
            env[PCH_ENV] = str(pch)
        arch = req.get("arch_list") or _toolchain_tag(device).get("sm")
        if arch:
            env["TORCH_CUDA_ARCH_LIST"] = arch
        code, log = run_contained([sys.executable, "-m", __name__, str(job / "request.json"), str(job / "out")],
                                  job / "job.json", timeout=timeout, env=env)
        tmp = entry.with_name(entry.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        lib = job / "out" / (req["name"] + LIB_SUFFIX)
        if code == 0 and lib.is_file():
            shutil.copy2(lib, tmp / lib.name)
            res = {"ok": True, "library": lib.name, "build_seconds": None,
                   "pch": _pch_verdict(pch, req, log)}
            if pch_s > 1.0:  # this build precompiled the header (once per toolchain and flag set)
                res["pch_seconds"] = round(pch_s, 1)
        elif code is None:  # a timeout is not the source's fault every time: not cached
            shutil.rmtree(tmp, ignore_errors=True)
            raise TimeoutError(f"the build did not finish within {timeout:.0f} s")
        else:
            res = {"ok": False, "log": _trim(log.replace(str(job / "out") + "/", ""), req["name"])}
        (tmp / "result.json").write_text(json.dumps(res))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    finally:
        shutil.rmtree(job, ignore_errors=True)


def _trim(log: str, name: str, limit: int = 6000) -> str:
    """The compiler's errors first: a long log is cut in its middle."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"\berror\b", ln) and "Error building extension" not in ln]
    text = "\n".join(errors[:40]) if errors else "\n".join(lines)
    if len(text) > limit:
        text = text[: limit // 2] + "\n...\n" + text[-limit // 2:]
    return f"Error building extension '{name}':\n{text}"


# --- a precompiled torch/extension.h ----------------------------------------------------------

PCH_ENV = "CUDA_AGENT_PCH_DIR"
PCH_TIMEOUT = 300.0
# the candidate's C++ flags under which the shared header is compiled too (gcc refuses a PCH
# built under other code-generation flags): common optimisation, standard and warning flags;
# any other flag (a define, an include path, a plugin) builds without the PCH
_PCH_SAFE = re.compile(r"^-(O[0-3sgz]?|Ofast|std=(c|gnu)\+\+\w+|ffast-math|fno-math-errno|funroll-loops|fopenmp"
                       r"|march=native|mtune=native|DNDEBUG|g[0-3]?|w|W[A-Za-z0-9=-]*)$")


def _pch(req: dict, device: str, timeout: float) -> Path | None:
    """The directory holding ``torch/extension.h.gch`` for this request's C++ compile (built now
    when missing, in a contained job; only this side writes it), or None: see ``pch_place``;
    also when another build is making this variant right now, or it failed before (``failed``
    marks it, so that nobody waits for it again)."""
    place = pch_place(req, device)
    if place is None:
        return None
    root, header = place.parent, place / "torch" / "extension.h.gch"
    if header.is_file():
        return place
    if (root / "failed").exists():
        return None
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # being built by another check: this one builds without it
        if not header.is_file():
            _build_pch(_pch_command(*_pch_variant(req, device)), root, min(timeout, PCH_TIMEOUT))
    return place if header.is_file() else None


def pch_place(req: dict, device: str) -> Path | None:
    """Where the precompiled header for this (normalized) request lives, ``<cache>/pch/<variant>/
    include``, or None when none applies: no C++ source includes torch/extension.h, a flag
    outside ``_PCH_SAFE``, or a compiler that is not gcc."""
    includes = (req["api"] == "load_inline" and req["cpp_sources"] and not req.get("no_implicit_headers")) or \
        any("torch/extension.h" in t for t in [*req["cpp_sources"], *req["files"].values()])
    if not includes or not all(_PCH_SAFE.match(f.strip()) for f in req["extra_cflags"]):
        return None
    cmd = _pch_command(*_pch_variant(req, device))
    if cmd is None:
        return None
    digest = hashlib.sha256(json.dumps([cmd, _compiler_id(cmd[0]), _toolchain_tag(device)]).encode()).hexdigest()[:24]
    return cache_root() / "pch" / digest / "include"


def _pch_variant(req: dict, device: str) -> tuple[tuple[str, ...], str]:
    """(the C++ flags, the include set: ``cuda`` when the extension builds with CUDA on a GPU)."""
    cuda = req["with_cuda"] if req["with_cuda"] is not None else bool(req["cuda_sources"]) or any(
        s.endswith((".cu", ".cuh")) for s in req["sources"])
    return tuple(f.strip() for f in req["extra_cflags"]), "cuda" if cuda and device == "cuda" else "cpu"


def _pch_verdict(pch: Path | None, req: dict, log: str) -> str | None:
    """What became of the offered header: gcc says (``-Winvalid-pch``) when it does not use it."""
    if pch is None:
        return None
    if "extension.h.gch" in log:
        return "not used"
    return "offered" if "-w" in (f.strip() for f in req["extra_cflags"]) else "used"


@functools.lru_cache(maxsize=None)
def _pch_command(flags: tuple[str, ...], device_type: str) -> tuple[str, ...] | None:
    """The compiler command that precompiles torch/extension.h as torch's ninja file compiles an
    extension's C++ (same defines, include directories and flags, in the same order; the output
    ``OUT``), or None where the compiler is not gcc."""
    import sysconfig

    import torch.utils.cpp_extension as ce

    try:
        cxx = ce.get_cxx_compiler()
        if not ce.check_compiler_is_gcc(cxx):
            return None
        system = [*ce.include_paths(device_type), sysconfig.get_path("include", scheme="posix_prefix")]
        header = os.path.join(ce.include_paths("cpu")[0], "torch", "extension.h")
    except Exception:  # noqa: BLE001 - no PCH is never an error
        return None
    cmd = [cxx, "-x", "c++-header", header, "-o", "OUT", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    for d in system:
        cmd += ["-isystem", d]
    return (*cmd, "-fPIC", "-std=c++20", *flags, "-w")


@functools.lru_cache(maxsize=None)
def _compiler_id(cxx: str) -> str:
    """The compiler's ``--version`` line: a new compiler is a new PCH variant."""
    import subprocess

    return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout.split("\n")[0]


def _build_pch(cmd: tuple[str, ...], root: Path, timeout: float) -> None:
    """Run ``cmd`` contained in a job under ``root`` (on disk: the header is ~800 MB), then move
    its output into ``root/include/torch`` (or mark the variant ``failed``)."""
    from .process import run_contained

    job = Path(tempfile.mkdtemp(prefix="job-", dir=root))
    try:
        (job / "job.json").write_text("{}")
        out = job / "out" / "extension.h.gch"
        out.parent.mkdir()
        argv = [str(out) if w == "OUT" else w for w in cmd]
        code, log = run_contained(argv, job / "job.json", timeout=timeout)
        if code == 0 and out.is_file():
            place = root / "include" / "torch"
            place.mkdir(parents=True, exist_ok=True)
            # the header itself beside its PCH: gcc resolves a second #include of it (most sources
            # include it after load_inline's own) in the directory where it found the PCH
            if not (place / "extension.h").exists():
                os.symlink(cmd[cmd.index("c++-header") + 1], place / "extension.h")
            os.replace(out, place / "extension.h.gch")
        elif code is not None:  # a timeout may be a busy machine: tried again next time
            (root / "failed").write_text(log[-4000:])
    finally:
        shutil.rmtree(job, ignore_errors=True)


# --- the builder (runs contained) -----------------------------------------------------------

def _builder(req_file: str, out_dir: str) -> int:
    import torch
    import torch.utils.cpp_extension as ce

    req = json.loads(Path(req_file).read_text())
    out = Path(out_dir)
    src = out / "files"
    for rel, text in req["files"].items():
        p = src / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    out.mkdir(parents=True, exist_ok=True)
    # build only: the library is loaded by the runner, never in a process of the judge's side
    ce._import_module_from_library = lambda name, path, is_python_module: os.path.join(path, name + LIB_SUFFIX)
    torch.ops.load_library = lambda path: None
    pch = os.environ.get(PCH_ENV)  # first among the -I directories after the candidate's own
    cflags = ([f"-I{pch}", "-Winvalid-pch"] if pch else []) + req["extra_cflags"]
    common = dict(extra_cflags=cflags or None, extra_cuda_cflags=req["extra_cuda_cflags"] or None,
                  extra_ldflags=req["extra_ldflags"] or None,
                  extra_include_paths=[str(src / d) for d in req["include_dirs"]] or None,
                  build_directory=str(out), verbose=True, with_cuda=req["with_cuda"])
    flags = {k: req[k] for k in ("is_python_module", "with_pytorch_error_handling", "no_implicit_headers",
                                 "is_standalone") if req.get(k) is not None}
    if req["api"] == "load_inline":
        flags.pop("is_standalone", None)
        ce.load_inline(req["name"], req["cpp_sources"], req["cuda_sources"] or None, functions=req["functions"],
                       **common, **flags)
    else:
        flags.pop("with_pytorch_error_handling", None)
        flags.pop("no_implicit_headers", None)
        ce.load(req["name"], [str(src / s) for s in req["sources"]], **common, **flags)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(_builder(sys.argv[1], sys.argv[2]))
    except BaseException as e:  # noqa: BLE001 - the log is the verdict
        if isinstance(e, SystemExit):
            raise
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
