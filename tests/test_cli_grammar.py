"""The CLI grammar over every command (docs/cli.md): a usage error exits 2 with one ``Error:``
line and no traceback, whichever command it is; every option has help text; the shared
options mean the same everywhere.  Cheap: nothing here builds or checks a kernel."""

from __future__ import annotations

import json

import click
import pytest
import torch
from click.testing import CliRunner

from cuda_agent.cli import main

from conftest import EXAMPLE

GPU = torch.cuda.is_available()
TASK, SOL = str(EXAMPLE / "task.py"), str(EXAMPLE / "solution")

# (command words, arguments with {tmp} for a scratch directory, words the one error line holds)
CASES = [
    ("check", [TASK, "{tmp}/none"], "does not exist"),
    ("check", ["{tmp}/none.py", SOL], "task not found"),
    ("check", [TASK, SOL, "--device", "gpu"], "'gpu' is not one of"),
    ("check", [TASK, SOL, "--reward", "fast"], "'fast' is not one of"),
    ("check", [TASK, SOL, "--rules", "loose"], "'loose' is not one of"),
    ("check", [TASK, SOL, "--n-sets", "0"], "--n-sets"),
    ("check", ["L1/12", SOL], "looks like a KernelBench reference"),
    ("workspace", ["{tmp}/none.py", "{tmp}/ws"], "task not found"),
    ("workspace", [TASK, "{tmp}/full"], "is not empty"),
    ("compile", ["{tmp}"], "is not inside a cuda-agent workspace"),
    ("verify", ["{tmp}/none"], "does not exist"),
    ("profile", ["{tmp}", "--reward", "fast"], "'fast' is not one of"),
    ("sanitize", ["{tmp}", "--tool", "leakcheck"], "'leakcheck' is not one of"),
    ("check", [TASK, SOL, "--tolerance", "tight"], "'tight' is not a valid float"),
    ("solve", ["{tmp}/none.py", "--model", "m"], "task not found"),
    ("solve", [TASK, "--backend", "magic"], "'magic' is not one of"),
    ("solve", [TASK, "--backend", "scripted"], "needs --script"),
    ("solve", [TASK, "--backend", "scripted", "--script", "{tmp}/none"], "does not exist"),
    ("solve", [TASK, "--n", "0"], "--n"),
    ("show", ["{tmp}/none"], "does not exist"),
    ("show", ["{tmp}/notes.jsonl"], "not a trajectory"),
    ("show", ["{tmp}"], "no trajectory.jsonl"),
    ("synth", ["--count", "0", "--out", "{tmp}/s"], "--count"),
    ("synth", ["--count", "2", "--out", "{tmp}/s", "--band-ms", "oops"], "LO,HI"),
    ("synth", ["--count", "2", "--out", "{tmp}/s", "--device", "tpu"], "'tpu' is not one of"),
    ("eval", ["{tmp}/none", "--out", "{tmp}/o"], "does not exist"),
    ("eval", ["{tmp}", "--out", "{tmp}/o", "--gpus", "zero"], "GPU ids like 0,1"),
    ("eval", ["{tmp}", "--out", "{tmp}/o", "--device", "cpu", "--gpus", "0"], "--gpus needs --device cuda"),
    ("eval", ["{tmp}", "--out", "{tmp}/o", "--suite", "{tmp}/none"], "does not exist"),
    ("eval", ["{tmp}", "--out", "{tmp}/o", "--device", "cpu", "--suite", str(EXAMPLE.parent / "cpu_suite" / "problems"),
              "--levels", "7"], "unknown level 7"),
    ("eval", ["{tmp}"], "Missing option '--out'"),
    ("pool run", ["{tmp}/none.jsonl"], "does not exist"),
    ("pool run", ["--gpus", "a,b"], "GPU ids like 0,1"),
    ("pool run", ["--backend", "cloud"], "'cloud' is not one of"),
    ("pool serve", ["--slots", "0"], "--slots"),
    ("pool status", ["--db", "{tmp}/none.sqlite"], "does not exist"),
    ("pool results", ["--db", "{tmp}/none.sqlite"], "does not exist"),
    ("train prepare", ["{tmp}/none.jsonl", "--out", "{tmp}/o"], "dataset not found"),
    ("train prepare", ["{tmp}/notes.jsonl", "--out", "{tmp}/o", "--reward", "fast"], "'fast' is not one of"),
    ("train rft", ["{tmp}/none", "--out", "{tmp}/r.parquet"], "no trajectory file or directory"),
    ("train stage", ["5", "--model", "m", "--data", "d.parquet"], "not in the range"),
    ("train stage", ["2", "--model", "m", "--data", "d.parquet", "--dry-run", "oops"], "key=value"),
    ("train chain", ["--out", "{tmp}/c", "--stages", "1,x"], "comma list of 0-4"),
    ("train chain", ["--out", "{tmp}/c", "--stages", "5"], "comma list of 0-4"),
    ("train chain", ["--out", "{tmp}/c", "--preset", "huge"], "'huge' is not one of"),
    ("nosuchverb", [], "No such command"),
]
if not GPU:  # cuda asked for on a machine without a GPU: refused before any work
    CASES += [("check", [TASK, SOL, "--device", "cuda"], "no CUDA GPU is visible"),
              ("check", [TASK, SOL, "--sanitize"], "GPU-only"),
              ("solve", [TASK, "--device", "cuda", "--model", "m"], "no CUDA GPU is visible"),
              ("eval", ["{tmp}", "--out", "{tmp}/o", "--device", "cuda"], "no CUDA GPU is visible"),
              ("synth", ["--count", "2", "--out", "{tmp}/s", "--device", "cuda"], "no CUDA GPU is visible"),
              ("pool run", ["--device", "cuda"], "no CUDA GPU is visible"),
              ("workspace", [TASK, "{tmp}/ws2", "--device", "cuda"], "no CUDA GPU is visible")]


@pytest.mark.parametrize("verb,args,words", CASES, ids=[f"{c[0]}:{c[2][:30]}" for c in CASES])
def test_usage_error_is_one_line_exit_2(verb, args, words, tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_AGENT_KERNELBENCH", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("the user's file\n")
    (tmp_path / "notes.jsonl").write_text(json.dumps({"not": "a trajectory"}) + "\n")
    argv = verb.split() + [a.format(tmp=tmp_path) for a in args]
    r = CliRunner().invoke(main, argv)
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2, (argv, r.output, r.exception)
    assert len(lines) == 1 and lines[0].startswith("Error: ") and words in lines[0], (argv, r.output)
    assert (tmp_path / "full" / "mine.txt").is_file() and len(list((tmp_path / "full").iterdir())) == 1


def _commands(group: click.Group, prefix: str = ""):
    for name, cmd in group.commands.items():
        yield prefix + name, cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + name + " ")


def test_every_command_is_in_the_table():
    tested = {c[0] for c in CASES}
    leaves = {n for n, c in _commands(main) if not isinstance(c, click.Group)}
    assert leaves <= tested, f"commands without a usage-error case: {sorted(leaves - tested)}"


def test_every_option_has_help_and_shared_options_agree():
    seen: dict[str, tuple] = {}
    for name, cmd in _commands(main):
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                assert p.help, f"{name} {p.opts[0]} has no help text"
                if p.opts[0] in ("--rules", "--reward", "--gpus", "--json", "--no-progress", "--kernelbench"):
                    sig = (type(p.type).__name__, p.is_flag, p.envvar, p.name)
                    assert seen.setdefault(p.opts[0], sig) == sig, f"{name} {p.opts[0]} differs from the others"
                if p.opts[0] == "--device":
                    assert list(p.type.choices) == ["cuda", "cpu"], name


def test_stage_lines_only_on_a_terminal(monkeypatch):
    from cuda_agent.cliopts import progress_on

    assert not progress_on(False)  # pytest's stderr is not a terminal
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert progress_on(False) and not progress_on(True) and not progress_on(False, as_json=True)
