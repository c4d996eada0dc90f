"""Contain a process that runs untrusted code: the judge's side.

The judge builds a ``Plan`` (``plan_for``) from a job and the ``Limits``: namespaces, hidden
and read-only paths, the job's private scratch (``scratch_env``), dropped capabilities and
rlimits, and starts the command behind the launcher (launcher.py, ``launcher_argv``)::

    python -m cuda_agent.sandbox.launcher PLAN_JSON -- python -m cuda_agent.sandbox.runner job.json

Where the platform allows no namespaces the plan carries a warning.  ``probe()`` finds out
once per process what this platform allows, by running the launcher on a scratch directory.
The host-memory and process-count caps are enforced from the judge's side (process.py's
watchdog), since RLIMIT_AS breaks CUDA and RLIMIT_NPROC does not apply to root.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import launcher
from .cache import cache_root, default_cache_root
from .launcher import SETUP_FAILED, host_ns

__all__ = ["GB", "SETUP_FAILED", "Limits", "Plan", "Probe", "launcher_argv", "launcher_env", "plan_for", "probe",
           "scratch_env"]

GB = 1 << 30


def _default_memory() -> int:
    try:
        kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal:"))
        return min(32 * GB, int(kb * 1024 * 0.6))
    except (OSError, StopIteration, ValueError):
        return 8 * GB


@dataclass(frozen=True)
class Limits:
    """Resource caps of one candidate process (and everything it starts)."""

    memory_bytes: int = field(default_factory=_default_memory)
    """Host memory: resident anonymous + shared memory summed over the job's processes, plus
    files in the job directory and the private /dev/shm (tmpfs is RAM).  Default
    min(32 GB, 60% of RAM).  Memory shared after fork counts once per process (upper bound)."""
    processes: int = 256
    """Processes besides the sandbox's own launcher and init (the runner counts as one)."""
    threads: int = 8192
    """Threads summed over those processes (a thread bomb exhausts PIDs like a fork bomb)."""
    file_size_bytes: int = 8 * GB
    """RLIMIT_FSIZE: the largest file the candidate can write."""
    shm_bytes: int = 2 * GB
    """Size of the private /dev/shm tmpfs (inside the mount namespace)."""
    poll_s: float = 0.05
    """How often the judge's watchdog samples memory and processes."""
    isolate: bool = True
    """Use namespaces where the platform allows; False = plain process + rlimits + watchdog."""
    network: bool = False
    """Allow network access (no network namespace)."""
    loopback: bool = False
    """Bring up the network namespace's own loopback: Nsight Compute and compute-sanitizer talk
    to their target process over it.  Nothing outside the namespace becomes reachable."""
    conceal: tuple[str, ...] = ()
    """Paths the candidate must neither see nor change: a directory gets an empty read-only tmpfs
    over it, a file ``/dev/null`` (reads find nothing, writes vanish) - a pool's database, its
    journal files and its snapshot directory."""
    drop_caps: bool = True
    """Drop every capability (root stays uid 0 but cannot undo the mounts or escape)."""
    gpu_memory_fraction: float | None = None
    """Passed to the runner as job["gpu_mem_fraction"] (torch.cuda.set_per_process_memory_fraction)."""


# --- what the platform allows ------------------------------------------------------------

@dataclass
class Probe:
    namespaces: list[str]
    """Subset of ["net", "pid", "mnt"] that works."""
    userns: bool = False
    """The namespaces need a user namespace (not root)."""
    drop_caps: bool = False
    errors: list[str] = field(default_factory=list)



def _run_plan(plan: dict, timeout: float = 30.0) -> dict:
    """Run the launcher in probe mode with ``plan``; the dict it reported."""
    import subprocess

    r, w = os.pipe()
    plan = {**plan, "status_fd": w}
    try:
        proc = subprocess.run([sys.executable, "-m", launcher.__name__, json.dumps(plan), "--", "true"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              pass_fds=(w,), timeout=timeout, start_new_session=True, env=launcher_env())
        os.close(w)
        w = -1
        raw = os.read(r, 1 << 16)
    except (OSError, subprocess.SubprocessError) as e:
        return {"setup_error": f"{type(e).__name__}: {e}"}
    finally:
        if w >= 0:
            os.close(w)
        os.close(r)
    try:
        return json.loads(raw.decode().splitlines()[-1])
    except (ValueError, IndexError):
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        return {"setup_error": f"launcher exited with {proc.returncode}: {(err or [''])[-1][:200]}"}


def launcher_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the launcher: ours, with this very package first on the path."""
    env = {**os.environ, **(extra or {})}
    src = str(_package_dir().parent)
    env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                 if p and p != src])
    return env


@functools.lru_cache(maxsize=1)
def probe() -> Probe:
    """What isolation works here, found by running the launcher on a scratch directory."""
    if not sys.platform.startswith("linux"):
        return Probe([], errors=["not Linux"])
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cuda-agent-probe-") as tmp:
        t = Path(tmp)
        (t / "hidden" / "exposed").mkdir(parents=True)
        (t / "hidden" / "secret").write_text("x")
        (t / "ro").mkdir()
        base = {"hide": [str(t / "hidden")], "expose": [[str(t / "hidden" / "exposed"), "rw"]],
                "readonly": [str(t / "ro")], "rlimits": {}, "probe": True,
                "host_ns": {k: host_ns(k) for k in ("net", "pid", "mnt")}}
        combos = [["net", "pid", "mnt"], ["net", "pid"], ["net", "mnt"], ["pid", "mnt"], ["net"], ["pid"], ["mnt"]]
        for userns in ([False, True] if os.geteuid() == 0 else [True, False]):
            for ns in combos:
                got = _run_plan({**base, "namespaces": ns, "userns": userns, "drop_caps": True})
                if got.get("ok"):
                    works = [k for k in ns if got.get(k)]
                    if works == ns:
                        return Probe(ns, userns, bool(got.get("caps_dropped")), errors)
                errors.append(f"{'+'.join(ns)}{' (userns)' if userns else ''}: "
                              f"{got.get('setup_error') or got.get('why') or 'not effective'}")
                if ns == combos[0] and "EPERM" in str(got.get("setup_error", "")) and not userns:
                    break  # no privilege for namespaces at all: try the user namespace next
        got = _run_plan({**base, "namespaces": [], "userns": False, "drop_caps": os.geteuid() == 0,
                         "hide": [], "expose": [], "readonly": []})
    return Probe([], False, bool(got.get("caps_dropped")), errors)


# --- the plan for one job ----------------------------------------------------------------

@dataclass
class Plan:
    """What the launcher applies to one command."""

    namespaces: list[str] = field(default_factory=list)
    userns: bool = False
    hide: list[str] = field(default_factory=list)
    """Directories mounted over with an empty tmpfs (read-only, except /dev/shm)."""
    expose: list[list[str]] = field(default_factory=list)
    """[path, "rw"|"ro"] bound back inside a hidden directory (or made read-only in place)."""
    readonly: list[str] = field(default_factory=list)
    root_readonly: bool = False
    """Every mount read-only, recursively; only the rw exposures and /dev/shm stay writable."""
    tmpdir: str | None = None
    """``TMPDIR`` of the command: a directory inside the (writable) job directory."""
    private_tmp: bool = False
    """Bind ``tmpdir`` over ``/tmp``: the command sees a private, writable, empty ``/tmp``."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables for the command: home and tool caches inside the job (``scratch_env``)."""
    mask: list[str] = field(default_factory=list)
    """Files with ``/dev/null`` bound over them."""
    shm: str | None = None
    """The hidden directory that is a writable private /dev/shm."""
    shm_bytes: int = 0
    drop_caps: bool = False
    loopback: bool = False
    """Set the namespace's ``lo`` up (profilers and sanitizers reach their target through it)."""
    rlimits: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"{n}ns" for n in ("user", "net", "pid", "mnt")
                 if n in self.namespaces or (n == "user" and self.userns and self.namespaces)]
        if self.root_readonly:
            parts.append("rofs")
        if self.drop_caps:
            parts.append("nocaps")
        return ",".join(parts + ["rlimits", "watchdog"])

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("warnings")
        d.pop("env")  # passed in the command's environment (process.py), not to the launcher
        return json.dumps(d)


SCRATCH_DIRS = {
    # variable -> directory under the job's home: every tool that caches or builds on its own
    # (torch's load_inline, Triton, CuPy, numba, inductor) writes into the job, which the
    # candidate owns alone and which is deleted with it; nothing is shared with another job
    "HOME": ".",
    "XDG_CACHE_HOME": ".cache",
    "TORCH_EXTENSIONS_DIR": ".cache/torch_extensions",
    "TRITON_CACHE_DIR": ".triton/cache",
    "CUPY_CACHE_DIR": ".cupy/kernel_cache",
    "NUMBA_CACHE_DIR": ".cache/numba",
    "TORCHINDUCTOR_CACHE_DIR": ".cache/torchinductor",
}


def scratch_env(job_dir: Path) -> dict[str, str]:
    """The job's private home and caches (created here, on the judge's side), and ``TMPDIR``."""
    home = job_dir / "home"
    env = {k: str(home / d) for k, d in SCRATCH_DIRS.items()}
    env["TMPDIR"] = str(job_dir / "tmp")
    for d in env.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    return env


def _under(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def _package_dir() -> Path:
    return Path(__file__).resolve().parent.parent


def _python_dirs() -> list[Path]:
    import site
    import sysconfig

    dirs = {Path(p) for p in (*site.getsitepackages(), sysconfig.get_paths()["stdlib"],
                              sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]) if p}
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")  # locates without importing
        if spec and spec.origin:
            dirs.add(Path(spec.origin).resolve().parent)
    except (ImportError, ValueError):
        pass
    out = sorted(d.resolve() for d in dirs if d.is_dir())
    return [d for d in out if not any(o != d and _under(d, o) for o in out)]


def plan_for(job_file: str | Path, limits: Limits) -> Plan:
    """The plan for a runner started on ``job_file``: everything the platform allows."""
    job_file = Path(job_file).resolve()
    job_dir = job_file.parent
    try:
        job = json.loads(job_file.read_text())
    except (OSError, ValueError):
        job = {}
    plan = Plan(rlimits={"core": 0, "fsize": int(limits.file_size_bytes)})
    plan.env = scratch_env(job_dir)
    pr = probe() if limits.isolate else Probe([])
    wanted = ["pid", "mnt"] + ([] if limits.network else ["net"])
    plan.namespaces = [n for n in ("net", "pid", "mnt") if n in wanted and n in pr.namespaces]
    plan.userns = pr.userns and bool(plan.namespaces)
    plan.drop_caps = limits.drop_caps and pr.drop_caps
    plan.loopback = limits.loopback and "net" in plan.namespaces
    why = "isolation disabled (Limits.isolate=False)" if not limits.isolate else \
        ("; ".join(pr.errors[:2]) or "unshare unavailable")
    if "net" in wanted and "net" not in plan.namespaces:
        plan.warnings.append(f"network not isolated: {why}")
    if "pid" not in plan.namespaces:
        plan.warnings.append(f"processes not in a PID namespace (the judge's processes are visible; "
                             f"background processes are killed by tree walk only): {why}")
    if "mnt" not in plan.namespaces:
        plan.warnings.append(f"filesystem not isolated (package source writable, build cache and other "
                             f"jobs readable): {why}")
        return plan

    keep = [_package_dir(), Path(sys.prefix).resolve(), Path(sys.executable).resolve().parent]
    hide: list[Path] = []
    # the active cache and the default one: a candidate checked with $CUDA_AGENT_CACHE set must
    # not poison the cache that other evaluations on this machine use (adversarial c14 did)
    caches = dict.fromkeys([cache_root().resolve(), default_cache_root().resolve()])
    for h in (*caches, Path("/dev/shm")):
        if not h.is_dir():
            continue
        if any(_under(k, h) for k in keep):
            plan.warnings.append(f"{h} not hidden: it holds the Python installation or the package")
            continue
        hide.append(h)
    for c in limits.conceal:
        p = Path(c).resolve()
        if p.is_dir() and p not in hide:
            if any(_under(k, p) for k in keep):
                plan.warnings.append(f"{p} not hidden: it holds the Python installation or the package")
            else:
                hide.append(p)
        elif p.is_file():
            plan.mask.append(str(p))
    # what lies inside a hidden directory is gone already (and has no mount point to cover)
    hide = [h for h in hide if not any(o != h and _under(h, o) for o in hide)]
    plan.mask = [m for m in plan.mask if not any(_under(Path(m), h) for h in hide)]
    plan.hide = [str(h) for h in hide]
    if Path("/dev/shm") in hide:
        plan.shm, plan.shm_bytes = "/dev/shm", int(limits.shm_bytes)

    expose: list[list[str]] = [[str(job_dir), "rw"]]
    sol_dir = job.get("solution_dir") or (str(Path(job["solution_file"]).parent) if job.get("solution_file") else None)
    if sol_dir and not _under(Path(sol_dir).resolve(), job_dir):
        expose.append([str(Path(sol_dir).resolve()), "ro"])
    for extra in job.get("expose_ro", []):  # e.g. the directory of synth's device timing locks
        p = Path(extra).resolve()
        if p.exists() and not _under(p, job_dir) and not any(_under(p, Path(e[0])) for e in expose):
            expose.append([str(p), "ro"])
    for key in ("extension", "task_file", "weights_file", "solution_file"):
        if job.get(key) and Path(job[key]).exists():
            p = Path(job[key]).resolve()
            if not _under(p, job_dir) and not any(_under(p, Path(e[0])) for e in expose):
                expose.append([str(p), "ro"])
    # the whole tree is read-only: a candidate cannot leave anything behind for a later check,
    # another tool or an agent's trajectories; its job directory (and TMPDIR in it) and its
    # private /dev/shm are the only places it writes
    plan.root_readonly = True
    plan.expose = expose
    plan.tmpdir = plan.env["TMPDIR"]
    # a private /tmp: solutions build in /tmp/<dir> (load_inline's build_directory, tempfile),
    # and must neither see nor leave anything for another job.  Not when the job itself lives
    # in /tmp (no /dev/shm here): the job directory would vanish under its own bind.
    tmp = Path("/tmp").resolve()
    plan.private_tmp = tmp.is_dir() and not _under(job_dir, tmp)
    return plan


def launcher_argv(plan: Plan, argv: list[str], status_fd: int | None = None,
                  parent_pid: int | None = None) -> list[str]:
    """The command line that runs ``argv`` behind the launcher (launcher.py), contained as ``plan``
    says (``status_fd``: where the launcher reports setup errors and the exit status;
    ``parent_pid``: the judge, whose death the launcher and everything under it do not outlive)."""
    d = json.loads(plan.to_json())
    if status_fd is not None:
        d["status_fd"] = status_fd
    if parent_pid is not None:
        d["parent_pid"] = parent_pid
    return [sys.executable, "-m", launcher.__name__, json.dumps(d), "--", *argv]
