"""The README's commands run as written and print what it says they print.

A fenced block right after ``<!-- readme-test -->`` is a session: ``$ command`` lines (a
trailing ``\\`` continues one) each followed by the output the README shows.  The commands
run one after the other in a scratch directory that sees the repository's ``examples/``
(a ``cd`` carries over), with ``cuda-agent`` on PATH running this checkout.  Each shown
output line must appear in the real output, in order, compared by its shape: numbers
(times, speedups, counts) and anything in parentheses may differ, words may not.  A line
``...`` stands for lines left out.  ``<!-- readme-test needs=kernelbench -->`` marks a
block that needs the KernelBench data ($CUDA_AGENT_KERNELBENCH): skipped without it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
MARK = re.compile(r"<!-- readme-test( needs=(\w+))? -->\n```\w*\n(.*?)```", re.S)


def sessions(text: str, mark: re.Pattern = MARK) -> list[tuple[str | None, list[tuple[str, list[str]]]]]:
    """[(need, [(command, shown output lines)])] of every marked block."""
    out = []
    for m in mark.finditer(text):
        steps: list[tuple[str, list[str]]] = []
        lines = m.group(3).splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("$ "):
                cmd = line[2:]
                while cmd.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd[:-1] + " " + lines[i].strip()
                steps.append((cmd.split("  #")[0].strip(), []))
            elif steps and line.strip():
                steps[-1][1].append(line)
            i += 1
        out.append((m.group(2), steps))
    return out


def shape(line: str) -> str:
    """What must match: the words, not the numbers, units or parenthesized details."""
    s = re.sub(r"\(.*\)", "", line) if "(" in line and ")" in line else line
    s = re.sub(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?", "#", s)
    s = re.sub(r"#\s*(ms|us|s)\b", "#t", s)
    return " ".join(s.split())


def test_readme_has_runnable_sessions():
    found = sessions(README.read_text())
    cmds = [c for _, steps in found for c, _ in steps]
    for verb in ("check", "workspace", "verify", "eval", "solve", "synth"):
        assert any(re.match(rf"cuda-agent {verb}\b", c.split("&&")[0].strip()) for c in cmds), verb


def _shown_in(shown: list[str], actual: str) -> list[str]:
    """Shown lines not found (in order) in the actual output."""
    got = [shape(line) for line in actual.splitlines()]
    missing, at = [], 0
    for line in shown:
        if line.strip() == "...":
            continue
        want = shape(line)
        for j in range(at, len(got)):
            if got[j] == want:
                at = j + 1
                break
        else:
            missing.append(line)
    return missing


def _env(tmp_path: Path) -> dict[str, str]:
    """This checkout first on the path, ``cuda-agent`` a command running it, progress as a user gets it."""
    env = dict(os.environ)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "cuda-agent"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cuda_agent.cli "$@"\n')
    exe.chmod(0o755)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("CUDA_AGENT_NO_PROGRESS", None)
    return env


def run_steps(steps: list[tuple[str, list[str]]], cwd: Path, env: dict[str, str], pwd: Path) -> Path:
    """Run the commands in order (a ``cd`` carries over); each must print what is shown."""
    for cmd, shown in steps:
        p = subprocess.run(["bash", "-c", f"set -e\n{cmd}\npwd > {pwd}"], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=900)
        output = p.stdout + p.stderr
        assert p.returncode == 0, f"$ {cmd}\n{output[-3000:]}"
        missing = _shown_in(shown, output)
        assert not missing, f"$ {cmd}\nthe document shows lines the run did not print:\n" + "\n".join(missing) + \
            f"\n--- the run printed:\n{output[-4000:]}"
        cwd = Path(pwd.read_text().strip())
    return cwd


@pytest.mark.slow
@pytest.mark.parametrize("n", range(len(sessions(README.read_text()))))
def test_readme_session_runs_as_shown(n, tmp_path):
    need, steps = sessions(README.read_text())[n]
    if need == "kernelbench" and not os.environ.get("CUDA_AGENT_KERNELBENCH"):
        pytest.skip("needs the KernelBench data: set CUDA_AGENT_KERNELBENCH")
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    run_steps(steps, work, _env(tmp_path), tmp_path / "pwd")


SKILL_SESSION = re.compile(r"()()```text\n(\$ cuda-agent .*?)```", re.S)
CODE = re.compile(r"^`([\w./]+)`:\n```\w+\n(.*?)```", re.S | re.M)


def test_skill_worked_examples_are_the_bundled_examples():
    from cuda_agent.sandbox.workspace import skill_text

    for device, example in (("cuda", "cuda_axpby"), ("cpu", "cpu_scaled_swish")):
        files = dict(CODE.findall(skill_text(device)))
        assert {"model_new.py"} < set(files) and any(f.endswith("_binding.cpp") for f in files), device
        for rel, code in files.items():
            assert code == (ROOT / "examples" / example / "solution" / rel).read_text(), (device, rel)


@pytest.mark.slow
def test_skill_session_runs_as_shown(tmp_path):
    """SKILL.md's session, in a CPU workspace: the commands on the starter, then the worked
    example's files as SKILL.md prints them, then the rest."""
    from cuda_agent.sandbox.workspace import skill_text

    text = skill_text("cpu")
    (_, steps), = sessions(text, SKILL_SESSION)
    env, pwd = _env(tmp_path), tmp_path / "pwd"
    ws = tmp_path / "ws"
    subprocess.run(["bash", "-c", f"cuda-agent workspace {ROOT / 'examples/cpu_scaled_swish/task.py'} {ws} --device cpu"],
                   env=env, check=True, capture_output=True)
    first = next(i for i, (cmd, _) in enumerate(steps) if cmd.startswith("cuda-agent compile"))
    run_steps(steps[:first], ws, env, pwd)
    for rel, code in CODE.findall(text):
        (ws / rel).write_text(code)
    run_steps(steps[first:], ws, env, pwd)
