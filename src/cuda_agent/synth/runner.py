"""Evaluation processes: task code runs in a contained child process, never in the pipeline's.

:class:`EvalWorker` owns one long-lived child that evaluates task sources one at a time.  The
child is forked from a warm :class:`~cuda_agent.synth.forkserver.ForkServer` when one is given
(torch imported and torch.compile warmed up once, not per process), else spawned as a fresh
interpreter (CUDA-safe either way); either way it runs behind the sandbox's launcher, as a
check's candidate does (:mod:`cuda_agent.synth.child`).  A hang past the phase's time limit
kills the child's whole process group (a ``timeout`` or ``compile_timeout`` verdict); a crash
(segfault, ``os._exit``) gives a ``crash`` verdict with the exit code; either way the next task
gets a fresh child.  Child stdout/stderr go to a log file, not the terminal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .child import contain, lock_dirs
from .evaluate import FilterConfig, Verdict, reject, timing_lock_file
from .forkserver import ForkServer, ForkServerError

STARTUP_TIMEOUT_S = 180.0


def _log(log_path: str | None) -> int:
    return os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


class _Spawned:
    """A child started as a fresh interpreter (subprocess) behind the launcher, in a job
    directory of its own."""

    def __init__(self, cfg: FilterConfig, env: dict[str, str], log_path: str | None):
        self.box = contain([sys.executable, "-c", "from cuda_agent.synth.child import main; main()",
                            json.dumps(cfg.to_dict())], env, expose=lock_dirs(cfg))
        log = _log(log_path)
        try:
            self.proc = subprocess.Popen(self.box.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         env=self.box.env, cwd=self.box.job_dir, start_new_session=True)
        except OSError:
            self.box.cleanup()
            raise
        finally:
            os.close(log)
        self.pid = self.proc.pid
        self.send_conn = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.recv_conn = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_code(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def ended(self) -> None:
        self.box.cleanup()


class _Forked:
    """A child forked by the fork server (inside the server's sandbox)."""

    def __init__(self, server: ForkServer, env: dict[str, str]):
        self.server = server
        self.pid, sock = server.spawn(env=env)
        self.send_conn = self.recv_conn = Connection(sock.detach())
        self._code: int | None = None

    def alive(self) -> bool:
        if self.server.exited(self.pid):
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    def exit_code(self, timeout: float) -> int | None:
        if self._code is None:
            self._code = self.server.exit_code(self.pid, timeout)
        return self._code

    def ended(self) -> None:
        pass


class EvalWorker:
    """One isolated evaluation process with per-phase time limits.

    ``server``: a :class:`ForkServer` to fork children from (warm); without one, or when it
    fails, each child is a fresh interpreter.
    """

    def __init__(self, cfg: FilterConfig, env: dict[str, str] | None = None, log_path: str | Path | None = None,
                 server: ForkServer | None = None):
        self.cfg = cfg
        self.env = dict(env or {})
        self.log_path = str(log_path) if log_path else None
        self.server = server
        self.starts: dict[str, int] = {"forked": 0, "spawned": 0}
        """How many children this worker started, by kind (a restart after a crash or timeout counts)."""
        self._child: _Spawned | _Forked | None = None

    def _start(self) -> None:
        if self.cfg.timing_lock:  # created here: the child cannot create files outside its job directory
            lock = timing_lock_file(self.cfg, self.env)
            os.close(os.open(lock, os.O_WRONLY | os.O_CREAT, 0o644))
        child: _Spawned | _Forked | None = None
        if self.server is not None:
            try:
                child = _Forked(self.server, self.env)
                self.starts["forked"] += 1
            except (ForkServerError, OSError):
                child = None
        if child is None:
            child = _Spawned(self.cfg, self.env, self.log_path)
            self.starts["spawned"] += 1
        self._child = child
        # Wait for the child to be ready (a spawned one imports torch, slow on a busy machine)
        # before the task clock starts.
        if not child.recv_conn.poll(STARTUP_TIMEOUT_S):
            raise RuntimeError(f"evaluation process did not start in {STARTUP_TIMEOUT_S:.0f} s")
        child.recv_conn.recv()

    def _kill(self) -> None:
        c = self._child
        if c is None:
            return
        try:
            os.killpg(c.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(c.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        c.exit_code(10)
        c.ended()
        for conn in {id(c.send_conn): c.send_conn, id(c.recv_conn): c.recv_conn}.values():
            conn.close()
        self._child = None

    def _ensure(self) -> Verdict | None:
        if self._child is None or not self._child.alive():
            self._kill()
            try:
                self._start()
            except (RuntimeError, EOFError, OSError) as e:
                self._kill()
                return reject("crash", f"evaluation process failed to start: {e}")
        return None

    def evaluate(self, source: str) -> Verdict:
        bad = self._ensure()
        if bad is not None:
            return bad
        try:
            self._child.send_conn.send(source)  # type: ignore[union-attr]
        except OSError:
            # The idle child died since its last verdict: not this task's fault; one fresh child.
            self._kill()
            bad = self._ensure()
            if bad is not None:
                return bad
            try:
                self._child.send_conn.send(source)  # type: ignore[union-attr]
            except OSError as e:
                self._kill()
                return reject("crash", f"evaluation process unreachable: {e}")
        limit, phase = self.cfg.timeout_s, "eager"
        conn = self._child.recv_conn  # type: ignore[union-attr]
        try:
            while True:
                if not conn.poll(limit):
                    self._kill()
                    if phase == "compile":
                        return reject("compile_timeout", f"torch.compile took longer than {self.cfg.compile_timeout_s:.0f} s")
                    return reject("timeout", f"task did not finish its {phase} phase in {limit:.0f} s")
                kind, payload = conn.recv()
                if kind == "ready":
                    continue
                if kind == "phase":
                    phase = payload
                    limit = self.cfg.compile_timeout_s if phase == "compile" else self.cfg.timeout_s
                    continue
                return Verdict(**payload)
        except (EOFError, OSError):
            code = self._child.exit_code(5) if self._child is not None else None
            self._kill()
            return reject("crash", f"evaluation process died during the {phase} phase (exit code {code})")

    def interrupt(self) -> None:
        """Kill the running child's process group (from another thread); the evaluation in progress
        returns a ``crash`` verdict that the caller is expected to discard."""
        c = self._child
        if c is not None:
            try:
                os.killpg(c.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        c = self._child
        if c is not None:
            try:
                c.send_conn.send(None)
                c.exit_code(5)
            except OSError:
                pass
        self._kill()

    def __enter__(self) -> "EvalWorker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
