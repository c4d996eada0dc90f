"""A runner process seen from the judge: start it contained, send a command, read one reply,
watch its memory and processes, kill it and everything it started.

The runner is started behind the launcher (isolation.py plans, launcher.py applies: namespaces, hidden and
read-only paths, rlimits, no capabilities).  Replies are JSON lines read with a timeout;
stderr is drained into a bounded ring buffer (a candidate printing gigabytes costs nothing);
a watchdog thread samples the job's processes through /proc and kills the whole job when
they exceed ``Limits.memory_bytes`` / ``processes`` / ``threads``.  On timeout, crash, cap or
exit every process of the job is killed (the PID namespace goes with its init; without one
the process tree is walked).  Nothing from the child is unpickled.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import queue
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Callable

from .isolation import GB, SETUP_FAILED, Limits, Plan, launcher_argv, launcher_env, plan_for

F_SETPIPE_SZ = 1031
MAX_BUILDS = 16


class RunnerDied(Exception):
    """The runner exited, crashed, timed out or hit a cap; ``.stage`` says which:
    ``timeout``, ``crash``, ``memory`` or ``processes``."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


# --- process trees through /proc ----------------------------------------------------------

def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def descendants(pid: int, limit: int | None = None) -> list[int]:
    """Every live descendant of ``pid`` (not ``pid`` itself), breadth first; stops after ``limit``."""
    out: list[int] = []
    todo = _children(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        if limit is not None and len(out) > limit:
            break
        todo += _children(p)
    return out


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def kill_tree(pid: int, also: dict[int, int | None] | None = None) -> None:
    """SIGKILL ``pid``, its process group and all its descendants (frozen first, so a forking
    loop cannot outrun the walk); ``also`` maps more pids to their start times (killed only
    if still the same process)."""
    for _ in range(20 if pid > 0 else 0):
        tree = [pid, *descendants(pid, 100_000)]
        for p in tree:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
        known = set(tree)
        tree += [p for p in descendants(pid, 100_000) if p not in known]
        for p in tree:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if len(tree) == 1:
            break
    for p, t0 in (also or {}).items():
        if _start_time(p) == t0 and t0 is not None:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def _status_kb(pid: int) -> tuple[int, int]:
    """(resident anonymous + shared memory in bytes, threads) of one process."""
    mem = threads = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    mem += int(line.split()[1]) * 1024
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return mem, threads


def _dir_bytes(root: str, max_entries: int = 2000) -> int:
    total = n = 0
    stack = [root]
    while stack and n < max_entries:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    n += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        total += st.st_blocks * 512
        except OSError:
            pass
    return total


def _fmt(n: int) -> str:
    return f"{n / GB:.1f} GB" if n >= 10 * GB else f"{n / (1 << 20):.0f} MB"


# --- starting launchers -------------------------------------------------------------------

class _Spawner:
    """Starts every launcher from one thread that lives as long as this process.

    The launcher dies with its judge through ``PR_SET_PDEATHSIG``, which fires when the *thread*
    that forked it ends, not the process: a check run from a short-lived thread (an executor's
    worker, an agent's episode) would otherwise have its runner killed when that thread ends,
    or, worse, make the parent-death signal a thing the judge has to keep in mind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue | None = None
        self._pid = 0

    def _loop(self, q: queue.SimpleQueue) -> None:
        while True:
            fn, fut = q.get()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    fut.set_exception(e)

    def call(self, fn):
        with self._lock:
            if self._queue is None or self._pid != os.getpid():  # a forked child has no such thread
                self._queue, self._pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(target=self._loop, args=(self._queue,), daemon=True,
                                 name="cuda-agent-spawner").start()
            fut: Future = Future()
            self._queue.put((fn, fut))
        return fut.result()


_spawner = _Spawner()


# --- the runner process ---------------------------------------------------------------------

def job_root(prefix: str = "cuda-agent-job-") -> Path:
    """A fresh directory for one runner's job: in /dev/shm, which every isolated runner sees as
    a private tmpfs holding only its own job (other jobs' files stay out of reach); else in the
    temp directory."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


class RunnerProcess:
    """``python -m cuda_agent.sandbox.runner JOB`` behind the isolation launcher.

    ``isolation`` says what applied (e.g. ``netns,pidns,mntns,rofs,nocaps,rlimits,watchdog``),
    ``warnings`` what could not be isolated on this platform.  ``wrap`` puts a tool in front of
    the runner inside the sandbox (``ncu ...``, ``compute-sanitizer ...``): the tool and its
    target are contained alike; its output must go to a file, not the protocol's stdout."""

    def __init__(self, job_file: Path, env: dict[str, str] | None = None, limits: Limits | None = None,
                 log_bytes: int = 64 << 10, wrap: list[str] | None = None) -> None:
        job_file = Path(job_file)
        self.limits = limits or Limits()
        try:
            self.plan = plan_for(job_file, self.limits)
        except Exception as e:  # a broken platform must not lose the job: run it contained less
            self.plan = Plan(rlimits={"core": 0, "fsize": int(self.limits.file_size_bytes)},
                             warnings=[f"not isolated: planning the isolation failed ({type(e).__name__}: {e})"])
        self.isolation = self.plan.describe()
        self.warnings = list(self.plan.warnings)
        self._pidns = "pid" in self.plan.namespaces
        self._job_dir = str(job_file.resolve().parent)
        status_r, status_w = os.pipe()
        cmd = launcher_argv(self.plan, [*(wrap or []), sys.executable, "-m", "cuda_agent.sandbox.runner",
                                        str(job_file)], status_w, parent_pid=os.getpid())  # dies with us (_Spawner)
        try:
            self.proc = _spawner.call(lambda: subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=launcher_env({**self.plan.env, **(env or {})}), start_new_session=True, cwd=self._job_dir,
                pass_fds=(status_w,)))
        finally:
            os.close(status_w)
        self._status_r = status_r
        self._status: dict | None = None
        for pipe in (self.proc.stdout, self.proc.stderr):
            try:
                fcntl.fcntl(pipe.fileno(), F_SETPIPE_SZ, 1 << 20)  # type: ignore[union-attr]
            except OSError:
                pass
        self._log: deque[bytes] = deque()
        self._log_size = 0
        self._log_cap = log_bytes
        self._buf = b""
        self._fault: RunnerDied | None = None
        self._seen: dict[int, int | None] = {}
        self._lock = threading.Lock()
        self.peak_memory = 0
        self.peak_processes = 0
        self.on_build: Callable[[dict], dict] | None = None
        """Answers the runner's build requests (single-file extensions; inline_build.serve)."""
        self.builds = 0
        self._progress: tuple = ()
        self._progress_at = time.monotonic()
        threading.Thread(target=self._drain, daemon=True, name="runner-stderr").start()
        threading.Thread(target=self._watch, daemon=True, name="runner-watchdog").start()

    # -- stderr ring buffer -------------------------------------------------------------
    def _drain(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError:
                break
            if not chunk:
                break
            self._log.append(chunk)
            self._log_size += len(chunk)
            while self._log_size > self._log_cap and len(self._log) > 1:
                self._log_size -= len(self._log.popleft())

    def log_tail(self, n_chars: int = 3000) -> str:
        text = b"".join(list(self._log)).decode(errors="replace")
        return text[-n_chars:]

    # -- watchdog -------------------------------------------------------------------------
    def _sample(self) -> tuple[int, int, int]:
        """(processes, threads, bytes) of the job now; stops counting past the caps."""
        lim = self.limits
        tree = descendants(self.proc.pid, lim.processes + 2)
        n = max(0, len(tree) - 1)  # the init is ours; the launcher is not in its own tree
        if n > lim.processes:
            return n, 0, 0
        mem = threads = 0
        for p in tree:
            m, t = _status_kb(p)
            mem, threads = mem + m, threads + t
            if p not in self._seen and not self._pidns:
                self._seen[p] = _start_time(p)
        files = _dir_bytes(self._job_dir)
        if self.plan.shm and tree:
            try:
                st = os.statvfs(f"/proc/{tree[0]}/root{self.plan.shm}")
                files += (st.f_blocks - st.f_bfree) * st.f_frsize
            except OSError:
                pass
        # progress, as a hang cannot fake it cheaply: processes coming and going (compilers)
        # or files being written (JIT caches, builds); a spinning loop changes neither
        progress = (frozenset(tree), files)
        if progress != self._progress:
            self._progress, self._progress_at = progress, time.monotonic()
        return n, threads, mem + files

    def _watch(self) -> None:
        lim = self.limits
        while self.proc.poll() is None and self._fault is None:
            n, threads, mem = self._sample()
            self.peak_processes = max(self.peak_processes, n)
            self.peak_memory = max(self.peak_memory, mem)
            fault = None
            if n > lim.processes:
                fault = RunnerDied("processes", f"the candidate started more than {lim.processes} processes "
                                                f"(process cap; fork bomb?) and was killed")
            elif threads > lim.threads:
                fault = RunnerDied("processes", f"the candidate's processes ran {threads} threads, over the cap "
                                                f"of {lim.threads}, and were killed")
            elif mem > lim.memory_bytes:
                fault = RunnerDied("memory", f"host memory {_fmt(mem)} over the cap of {_fmt(lim.memory_bytes)} "
                                             f"({n} process{'es' if n != 1 else ''}); killed")
            if fault is not None:
                with self._lock:
                    if self.proc.poll() is None and self._fault is None:
                        self._fault = fault
                self.kill()
                return
            time.sleep(lim.poll_s)

    # -- protocol -------------------------------------------------------------------------
    def request(self, cmd: dict, timeout: float, stall: float | None = None, why: str = "") -> dict:
        """Send one command, wait for its reply line; raise RunnerDied on timeout/crash/cap.

        ``timeout`` caps the command; ``stall`` (seconds, optional) ends it earlier when the job
        made no progress (no process started or ended, no file written) for that long: a hang
        costs the task's own budget, while a first call that compiles (Triton, torch.compile,
        nvrtc) keeps going up to ``timeout``.  ``why`` explains the stall budget in the verdict."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if self._fault is not None:
            raise self._died()
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None
        start = time.monotonic()
        deadline = start + timeout
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        fd = self.proc.stdout.fileno()
        try:
            while b"\n" not in self._buf:
                if self._fault is not None:
                    raise self._died()
                now = time.monotonic()
                stalled = stall is not None and now - max(start, self._progress_at) > stall
                left = deadline - now
                if left <= 0 or stalled:
                    self.kill()
                    tail = self.log_tail(1500).strip()
                    what = (f"(killed)" if not stalled else
                            f"(killed as a hang: nothing progressed for {stall:.0f} s{'; ' + why if why else ''})")
                    raise RunnerDied("timeout", f"{cmd['cmd']} did not finish within {now - start:.0f} s {what}"
                                     + (f"; last output:\n{tail}" if tail else ""))
                if not sel.select(timeout=min(left, 0.25)):
                    if self.proc.poll() is not None:  # exited, but something still holds stdout
                        raise self._died()
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise self._died()
                self._buf += chunk
                while (req := self._build_request()) is not None:
                    t0 = time.monotonic()
                    self._answer_build(req)
                    deadline += time.monotonic() - t0  # the judge's build time is not the candidate's
                    self._progress_at = time.monotonic()  # nor is it a hang
        finally:
            sel.close()
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            raise RunnerDied("crash", "the runner's reply was corrupted (something wrote to its protocol "
                                      "channel)") from None

    def send(self, cmd: dict) -> None:
        """Send a command that has no reply (a spare's ``start``); a dead runner is reported by
        the next ``request``."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def _build_request(self) -> dict | None:
        """The first buffered line if it is a build request (``{"build": {...}}``, sent by the
        runner's load_inline hook while it imports the solution), taken off the buffer."""
        if b"\n" not in self._buf or not self._buf.startswith(b'{"build"'):
            return None
        line, rest = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            return None  # not ours: the reply parser reports the corruption
        if not isinstance(msg, dict) or set(msg) != {"build"}:
            return None
        self._buf = rest
        return msg["build"]

    def _answer_build(self, req: dict) -> None:
        self.builds += 1
        if self.on_build is None:
            rep = {"ok": False, "log": "extensions cannot be built in this process (no build service)"}
        elif self.builds > MAX_BUILDS:
            rep = {"ok": False, "log": f"more than {MAX_BUILDS} extension builds in one check"}
        else:
            rep = self.on_build(req)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(rep) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the runner is gone: the read loop reports how

    def _read_status(self) -> dict:
        if self._status is None:
            raw = b""
            try:
                os.set_blocking(self._status_r, False)
                while chunk := os.read(self._status_r, 4096):
                    raw += chunk
            except (BlockingIOError, OSError):
                pass
            try:
                self._status = json.loads(raw.decode().splitlines()[-1])
            except (ValueError, IndexError):
                self._status = {}
        return self._status

    def _died(self) -> RunnerDied:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        if self._fault is not None:
            return self._fault
        st = self._read_status()
        tail = self.log_tail(1500).strip()
        if st.get("setup_error") or (code == SETUP_FAILED and not st):
            return RunnerDied("crash", f"the sandbox could not be set up: {st.get('setup_error', 'unknown')}"
                                       f" (isolation {self.isolation})")
        sig = st.get("signal") or (-code if code is not None and code < 0 else None)
        if sig:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = str(sig)
            why = f"the process was killed by {name}"
            if name == "SIGXFSZ":
                why += f" (a file grew past the {_fmt(self.limits.file_size_bytes)} file-size limit)"
            elif name == "SIGKILL":
                why += " (from outside: the kernel's OOM killer or an operator)"
        else:
            why = f"the process exited with code {st.get('exit', code)}"
        return RunnerDied("crash", why + (f"; last output:\n{tail}" if tail else ""))

    # -- pausing ----------------------------------------------------------------------------
    def pause(self) -> None:
        """Freeze the job: SIGSTOP to the launcher and every process below it (and, without a PID
        namespace, every process the watchdog saw).  While its judge waits for the device lock
        none of the candidate's threads may compute or launch GPU work beside another judge's
        timing; :meth:`resume` thaws it.  A stopped process cannot fork, so one walk that finds
        nothing new has them all."""
        self._signal_job(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_job(signal.SIGCONT)

    def _signal_job(self, sig: int) -> None:
        if self.proc.poll() is not None:
            return
        done: set[int] = set()
        for _ in range(20):
            tree = [self.proc.pid, *descendants(self.proc.pid, 100_000)]
            if not self._pidns:
                tree += [p for p, t0 in dict(self._seen).items() if t0 is not None and _start_time(p) == t0]
            new = [p for p in tree if p not in done]
            if not new:
                return
            for p in new:
                try:
                    os.kill(p, sig)
                except OSError:
                    pass
            done.update(new)

    # -- ending -----------------------------------------------------------------------------
    def kill(self) -> None:
        """Kill the job: every process it started, however it detached."""
        if self.proc.returncode is None:  # not reaped yet: its pid and group id are still ours
            if self._pidns:
                # the launcher and the init share the group we created; the init is PID 1 of
                # the namespace, and when it dies the kernel kills every process in it
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            else:
                kill_tree(self.proc.pid)
        if not self._pidns and self._seen:
            kill_tree(-1, dict(self._seen))  # a copy: the watchdog thread may be adding to it
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def finish(self, timeout: float) -> bool:
        """Ask the runner to exit and wait up to ``timeout`` s for the whole job to end (a
        wrapping tool writes its report after its target exits); then close.  True if it ended."""
        ended = False
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b'{"cmd": "exit"}\n')
            self.proc.stdin.flush()
            self.proc.wait(timeout=timeout)
            ended = True
        except Exception:
            pass
        self.close()
        return ended

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except Exception:
                pass
        # the candidate's own children go too (the PID namespace is gone with its init;
        # without one, the tree and every process the watchdog saw)
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        try:
            os.close(self._status_r)
        except OSError:
            pass
        self._status_r = -1



# --- spare runners ---------------------------------------------------------------------------

SPARE_COPY_FILES = 256
SPARE_COPY_BYTES = 64 << 20


def _small_tree(d: Path) -> bool:
    n = size = 0
    for f in d.rglob("*"):
        n += 1
        if n > SPARE_COPY_FILES:
            return False
        if f.is_file():
            size += f.stat().st_size
            if size > SPARE_COPY_BYTES:
                return False
    return True


class Spare:
    """A runner started before its job (``Spares``): isolated, interpreter and torch loaded,
    waiting for ``start``.  Its job directory is its own and the sibling ``stage`` directory is
    exposed to it read-only, empty until a job needs to hand it files the runner cannot see
    (a solution under a hidden path or the judge's /tmp).  Used by one job, then closed."""

    def __init__(self, device: str, env: dict[str, str], limits: Limits | None) -> None:
        self.job_dir = job_root()
        self.stage = self.job_dir.with_name(self.job_dir.name + ".solution")
        self.stage.mkdir(mode=0o755)
        # not job.json: the job written there later must not be what the runner reads at start
        (self.job_dir / "spare.json").write_text(json.dumps({
            "spare": True, "device": device, "expose_ro": [str(self.stage)],
            "job_file": str(self.job_dir / "job.json")}))
        self.runner = RunnerProcess(self.job_dir / "spare.json", env=env,
                                    **({"limits": limits} if limits is not None else {}))
        self.ready = False

    def alive(self) -> bool:
        return self.runner.proc.poll() is None and self.runner._fault is None

    def settle(self, timeout: float) -> bool:
        """Wait until the spare has warmed up (it answers ``ping`` only then); False if it died
        or did not finish in ``timeout`` s (the caller discards it)."""
        if not self.ready:
            try:
                self.ready = bool(self.runner.request({"cmd": "ping"}, timeout).get("ok"))
            except RunnerDied:
                return False
        return self.ready

    def sees(self, path: Path) -> bool:
        """Whether ``path`` is visible (read-only) inside this runner's sandbox as it is."""
        plan, path = self.runner.plan, Path(path).resolve()
        if "mnt" not in plan.namespaces:
            return True
        hidden = [Path(h) for h in plan.hide + plan.mask] + ([Path("/tmp").resolve()] if plan.private_tmp else [])
        return not any(path == h or h in path.parents for h in hidden)

    def place(self, sol_dir: Path) -> Path | None:
        """Where the runner finds ``sol_dir``: as it is, or copied into ``stage``; None when it
        can do neither (a large tree out of its sight: the caller starts a fresh runner)."""
        if self.sees(sol_dir):
            return sol_dir
        try:
            if not _small_tree(sol_dir):
                return None
            shutil.copytree(sol_dir, self.stage, dirs_exist_ok=True, symlinks=True)
        except OSError:
            return None
        return self.stage

    def start(self) -> RunnerProcess:
        """Hand the job (``job_dir/job.json``, written by the caller) to the runner."""
        self.runner.send({"cmd": "start"})
        return self.runner

    def discard(self) -> None:
        self.runner.close()
        self.remove_dirs()

    def remove_dirs(self) -> None:
        shutil.rmtree(self.job_dir, ignore_errors=True)
        shutil.rmtree(self.stage, ignore_errors=True)


class _Closing:
    """Runners being closed behind the judge's back (a CUDA process takes 0.5-2.5 s to exit on
    the H200): the next check starts meanwhile, and anything that measures waits for them."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def close(self, runner: "RunnerProcess", *dirs: Path) -> None:
        def run() -> None:
            runner.close()
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)

        t = threading.Thread(target=run, daemon=True, name="runner-close")
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def wait(self) -> None:
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join()


class Spares:
    """One spare runner per (device, limits, environment), started right after the previous one
    was taken, so that the next check finds its runner's interpreter, torch and the evaluator
    already loaded (3-5 s of every check on the H200).  Off unless a long-lived judge turns it on
    (a pool slot, an evaluation run): a one-shot ``check`` would start a spare for nothing.

    Isolation is unchanged: a spare is a fresh sandboxed process used by exactly one job; it
    only started earlier.  Its warm-up (imports, CUDA context, cuBLAS) may overlap another job's
    verification, never a measurement: ``settle`` waits for it before anything is timed.  With
    spares on, runners are also closed in the background (``closing``), waited for alike."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._on = False
        self._waiting: dict[str, Spare] = {}
        self._pid = os.getpid()
        self.closing = _Closing()

    @property
    def on(self) -> bool:
        return self._on

    def enable(self, on: bool = True) -> None:
        self._on = on
        if not on:
            self.close()

    @staticmethod
    def _key(device: str, env: dict[str, str], limits: Limits | None) -> str:
        return json.dumps([device, sorted(env.items()), repr(limits), os.environ.get("CUDA_VISIBLE_DEVICES")])

    def take(self, device: str, env: dict[str, str], limits: Limits | None) -> Spare | None:
        """The waiting spare for these settings (None if off or none is ready); a new one is
        started in its place."""
        if not self._on:
            return None
        key = self._key(device, env, limits)
        with self._lock:
            if self._pid != os.getpid():  # a forked child: those runners are its parent's
                self._waiting, self._pid = {}, os.getpid()
            got = self._waiting.pop(key, None)
            try:
                self._waiting[key] = Spare(device, env, limits)
            except Exception:  # noqa: BLE001 - no spare next time; the check starts its own runner
                pass
        if got is not None and not got.alive():
            got.discard()
            return None
        return got

    def settle(self, timeout: float = 120.0) -> None:
        """Before a measurement: wait for every runner still closing and every spare still
        warming up (neither may share the machine with the timed calls); a spare that fails to
        warm up is dropped."""
        self.closing.wait()
        with self._lock:
            waiting = list(self._waiting.items())
        for key, sp in waiting:
            if not sp.settle(timeout):
                with self._lock:
                    if self._waiting.get(key) is sp:
                        del self._waiting[key]
                sp.discard()

    def close(self) -> None:
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
        for sp in waiting:
            sp.discard()
        self.closing.wait()


spares = Spares()
atexit.register(spares.close)


def run_contained(argv: list[str], job_file: Path, timeout: float, env: dict[str, str] | None = None,
                  limits: Limits | None = None, max_output: int = 1 << 20) -> tuple[int | None, str]:
    """Run a command of ours on untrusted input (a compiler on a candidate's sources and flags)
    behind the isolation launcher, in ``job_file``'s directory: (exit code or None on timeout,
    combined output, the last ``max_output`` bytes)."""
    job_file = Path(job_file)
    limits = limits or Limits()
    plan = plan_for(job_file, limits)
    status_r, status_w = os.pipe()
    cmd = launcher_argv(plan, argv, status_w, parent_pid=os.getpid())
    out = tempfile.TemporaryFile()
    try:
        proc = _spawner.call(lambda: subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=launcher_env({**plan.env, **(env or {})}), start_new_session=True,
            cwd=str(job_file.resolve().parent), pass_fds=(status_w,)))
    finally:
        os.close(status_w)
    try:
        code: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
        kill_tree(proc.pid)  # not reaped yet: the pid and its group are still this command's
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    finally:
        os.close(status_r)
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - max_output))
    text = out.read().decode(errors="replace")
    out.close()
    return code, text
def run_under(wrap: list[str], job_file: Path, seed: int, *, env: dict[str, str] | None = None,
              limits: Limits | None = None, timeout: float = 300.0, warmup: int = 0,
              profile_range: bool = False,
              on_build: Callable[[dict], dict] | None = None) -> tuple[str | None, RunnerProcess]:
    """Start the runner of ``job_file`` behind ``wrap`` (a profiler or sanitizer) in the same
    sandbox as a check, load the solution and run one forward on the inputs of ``seed`` (after
    ``warmup`` unmeasured ones; ``profile_range`` brackets it with cudaProfilerStart/Stop), then
    let the tool finish; ``on_build`` answers the build requests of a single-file solution
    (inline_build.server_for: the same trusted cache as its check).  (None, runner) when the
    forward ran, else (why, runner)."""
    runner = RunnerProcess(job_file, env=env, limits=limits, wrap=wrap)
    runner.on_build = on_build
    why: str | None = None
    try:
        rep = runner.request({"cmd": "load"}, timeout)
        if rep.get("ok"):
            rep = runner.request({"cmd": "once", "seed": seed, "warmup": warmup, "profile_range": profile_range},
                                 timeout)
        if not rep.get("ok"):
            why = f"{rep.get('stage', 'forward')}: {rep.get('error')}"
    except RunnerDied as e:
        why = f"{e.stage}: {e}"
    if not runner.finish(timeout=max(30.0, timeout / 2)) and why is None:
        why = "the tool did not finish after the forward (killed)"
    return why, runner


KEEP_LOGS_ENV = "CUDA_AGENT_KEEP_TOOL_LOGS"
"""A directory where the raw logs of ncu and compute-sanitizer runs are copied (recording
fixtures, debugging the parsers); unset, they go with the job directory."""


def keep_log(path: Path) -> None:
    dest = os.environ.get(KEEP_LOGS_ENV)
    if dest and Path(path).is_file():
        try:
            Path(dest).mkdir(parents=True, exist_ok=True)
            name = f"{int(time.time() * 1000)}-{Path(path).name}"
            Path(dest, name).write_bytes(Path(path).read_bytes())
        except OSError:
            pass


def find_cuda_tool(name: str) -> str | None:
    """A CUDA toolkit binary (``ncu``, ``compute-sanitizer``): on the PATH, else in $CUDA_HOME or
    /usr/local/cuda."""
    import shutil

    exe = shutil.which(name)
    if exe:
        return exe
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and Path(home, "bin", name).is_file():
            return str(Path(home, "bin", name))
    return None
