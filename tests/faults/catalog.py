"""The faults, as data: how to make each faulty candidate, what verdict it must get, and what
must hold afterwards.  Shared by the tests (tests/faults/test_*.py) and the benchmark
(scripts/bench_faults.py), so both run exactly the same candidates.

CPU faults derive from examples/cpu_scaled_swish (C++ faults edit ``kernels/swish.cpp``, the
plain-C++ kernel the binding calls, so the torch-header binding object stays cached); GPU
faults derive from examples/cuda_axpby.  ``run_fault`` runs one through ``check()``, then
checks the good example and reports the time to the verdict and the time to recover.
"""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
CPU_EXAMPLE = ROOT / "examples" / "cpu_scaled_swish"
GPU_EXAMPLE = ROOT / "examples" / "cuda_axpby"


@dataclass
class Ctx:
    """What a fault's candidate was made with, for the checks after the verdict."""

    work: Path
    marker: str = field(default_factory=lambda: "cafault" + uuid.uuid4().hex[:8])
    server: "_Server | None" = None
    path: Path | None = None
    rss_before: int = 0


@dataclass
class Fault:
    name: str
    summary: str
    device: str
    make: Callable[[Ctx], Path]
    """Writes the candidate under ctx.work; returns the solution directory."""
    stages: tuple[str, ...] = ()
    """Verdict stages accepted; () = the check must pass (the fault must be harmless)."""
    text: str = ""
    """Regex the error must match (when a failure is expected)."""
    build_fails: bool = False
    options: dict = field(default_factory=dict)
    limits: dict = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    """Isolation features required (``netns``, ``pidns``, ``mntns``); skipped without them."""
    after: Callable[[Ctx, object, float], list[str]] | None = None
    """Extra checks once the verdict is in: (ctx, result, seconds) -> problems."""
    max_seconds: float | None = None


# --- making candidates ---------------------------------------------------------------------

def _copy(ctx: Ctx, example: Path) -> Path:
    d = ctx.work / "sol"
    shutil.copytree(example / "solution", d)
    return d


def cpu_kernel(ctx: Ctx, fault: str, includes: str = "") -> Path:
    """The CPU example with ``fault`` (C++ statements) run first in the kernel function."""
    d = _copy(ctx, CPU_EXAMPLE)
    f = d / "kernels" / "swish.cpp"
    src = f.read_text()
    head = "int64_t rows, int64_t cols) {"
    assert head in src
    f.write_text(includes + "\n" + src.replace(head, head + "\n" + fault + "\n", 1))
    return d


def cpu_forward(ctx: Ctx, fault: str) -> Path:
    """The CPU example with ``fault`` (Python statements, 8-space indent) run first in forward."""
    d = _copy(ctx, CPU_EXAMPLE)
    f = d / "model_new.py"
    src = f.read_text()
    ret = "        return ops.scaled_swish(x, self.scale)"
    assert ret in src
    f.write_text(src.replace(ret, fault.rstrip() + "\n" + ret))
    return d


def gpu_launcher(ctx: Ctx, fault: str, kernels: str = "", includes: str = "") -> Path:
    """The CUDA example with ``fault`` run first in the launcher (``s`` is the stream)."""
    d = _copy(ctx, GPU_EXAMPLE)
    f = d / "kernels" / "axpby.cu"
    src = f.read_text()
    head = "cudaStream_t s = (cudaStream_t)stream;"
    assert head in src
    marker = 'extern "C" int axpby_launch'
    src = src.replace(marker, kernels + "\n" + marker, 1).replace(head, head + "\n" + fault + "\n", 1)
    f.write_text(includes + "\n" + src)
    return d


# --- checks after the verdict --------------------------------------------------------------

def _procs_with(marker: str) -> list[str]:
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            comm = Path(f"/proc/{p}/comm").read_text().strip()
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if (marker in comm or marker in cmd) and state not in ("Z", "X"):
            out.append(f"{p}: {cmd[:120] or comm}")
    return out


def gone(marker_of: Callable[[Ctx], str], what: str, wait_s: float = 5.0):
    def check(ctx: Ctx, res, seconds: float) -> list[str]:
        marker = marker_of(ctx)
        deadline = time.time() + wait_s
        left = _procs_with(marker)
        while left and time.time() < deadline:
            time.sleep(0.1)
            left = _procs_with(marker)
        return [f"{what} still running after the check: {left[:3]}"] if left else []
    return check


def _no_connection(ctx: Ctx, res, seconds: float) -> list[str]:
    assert ctx.server is not None
    ctx.server.close()
    return [f"the candidate reached the TCP server on 127.0.0.1:{ctx.server.port} "
            f"({ctx.server.accepted} connection(s))"] if ctx.server.accepted else []


def _judge_memory_flat(ctx: Ctx, res, seconds: float) -> list[str]:
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - ctx.rss_before
    return [f"the judge's peak memory grew by {grown >> 20} MB while draining the output"] if grown > 512 << 20 \
        else []


def _all(*checks):
    def check(ctx: Ctx, res, seconds: float) -> list[str]:
        return [p for c in checks for p in c(ctx, res, seconds)]
    return check


class _Server:
    """A TCP server on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._t.join(timeout=2)
        self.sock.close()


def _network(ctx: Ctx) -> Path:
    ctx.server = _Server()
    return cpu_forward(ctx, f"""        import socket
        s = socket.create_connection(("127.0.0.1", {ctx.server.port}), timeout=3)
        s.sendall(b"the reference's outputs")
        s.close()""")


def _disk_fill(ctx: Ctx) -> Path:
    # the job directory (the cwd) is the one writable place on disk: the rest of the tree is read-only
    return cpu_forward(ctx, """        chunk = b"\\0" * (1 << 20)
        with open("fill.bin", "wb") as f:
            for _ in range(1024):
                f.write(chunk)""")


def _stdout(ctx: Ctx) -> Path:
    ctx.rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return cpu_kernel(ctx, """  static bool done = false;
  if (!done) {
    done = true;
    std::vector<char> buf(1 << 20, 'x');
    for (int i = 0; i < 10240; ++i) {  // 10 GiB
      size_t off = 0;
      while (off < buf.size()) {
        ssize_t n = write(1, buf.data() + off, buf.size() - off);
        if (n <= 0) break;
        off += (size_t)n;
      }
    }
  }""", "#include <unistd.h>\n#include <vector>")


def _never_ending_build(ctx: Ctx) -> Path:
    fifo = ctx.work / f"{ctx.marker}.fifo"
    os.mkfifo(fifo)  # no writer ever opens it: the compiler blocks opening the include
    return cpu_kernel(ctx, "", f'#include "{fifo}"')


def _background(ctx: Ctx) -> Path:
    return cpu_forward(ctx, f"""        import subprocess, sys
        if not getattr(ModelNew, "_daemon", None):
            ModelNew._daemon = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(600)", {ctx.marker!r}],
                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)""")


def _cache(ctx: Ctx) -> Path:
    from cuda_agent.sandbox.cache import cache_root

    from cuda_agent.sandbox.build import build

    root = cache_root()
    if not any(root.iterdir()):  # something to find: the example's build
        assert build(CPU_EXAMPLE / "solution" / "kernels", "cpu").ok
    return cpu_forward(ctx, f"""        import os
        seen = os.listdir({str(root)!r}) if os.path.isdir({str(root)!r}) else []  # gone with a private /tmp
        if seen:
            raise RuntimeError(f"build cache visible: {{sorted(seen)[:5]}}")
        try:
            open(os.path.join({str(root)!r}, "planted"), "w").close()
        except OSError:
            pass
        else:
            if not {str(root)!r}.startswith("/tmp/"):  # in a private /tmp it plants nothing real
                raise RuntimeError("build cache writable")""")


def _package(ctx: Ctx) -> Path:
    import cuda_agent

    pkg = Path(cuda_agent.__file__).parent
    return cpu_forward(ctx, f"""        import os, torch
        for d in ({str(pkg)!r}, os.path.dirname(torch.__file__)):
            p = os.path.join(d, "{ctx.marker}.py")
            try:
                open(p, "w").close()
            except OSError:
                continue
            os.unlink(p)
            raise RuntimeError(f"{{d}} is writable")""")


def _judge_hidden(ctx: Ctx) -> Path:
    me = os.getpid()
    cmd = Path(f"/proc/{me}/cmdline").read_bytes()
    return cpu_forward(ctx, f"""        import os
        try:
            theirs = open("/proc/{me}/cmdline", "rb").read()
        except OSError:
            theirs = b""
        if theirs == {cmd!r}:
            raise RuntimeError("the judge's process is visible (pid {me})")""")


GB = 1 << 30

CPU_FAULTS: list[Fault] = [
    Fault("py-infinite-loop", "while True: pass in forward", "cpu",
          lambda c: cpu_forward(c, "        while True:\n            pass"),
          ("timeout",), r"did not finish within 10 s", options={"verify_timeout": 10}),
    Fault("cpp-infinite-loop", "endless loop in the C++ kernel", "cpu",
          lambda c: cpu_kernel(c, "  volatile int spin = 1;\n  while (spin) {}"),
          ("timeout",), r"did not finish within 10 s", options={"verify_timeout": 10}),
    Fault("segfault", "null-pointer write in native code called by the binding", "cpu",
          lambda c: cpu_kernel(c, "  *(volatile int*)nullptr = 42;"),
          ("crash",), r"killed by SIGSEGV"),
    Fault("abort", "std::abort() in native code", "cpu",
          lambda c: cpu_kernel(c, "  std::abort();", "#include <cstdlib>"),
          ("crash",), r"killed by SIGABRT"),
    Fault("host-oom", "allocates and touches 6 GB against a 1.5 GB cap, then waits", "cpu",
          lambda c: cpu_kernel(c, """  for (int i = 0; i < 96; ++i) {  // 96 x 64 MB, never freed
    char* p = (char*)malloc(64 << 20);
    if (!p) break;
    memset(p, 1, 64 << 20);
  }
  for (;;) pause();""", "#include <cstdlib>\n#include <cstring>\n#include <unistd.h>"),
          ("memory",), r"host memory \d+ MB over the cap of 1536 MB", limits={"memory_bytes": 3 * GB // 2},
          options={"verify_timeout": 60}),
    Fault("fork-bomb", "doubles 8 times (256 processes) against a cap of 16, all waiting", "cpu",
          lambda c: cpu_kernel(c, f"""  for (int i = 0; i < 8; ++i)
    if (fork() < 0) break;
  prctl(PR_SET_NAME, "{c.marker}");
  for (;;) pause();""", "#include <unistd.h>\n#include <sys/prctl.h>"),
          ("processes",), r"more than 16 processes", limits={"processes": 16}, options={"verify_timeout": 60},
          after=gone(lambda c: c.marker, "a fork-bomb process")),
    Fault("stdout-10gb", "writes 10 GiB to stdout once, then computes the right answer", "cpu", _stdout,
          (), "", after=_judge_memory_flat, max_seconds=150, options={"verify_timeout": 140}),
    Fault("disk-fill", "writes a 1 GB file against a 64 MB file-size limit", "cpu", _disk_fill,
          ("forward",), r"File too large", limits={"file_size_bytes": 64 << 20}),
    Fault("never-ending-build", "#include of a FIFO nobody writes: the compiler blocks forever", "cpu",
          _never_ending_build, (), r"build timed out after 3 s", build_fails=True, options={"build_timeout": 3},
          after=gone(lambda c: str(c.work / "sol" / "kernels"), "a compiler")),
    Fault("network", "connects to a TCP server the test runs on 127.0.0.1", "cpu", _network,
          ("forward",), r"OSError|Errno|unreachable|refused", needs=("netns",), after=_no_connection),
    Fault("background-process", "leaves a setsid'd process running after forward", "cpu", _background,
          (), "", after=gone(lambda c: c.marker, "the candidate's background process")),
    Fault("read-build-cache", "lists and writes the evaluator's build cache", "cpu", _cache,
          (), "", needs=("mntns",)),
    Fault("write-package", "writes into the cuda_agent package and torch", "cpu", _package,
          (), "", needs=("mntns",)),
    Fault("see-the-judge", "reads the judge's /proc entry", "cpu", _judge_hidden,
          (), "", needs=("pidns",)),
]

GPU_FAULTS: list[Fault] = [
    Fault("gpu-infinite-loop", "a kernel that never ends", "cuda",
          lambda c: gpu_launcher(c, "  ca_spin<<<1, 32, 0, s>>>(1);",
                                 "__global__ void ca_spin(int go) { while (go) { __nanosleep(1000); } }"),
          ("timeout",), r"did not finish within 20 s", options={"verify_timeout": 20}),
    Fault("gpu-illegal-address", "a kernel writes through a wild pointer", "cuda",
          lambda c: gpu_launcher(c, "  ca_wild<<<1, 32, 0, s>>>((float*)0x10);",
                                 "__global__ void ca_wild(float* p) { p[threadIdx.x + (1 << 24)] = 1.f; }"),
          ("forward", "crash"), r"(?i)illegal memory access|illegal address"),
    Fault("gpu-device-assert", "a device-side assert fails", "cuda",
          lambda c: gpu_launcher(c, "  ca_assert<<<1, 32, 0, s>>>(0);",
                                 "__global__ void ca_assert(int v) { assert(v == 1); }", "#include <cassert>"),
          ("forward", "crash"), r"(?i)device-side assert"),
    Fault("gpu-oom", "cudaMalloc of 200 GB", "cuda",
          lambda c: gpu_launcher(c, """  void* big = nullptr;
  cudaError_t e = cudaMalloc(&big, (size_t)200 << 30);
  if (e != cudaSuccess) return (int)e;
  cudaFree(big);"""),
          ("forward",), r"(?i)out of memory"),
]

FAULTS: dict[str, Fault] = {f.name: f for f in CPU_FAULTS + GPU_FAULTS}


# --- running one -----------------------------------------------------------------------------

@dataclass
class Outcome:
    fault: str
    device: str
    verdict: str
    """``stage: first line of the error``, or ``passed``."""
    stage: str | None
    error: str | None
    seconds: float
    """From the start of the check to its verdict (building the candidate included)."""
    build_s: float | None
    recovery_s: float | None
    """From the verdict to the end of the next good check (None if it did not pass)."""
    recovered: bool
    problems: list[str]
    isolation: str = ""
    violations: list[str] = field(default_factory=list)
    """Rule ids the static and runtime checks flagged (besides the verdict)."""
    skipped: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def options(device: str, **kw):
    """CheckOptions for the fault suite: one input set, no timing/baselines (fast); keyword
    arguments the installed CheckOptions does not know are dropped."""
    from cuda_agent.sandbox.check import CheckOptions

    names = {f.name for f in dataclasses.fields(CheckOptions)}
    base = dict(device=device, rules="kernelbench", n_sets=1, timing=False, baselines=False,
                compile_baseline=False, extra_round=False, verify_timeout=60, build_timeout=300)
    base.update(kw)
    return CheckOptions(**{k: v for k, v in base.items() if k in names})


def missing_features(fault: Fault) -> str | None:
    from cuda_agent.sandbox.isolation import probe

    have = {f"{n}ns" for n in probe().namespaces}
    lack = [n for n in fault.needs if n not in have]
    if lack:
        return f"this platform cannot isolate ({', '.join(lack)} unavailable: {'; '.join(probe().errors[:2])})"
    return None


def expected_problems(fault: Fault, res) -> list[str]:
    stage = res.verdict.stage if res.verdict is not None else None
    err = res.error or ""
    out = []
    if fault.build_fails:
        if res.compiled:
            out.append("the build was expected to fail")
    elif not res.compiled:
        out.append(f"did not build: {err[:300]}")
    if fault.stages:
        if stage not in fault.stages:
            out.append(f"verdict stage {stage!r}, expected one of {fault.stages}: {err[:400]}")
    elif not fault.build_fails and not (res.verdict is not None and res.verdict.correct):
        # static rules may flag the candidate's imports; the candidate must still run unharmed
        out.append(f"the candidate should run to a correct verdict: {err[:400]}")
    if fault.text and not re.search(fault.text, err):
        out.append(f"error does not match /{fault.text}/: {err[:400]}")
    if "Traceback" in err:
        out.append("the error carries a traceback")
    return out


def run_fault(fault: Fault, work: Path, good_task=None, good_solution: Path | None = None) -> Outcome:
    """Check the faulty candidate, then the good example; time both."""
    from cuda_agent.sandbox.check import check
    from cuda_agent.sandbox.isolation import Limits
    from cuda_agent.tasks import load_file

    example = CPU_EXAMPLE if fault.device == "cpu" else GPU_EXAMPLE
    task = good_task or load_file(example / "task.py")
    good = good_solution or example / "solution"
    skip = missing_features(fault)
    if skip:
        return Outcome(fault.name, fault.device, "skipped", None, None, 0.0, None, None, False, [], skipped=skip)
    work.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(work)
    sol = fault.make(ctx)
    opts = options(fault.device, limits=Limits(**fault.limits), **fault.options)
    t0 = time.perf_counter()
    res = check(task, sol, opts)
    seconds = time.perf_counter() - t0
    problems = expected_problems(fault, res)
    if fault.after is not None:
        problems += fault.after(ctx, res, seconds)
    if fault.max_seconds is not None and seconds > fault.max_seconds:
        problems.append(f"took {seconds:.1f} s, over the {fault.max_seconds:.0f} s bound")
    t1 = time.perf_counter()
    ok = check(task, good, options(fault.device))
    recovery = time.perf_counter() - t1
    if not ok.correct:
        problems.append(f"the next good check failed: {ok.error}")
    stage = res.verdict.stage if res.verdict is not None else ("build" if not res.compiled else None)
    first = " ".join((res.error or "").split())[:140]
    rules = sorted({v.rule for v in res.violations})
    if res.verdict is not None and res.verdict.correct:
        verdict = "ran correctly" + (f" (flagged: {', '.join(rules)})" if rules else "")
    else:
        verdict = f"{stage}: {first}"
    build_s = round(res.build.seconds, 2) if res.build is not None else None
    return Outcome(fault.name, fault.device, verdict, stage, res.error, round(seconds, 2), build_s,
                   round(recovery, 2) if ok.correct else None, ok.correct, problems,
                   getattr(res, "isolation", "") or "", rules)
