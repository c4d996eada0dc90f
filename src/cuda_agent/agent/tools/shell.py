"""Bash, BashOutput and KillBash: one persistent shell per trajectory plus background shells.

The persistent shell is one ``bash`` process (its own process group) fed through stdin.
Each command is written to a private file and ``source``d with stdin from ``/dev/null``,
followed by a sentinel line carrying the exit code and ``$PWD``; so ``cd`` and ``export``
persist across calls, a syntax error cannot wedge the shell, and the result is exactly the
command's output.  After each command the exported environment is saved; when a command
times out (or runs ``exit``) the shell's process group is killed and a new shell is started
in the same directory with that environment restored.

Background shells (``run_in_background``) are separate ``bash -c`` processes started in the
persistent shell's directory and environment; their output is buffered and read
incrementally with BashOutput; KillBash ends one.  :meth:`ShellManager.close` kills every
process group.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import Tool, ToolContext, ToolFailure, register_tool, schema


class _Pump:
    """Reads a pipe into a growing buffer on a daemon thread."""

    def __init__(self, stream: Any) -> None:
        self.buf = bytearray()
        self.cond = threading.Condition()
        self.eof = False
        self._stream = stream
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        fd = self._stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            with self.cond:
                if not chunk:
                    self.eof = True
                    self.cond.notify_all()
                    return
                self.buf += chunk
                self.cond.notify_all()


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        # the leader is gone but children of the group may live on
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


@dataclass
class CommandResult:
    output: str
    exit_code: int | None
    """None when the command timed out or killed the shell."""
    timed_out: bool = False
    restarted: bool = False
    cwd: str = ""


class PersistentShell:
    """One long-lived bash whose directory and environment persist between commands."""

    def __init__(self, cwd: Path, env: dict[str, str], state_dir: Path) -> None:
        self.cwd = str(cwd)
        self.env = env
        self.state = state_dir
        self.token = "__CA_DONE_" + secrets.token_hex(8)
        self._n = 0
        self.proc: subprocess.Popen | None = None
        self.pump: _Pump | None = None
        self._start(restore=False)

    def _start(self, restore: bool) -> None:
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     cwd=self.cwd, env=self.env, start_new_session=True)
        self.pump = _Pump(self.proc.stdout)
        if restore and (self.state / "env").exists():
            self._send(f"source {shlex.quote(str(self.state / 'env'))} >/dev/null 2>&1; "
                       f"cd {shlex.quote(self.cwd)} 2>/dev/null\n")

    def _send(self, text: str) -> None:
        assert self.proc and self.proc.stdin
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run(self, command: str, timeout: float) -> CommandResult:
        restarted = False
        if not self.alive:
            self._start(restore=True)
            restarted = True
        self._n += 1
        cmd_file = self.state / f"cmd_{self._n}.sh"
        cmd_file.write_text(command + "\n")
        env_file = shlex.quote(str(self.state / "env"))
        assert self.pump
        with self.pump.cond:
            start = len(self.pump.buf)
        try:
            self._send(f"source {shlex.quote(str(cmd_file))} < /dev/null; __ca_rc=$?; "
                       f"export -p > {env_file} 2>/dev/null; "
                       f"printf '%s %d %s\\n' {self.token} \"$__ca_rc\" \"$PWD\"\n")
        except (BrokenPipeError, OSError):
            pass
        pat = re.compile(re.escape(self.token.encode()) + rb" (-?\d+) ([^\n]*)\n")
        deadline = time.monotonic() + timeout
        with self.pump.cond:
            while True:
                m = pat.search(self.pump.buf, start)
                if m or self.pump.eof:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.pump.cond.wait(min(left, 0.5))
            data = bytes(self.pump.buf[start:m.start() if m else len(self.pump.buf)])
        cmd_file.unlink(missing_ok=True)
        out = data.decode("utf-8", errors="replace").replace(str(cmd_file), "bash")
        if m:
            self.cwd = m.group(2).decode("utf-8", errors="replace") or self.cwd
            return CommandResult(out, int(m.group(1)), restarted=restarted, cwd=self.cwd)
        if self.pump.eof or not self.alive:
            # the command ended the shell (exit, exec, set -e ...): start a fresh one
            _kill_group(self.proc)  # type: ignore[arg-type]
            rc = self.proc.returncode  # type: ignore[union-attr]
            self._start(restore=True)
            return CommandResult(out, rc, restarted=True, cwd=self.cwd)
        _kill_group(self.proc)  # type: ignore[arg-type]
        self._start(restore=True)
        return CommandResult(out, None, timed_out=True, restarted=True, cwd=self.cwd)

    def close(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
            self.proc = None


@dataclass
class BackgroundShell:
    """A command running on its own, read incrementally."""

    id: str
    command: str
    proc: subprocess.Popen
    pump: _Pump
    read_pos: int = 0
    started: float = field(default_factory=time.monotonic)
    killed: bool = False

    def status(self) -> str:
        rc = self.proc.poll()
        if self.killed:
            return "killed"
        return "running" if rc is None else f"exited with code {rc}"


class ShellManager:
    """All shells of one trajectory."""

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.root = root
        base = dict(os.environ)
        base.update(env or {})
        base.setdefault("TERM", "dumb")
        base["PAGER"] = "cat"
        base["GIT_PAGER"] = "cat"
        self.env = base
        shm = Path("/dev/shm")  # tmpfs: the per-command files cost no disk flush
        base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
        self.state = Path(tempfile.mkdtemp(prefix="cuda-agent-shell-", dir=base))
        self._main: PersistentShell | None = None
        self.background: dict[str, BackgroundShell] = {}
        self._next = 1
        self._lock = threading.Lock()

    @property
    def main(self) -> PersistentShell:
        if self._main is None:
            self._main = PersistentShell(self.root, self.env, self.state)
        return self._main

    def spawn(self, command: str) -> BackgroundShell:
        with self._lock:
            sid = f"bash_{self._next}"
            self._next += 1
        cwd = self._main.cwd if self._main else str(self.root)
        env_file = self.state / "env"
        prefix = f"source {shlex.quote(str(env_file))} >/dev/null 2>&1; " if env_file.exists() else ""
        proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-c", prefix + command],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, cwd=cwd, env=self.env,
                                start_new_session=True)
        sh = BackgroundShell(sid, command, proc, _Pump(proc.stdout))
        self.background[sid] = sh
        return sh

    def get(self, sid: Any) -> BackgroundShell:
        if not isinstance(sid, str) or sid not in self.background:
            known = ", ".join(self.background) or "none"
            raise ToolFailure(f"no background shell with id {sid!r} (known: {known})")
        return self.background[sid]

    def close(self) -> None:
        """Kill every shell's process group and remove the private state."""
        for sh in self.background.values():
            _kill_group(sh.proc)
        if self._main is not None:
            self._main.close()
            self._main = None
        shutil.rmtree(self.state, ignore_errors=True)


def _shells(ctx: ToolContext) -> ShellManager:
    if ctx.shells is None:
        ctx.shells = ShellManager(ctx.root, ctx.env)
    return ctx.shells


def bash(ctx: ToolContext, command: str, timeout: float | None = None,
         run_in_background: bool = False, description: str = "") -> str:
    if not isinstance(command, str) or not command.strip():
        raise ToolFailure("command must be a non-empty string")
    shells = _shells(ctx)
    if run_in_background:
        sh = shells.spawn(command)
        return (f"Started background shell {sh.id} (pid {sh.proc.pid}). Read its output with "
                f"BashOutput(shell_id=\"{sh.id}\"); stop it with KillBash(shell_id=\"{sh.id}\").")
    if timeout is None:
        t = ctx.bash_timeout_s
    else:
        try:
            t = float(timeout)
        except (TypeError, ValueError):
            raise ToolFailure(f"timeout must be a number of seconds, got {timeout!r}") from None
        if t <= 0:
            raise ToolFailure("timeout must be positive")
        t = min(t, ctx.bash_max_timeout_s)
    res = shells.main.run(command, t)
    out = res.output
    notes = []
    if res.timed_out:
        notes.append(f"[command timed out after {t:g} s and was killed; the shell was restarted "
                     f"in {res.cwd} with the exported environment restored. Use "
                     f"run_in_background for long commands.]")
    if res.restarted and not res.timed_out:
        notes.append(f"[the command ended the shell; a new shell was started in {res.cwd} "
                     f"with the exported environment restored]")
    if res.exit_code not in (0, None):
        notes.append(f"[exit code: {res.exit_code}]")
    text = out if out else ("" if notes else "(no output)")
    if notes:
        text = (text.rstrip("\n") + "\n" if text else "") + "\n".join(notes)
    return ctx.truncate(text)


def bash_output(ctx: ToolContext, shell_id: str, filter: str | None = None) -> str:
    sh = _shells(ctx).get(shell_id)
    with sh.pump.cond:
        data = bytes(sh.pump.buf[sh.read_pos:])
        sh.read_pos = len(sh.pump.buf)
    text = data.decode("utf-8", errors="replace")
    if filter:
        try:
            rx = re.compile(filter)
        except re.error as e:
            raise ToolFailure(f"filter is not a valid regular expression: {e}") from None
        text = "".join(line for line in text.splitlines(keepends=True) if rx.search(line))
    head = f"[{sh.id}: {sh.status()}]"
    body = text if text else "(no new output)"
    return ctx.truncate(f"{head}\n{body}")


def kill_bash(ctx: ToolContext, shell_id: str) -> str:
    sh = _shells(ctx).get(shell_id)
    if sh.proc.poll() is not None and not sh.killed:
        return f"{sh.id} had already {sh.status()}; nothing to kill."
    _kill_group(sh.proc)
    sh.killed = True
    return f"Killed {sh.id} ({sh.command[:80]})."


register_tool(Tool(
    "Bash",
    "Run a shell command in the trajectory's persistent bash session (the working directory "
    "and exported variables persist between calls; it starts in the workspace). Output is "
    "stdout and stderr together, truncated when very long; a non-zero exit code is reported. "
    "Use run_in_background for long-running commands and read them with BashOutput.",
    schema({
        "command": {"type": "string", "description": "The command to run."},
        "timeout": {"type": "number", "description": "Timeout in seconds (default 120, at most 600)."},
        "run_in_background": {"type": "boolean",
                              "description": "Run in a separate background shell and return its id at once."},
        "description": {"type": "string", "description": "What the command does, in a few words."},
    }, ["command"]),
    bash))

register_tool(Tool(
    "BashOutput",
    "Get the output a background shell produced since the last read, and its status.",
    schema({
        "shell_id": {"type": "string", "description": "Id returned by Bash with run_in_background."},
        "filter": {"type": "string", "description": "Optional regular expression: only matching lines are returned."},
    }, ["shell_id"]),
    bash_output))

register_tool(Tool(
    "KillBash",
    "Kill a background shell (and every process it started).",
    schema({"shell_id": {"type": "string", "description": "Id of the background shell."}}, ["shell_id"]),
    kill_bash))
