"""Evaluation processes: task code runs in a child process, never in the pipeline's.

:class:`EvalWorker` owns one long-lived child (spawned, so CUDA is safe) that evaluates task
sources one at a time.  A hang past the phase's time limit kills the child (a ``timeout`` or
``compile_timeout`` verdict); a crash (segfault, ``os._exit``) gives a ``crash`` verdict; either
way the next task gets a fresh child.  Child stdout/stderr go to a log file, not the terminal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .evaluate import FilterConfig, Verdict, reject

STARTUP_TIMEOUT_S = 180.0


def _serve(cfg_dict: dict[str, Any], log_path: str | None) -> None:
    """Child main loop: read task sources from fd 0, write messages to (a copy of) fd 1."""
    conn_in = Connection(os.dup(0), writable=False)
    conn_out = Connection(os.dup(1), readable=False)
    fd = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    nul = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nul, 0)
    cfg = FilterConfig(**{**cfg_dict, "band_ms": tuple(cfg_dict["band_ms"]) if cfg_dict.get("band_ms") else None})
    import torch

    torch.set_num_threads(max(1, cfg.threads))
    try:
        import torch._inductor.config as ic

        ic.compile_threads = 1
    except Exception:  # noqa: BLE001
        pass
    from .evaluate import safe_run_filters

    workdir = Path(tempfile.mkdtemp(prefix="synth_eval_"))
    conn_out.send(("ready", None))
    while True:
        try:
            msg = conn_in.recv()
        except EOFError:
            return
        if msg is None:
            return
        verdict = safe_run_filters(msg, cfg, workdir, phase=lambda p: conn_out.send(("phase", p)))
        conn_out.send(("result", verdict.to_dict()))


class EvalWorker:
    """One isolated evaluation process with per-phase time limits."""

    def __init__(self, cfg: FilterConfig, env: dict[str, str] | None = None, log_path: str | Path | None = None):
        self.cfg = cfg
        self.env = dict(env or {})
        self.log_path = str(log_path) if log_path else None
        self._proc: Any = None
        self._conn: Any = None
        self._wconn: Any = None

    def _start(self) -> None:
        env = {**os.environ, **self.env}
        arg = json.dumps({"cfg": self.cfg.to_dict(), "log": self.log_path})
        self._proc = subprocess.Popen([sys.executable, "-c", "from cuda_agent.synth.runner import main; main()", arg],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                      start_new_session=True)
        self._wconn = Connection(os.dup(self._proc.stdin.fileno()), readable=False)
        self._conn = Connection(os.dup(self._proc.stdout.fileno()), writable=False)
        self._proc.stdin.close()
        self._proc.stdout.close()
        # Wait for the child to import torch (slow on a busy machine) before the task clock starts.
        if not self._conn.poll(STARTUP_TIMEOUT_S):
            raise RuntimeError(f"evaluation process did not start in {STARTUP_TIMEOUT_S:.0f} s")
        self._conn.recv()

    def _kill(self) -> None:
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait(10)
        for c in (self._conn, self._wconn):
            if c is not None:
                c.close()
        self._proc = self._conn = self._wconn = None

    def evaluate(self, source: str) -> Verdict:
        if self._proc is None or self._proc.poll() is not None:
            self._kill()
            try:
                self._start()
            except (RuntimeError, EOFError, OSError) as e:
                self._kill()
                return reject("crash", f"evaluation process failed to start: {e}")
        limit, phase = self.cfg.timeout_s, "eager"
        try:
            self._wconn.send(source)
            while True:
                if not self._conn.poll(limit):
                    self._kill()
                    if phase == "compile":
                        return reject("compile_timeout", f"torch.compile took longer than {self.cfg.compile_timeout_s:.0f} s")
                    return reject("timeout", f"task did not finish its {phase} phase in {limit:.0f} s")
                kind, payload = self._conn.recv()
                if kind == "ready":
                    continue
                if kind == "phase":
                    phase = payload
                    limit = self.cfg.compile_timeout_s if phase == "compile" else self.cfg.timeout_s
                    continue
                return Verdict(**payload)
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = None
            if self._proc is not None:
                try:
                    code = self._proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            self._kill()
            return reject("crash", f"evaluation process died during the {phase} phase (exit code {code})")

    def close(self) -> None:
        if self._wconn is not None:
            try:
                self._wconn.send(None)
                self._proc.wait(5)
            except (OSError, BrokenPipeError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def __enter__(self) -> "EvalWorker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def main() -> None:
    """Entry of the evaluation child process (argv[1]: JSON with the filter config and log path)."""
    a = json.loads(sys.argv[1])
    _serve(a["cfg"], a["log"])
