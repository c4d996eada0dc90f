"""The ``cuda-agent`` CLI: ``check --json`` (keys, exit codes), usage errors, and the
workspace verbs (workspace / compile / verify / profile) run inside a workspace."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from cuda_agent.cli import main

from conftest import FIXTURES, copy_example

KEYS = {"compiled", "correct", "error", "violations", "max_abs_err", "max_rel_err", "t_gen_ms", "t_eager_ms",
        "t_compile_ms", "speedup_eager", "speedup_compile", "reward"}


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def one_json(output: str) -> dict:
    lines = [l for l in output.splitlines() if l.strip()]
    assert len(lines) == 1, output[-2000:]
    return json.loads(lines[0])


PROGRAM = ("import atexit, sys\n"
           "from cuda_agent.cli import entry\n"
           "mark, sys.argv[1:] = sys.argv[1], sys.argv[2:]\n"
           "atexit.register(lambda: open(mark, 'w').write('ran'))\n"
           "entry()\n")


@pytest.mark.parametrize("args, status", [(["--version"], 0), (["check", "missing.py", "x"], 2),
                                          (["check", "--device"], 2)])
def test_the_program_keeps_its_status_output_and_exit_handlers(tmp_path, args, status):
    """``cuda-agent`` (``entry``) ends without the interpreter's teardown: the status, every line
    printed and the exit handlers (spare runners, Ray, logging) must come through all the same."""
    mark = tmp_path / "mark"
    p = subprocess.run([sys.executable, "-c", PROGRAM, str(mark), *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == status, p.stderr
    assert mark.read_text() == "ran"
    if status:
        assert p.stderr.startswith("Error: ") and len(p.stderr.splitlines()) == 1, p.stderr
    else:
        assert "version" in p.stdout and p.stderr == ""


def test_check_json_on_the_example(example_dir):
    r = run("check", example_dir / "task.py", example_dir / "solution", "--device", "cpu", "--json",
            "--no-compile-baseline", "--n-sets", "2")
    assert r.exit_code == 0, r.output
    d = one_json(r.output)
    assert KEYS <= set(d)
    assert d["compiled"] and d["correct"] and d["error"] is None and d["violations"] == []
    assert d["t_gen_ms"] > 0 and d["t_eager_ms"] > 0 and d["t_compile_ms"] is None
    assert d["speedup_eager"] == pytest.approx(d["t_eager_ms"] / d["t_gen_ms"])
    assert d["reward"] >= 1.0 and d["reward_scheme"] == "paper"


def test_check_failing_verdict_exits_zero(example_dir, tmp_path):
    sol = copy_example(tmp_path / "x2", {"kernels/swish.cpp": FIXTURES / "swish_times2.cpp"})
    r = run("check", example_dir / "task.py", sol, "--device", "cpu", "--json", "--no-timing",
            "--reward", "milestones", "--seed", "7")
    assert r.exit_code == 0, r.output
    d = one_json(r.output)
    assert d["compiled"] and not d["correct"] and "outside atol" in d["error"]
    assert d["reward"] == -1.0 and d["reward_scheme"] == "milestones"
    # the human summary says the same
    r = run("check", example_dir / "task.py", sol, "--device", "cpu", "--no-timing")
    assert r.exit_code == 0
    assert "correct   NO" in r.output and "reward    -1 (paper)" in r.output


def test_kernelbench_rules_flag(example_dir, tmp_path):
    ws = tmp_path / "ws"
    assert run("workspace", example_dir / "task.py", ws, "--device", "cpu").exit_code == 0
    r = run("check", example_dir / "task.py", ws / "model_new.py", "--device", "cpu", "--json", "--no-timing",
            "--rules", "kernelbench")
    d = one_json(r.output)
    assert d["correct"] and d["rules"] == "kernelbench"
    r = run("check", example_dir / "task.py", ws / "model_new.py", "--device", "cpu", "--json", "--no-timing")
    d = one_json(r.output)
    assert not d["correct"] and d["violations"][0]["rule"] == "torch-op-in-forward"


# Usage errors of every command: tests/test_cli_grammar.py.


def test_console_script_entry_point(tmp_path, example_dir):
    exe = shutil.which("cuda-agent")
    cmd = [exe] if exe else [sys.executable, "-m", "cuda_agent.cli"]
    p = subprocess.run([*cmd, "check", str(tmp_path / "nope.py"), str(example_dir / "solution"), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stdout == ""
    assert [l for l in p.stderr.splitlines() if l.startswith("Error:")] == [
        f"Error: task not found: {tmp_path / 'nope.py'} (a .py file, L<level>/<id> for KernelBench, or FILE.jsonl#ID)"]
    h = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=120)
    assert h.returncode == 0
    for verb in ("check", "workspace", "compile", "verify", "profile"):
        assert verb in h.stdout


def test_workspace_compile_verify_profile(example_dir, tmp_path, monkeypatch):
    from cuda_agent.sandbox.build import build

    assert build(example_dir / "solution" / "kernels", "cpu").ok  # (cached when other tests ran first)
    ws = tmp_path / "ws"
    r = run("workspace", example_dir / "task.py", ws, "--device", "cpu")
    assert r.exit_code == 0 and "SKILL.md" in r.output
    # the agent writes its solution into the workspace
    shutil.copy(example_dir / "solution" / "model_new.py", ws / "model_new.py")
    for f in (example_dir / "solution" / "kernels").iterdir():
        shutil.copy(f, ws / "kernels" / f.name)
    monkeypatch.chdir(ws / "kernels")  # the commands find the workspace from a subdirectory

    d = one_json(run("compile", "--json").output)
    assert d["compiled"] and d["error"] is None and d["t_gen_ms"] is None
    assert d["build"]["so_path"] and d["build"]["compiled"] == []  # objects shared with earlier builds

    d = one_json(run("verify", "--json").output)
    assert d["compiled"] and d["correct"] and d["verdict"]["n_sets"] == 7 and d["t_gen_ms"] is None  # 5 sets + 2 at other sizes

    r = run("profile")
    assert r.exit_code == 0, r.output
    assert "correct   yes" in r.output and "time      yours" in r.output and "torch.compile" in r.output
    assert "speedup" in r.output and "reward" in r.output

    # a broken kernel: compile reports file:line, still exit 0
    (ws / "kernels" / "swish.cpp").write_text((FIXTURES / "swish_compile_error.cpp").read_text())
    r = run("compile", str(ws))
    assert r.exit_code == 0
    assert "compiled  NO" in r.output and "swish.cpp:8" in r.output
