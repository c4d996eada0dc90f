"""A runner process seen from the judge: start, send a command, read one reply, kill.

Replies are JSON lines read with a timeout; stderr is drained into a bounded ring buffer
(a candidate printing gigabytes costs nothing); on timeout, crash or exit the whole
process group is killed.  Nothing from the child is unpickled.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path


class RunnerDied(Exception):
    """The runner exited, crashed or timed out; ``.stage`` says which."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


class RunnerProcess:
    def __init__(self, job_file: Path, env: dict[str, str] | None = None, log_bytes: int = 64 << 10) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent.sandbox.runner", str(job_file)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})}, start_new_session=True, cwd=str(job_file.parent))
        self._log: deque[bytes] = deque()
        self._log_size = 0
        self._log_cap = log_bytes
        self._buf = b""
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):  # type: ignore[union-attr]
            self._log.append(chunk)
            self._log_size += len(chunk)
            while self._log_size > self._log_cap and len(self._log) > 1:
                self._log_size -= len(self._log.popleft())

    def log_tail(self, n_chars: int = 3000) -> str:
        text = b"".join(self._log).decode(errors="replace")
        return text[-n_chars:]

    def request(self, cmd: dict, timeout: float) -> dict:
        """Send one command, wait for its reply line; raise RunnerDied on timeout/crash."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        fd = self.proc.stdout.fileno()
        try:
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise RunnerDied("timeout", f"{cmd['cmd']} did not finish within {timeout:.0f} s "
                                                f"(killed)")
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise self._died()
                self._buf += chunk
        finally:
            sel.close()
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            raise RunnerDied("crash", "the runner's reply was corrupted (something wrote to its protocol "
                                      "channel)") from None

    def _died(self) -> RunnerDied:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            why = f"the process was killed by {name}"
        else:
            why = f"the process exited with code {code}"
        tail = self.log_tail(1500).strip()
        return RunnerDied("crash", why + (f"; last output:\n{tail}" if tail else ""))

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except Exception:
                pass
        self.kill()
        # the candidate's own children (same session) go too
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
