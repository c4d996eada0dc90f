"""Bash, BashOutput, KillBash."""

from __future__ import annotations

import os
import time

import pytest


def test_cwd_and_env_persist(tools, ws):
    (ws / "sub").mkdir()
    assert tools.call("Bash", {"command": "cd sub && export FOO=bar"}) == "(no output)"
    out = tools.call("Bash", {"command": "pwd; echo $FOO"})
    assert out.splitlines() == [str(ws / "sub"), "bar"]


def test_exit_code_and_stderr(tools):
    out = tools.call("Bash", {"command": "echo out; echo err >&2; exit_code() { return 3; }; exit_code"})
    assert "out" in out and "err" in out
    assert out.rstrip().endswith("[exit code: 3]")


def test_output_without_trailing_newline(tools):
    assert tools.call("Bash", {"command": "printf abc"}) == "abc"


def test_syntax_error_does_not_wedge_shell(tools):
    out = tools.call("Bash", {"command": 'echo "unterminated'})
    assert "unexpected EOF" in out and "[exit code: 2]" in out
    assert "cuda-agent-shell" not in out  # internal file names are not shown
    assert tools.call("Bash", {"command": "echo ok"}) == "ok\n"


def test_stdin_is_not_the_control_channel(tools):
    # a command that reads stdin must not swallow the shell's protocol
    assert tools.call("Bash", {"command": "cat; echo after"}) == "after\n"


def test_timeout_kills_and_restores_state(tools, ws):
    tools.call("Bash", {"command": "mkdir -p d && cd d && export KEEP=1"})
    t0 = time.monotonic()
    out = tools.call("Bash", {"command": "echo started; sleep 30", "timeout": 1})
    assert time.monotonic() - t0 < 10
    assert "started" in out and "timed out after 1 s" in out
    assert tools.call("Bash", {"command": "pwd; echo $KEEP"}).split() == [str(ws / "d"), "1"]


def test_exit_restarts_shell(tools, ws):
    tools.call("Bash", {"command": "export KEEP=2"})
    out = tools.call("Bash", {"command": "exit 7"})
    assert "ended the shell" in out and "[exit code: 7]" in out
    assert tools.call("Bash", {"command": "echo $KEEP"}) == "2\n"


def test_long_output_truncated(tools):
    tools.ctx.max_output_chars = 1000
    out = tools.call("Bash", {"command": "seq 1 100000"})
    assert len(out) < 1300 and "output truncated" in out
    assert out.startswith("1\n2\n") and out.rstrip().endswith("100000")


def test_bad_arguments(tools):
    assert tools.call("Bash", {}).startswith("Error: Bash needs the argument command")
    assert tools.call("Bash", {"command": "  "}).startswith("Error:")
    assert tools.call("Bash", {"command": "ls", "timeout": "soon"}).startswith("Error: timeout")
    assert tools.call("Bash", '{"command": ').startswith("Error: the arguments of Bash are not valid JSON")
    assert tools.call("Bash", {"command": "ls", "bogus": 1}).startswith("Error: Bash got unknown argument bogus")
    assert tools.call("Nope", {}).startswith("Error: unknown tool 'Nope'")


def test_background_incremental_output(tools):
    msg = tools.call("Bash", {"command": "echo one; sleep 0.5; echo two", "run_in_background": True})
    assert "bash_1" in msg
    deadline = time.monotonic() + 10
    first = ""
    while "one" not in first and time.monotonic() < deadline:
        first += tools.call("BashOutput", {"shell_id": "bash_1"})
        time.sleep(0.05)
    assert "one" in first and "two" not in first
    while time.monotonic() < deadline:
        out = tools.call("BashOutput", {"shell_id": "bash_1"})
        if "exited" in out:
            break
        time.sleep(0.05)
    assert "[bash_1: exited with code 0]" in out
    assert "one" not in out  # only new output
    assert "(no new output)" in tools.call("BashOutput", {"shell_id": "bash_1"})


def test_background_inherits_cwd_and_env(tools, ws):
    (ws / "x").mkdir()
    tools.call("Bash", {"command": "cd x && export V=7"})
    tools.call("Bash", {"command": "pwd; echo $V", "run_in_background": True})
    deadline = time.monotonic() + 10
    out = ""
    while "exited" not in out and time.monotonic() < deadline:
        time.sleep(0.05)
        out += tools.call("BashOutput", {"shell_id": "bash_1"})
    assert str(ws / "x") in out and "7" in out


def test_bash_output_filter(tools):
    tools.call("Bash", {"command": "printf 'a1\\nb2\\na3\\n'", "run_in_background": True})
    time.sleep(0.5)
    out = tools.call("BashOutput", {"shell_id": "bash_1", "filter": "^a"})
    assert "a1" in out and "a3" in out and "b2" not in out
    assert tools.call("BashOutput", {"shell_id": "bash_1", "filter": "("}).startswith("Error: filter")


def test_kill_bash_kills_process_group(tools, ws):
    tools.call("Bash", {"command": "sleep 60 & echo $! > child.pid; wait", "run_in_background": True})
    deadline = time.monotonic() + 5
    while not (ws / "child.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((ws / "child.pid").read_text())
    assert tools.call("KillBash", {"shell_id": "bash_1"}).startswith("Killed bash_1")
    time.sleep(0.2)
    assert not _alive(child)
    assert "killed" in tools.call("BashOutput", {"shell_id": "bash_1"})
    assert tools.call("KillBash", {"shell_id": "bash_9"}).startswith("Error: no background shell")


def test_close_kills_everything(ws):
    from cuda_agent.agent.tools import ToolSet

    ts = ToolSet(ws)
    ts.call("Bash", {"command": "sleep 60", "run_in_background": True})
    ts.call("Bash", {"command": "sleep 60 > /dev/null 2>&1 & echo $! > main_child.pid"})
    bg = ts.ctx.shells.background["bash_1"].proc.pid
    main = ts.ctx.shells.main.proc.pid
    child = int((ws / "main_child.pid").read_text())
    ts.close()
    time.sleep(0.2)
    assert not any(_alive(p) for p in (bg, main, child))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
