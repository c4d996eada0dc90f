"""Agent runs (``cuda-agent solve --out`` directories) as eval input: which snapshot is scored,
and that it is re-checked rather than trusted (a trajectory whose record lies is caught)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from .conftest import CORRECT_12

from cuda_agent.agent.trajectory import Trajectory, Turn, append_jsonl
from cuda_agent.cli import main
from cuda_agent.eval.solutions import find
from cuda_agent.tasks import load_kernelbench

WRONG_12 = CORRECT_12.replace("return B * A[:, None]", "return 2.0 * B * A[:, None]")
LIE = {"compiled": True, "correct": True, "speedup_eager": 99.0, "speedup_compile": 99.0, "reward": 3}


def solve_dir(root: Path, task, best: str, turns: dict[str, str], moved: bool = False) -> Path:
    """A run directory laid out as ``cuda-agent solve --out`` leaves it (attempt_0/...)."""
    a = root / "attempt_0"
    snaps = {}
    for name, src in turns.items():
        d = a / "snapshots" / name
        d.mkdir(parents=True)
        (d / "model_new.py").write_text(src)
        snaps[name] = d
    (a / "best").mkdir(parents=True)
    (a / "best" / "model_new.py").write_text(best)
    (a / "workspace").mkdir()
    (a / "workspace" / "model_new.py").write_text(best)
    prefix = Path("/no/longer/here") if moved else a
    t = Trajectory(id="run-0", task_id=task.id, task_sha=task.sha, model="m", backend="scripted",
                   turns=[Turn(index=i, llm_seconds=0, tool_seconds=0, prompt_tokens=0, completion_tokens=0,
                               context_tokens=0, finish_reason="tool_calls", check={"compiled": True, "correct": False},
                               snapshot=str(prefix / "snapshots" / n)) for i, n in enumerate(turns)],
                   best=LIE, best_path=str(prefix / "best"), best_reward=3, workspace=str(prefix / "workspace"))
    append_jsonl(a / "trajectory.jsonl", t)
    return a


def test_find_picks_the_kept_best_and_follows_a_moved_run(small_kernelbench, tmp_path):
    task = load_kernelbench(small_kernelbench, 1, 12)[0]
    a = solve_dir(tmp_path / "runs" / "r1", task, CORRECT_12, {"turn001-aa": WRONG_12, "turn002-bb": CORRECT_12},
                  moved=True)
    found = find(tmp_path / "runs", [task])
    assert [c.path for c in found.candidates["L1/12"]] == [a / "best"]
    assert found.candidates["L1/12"][0].origin.endswith("#run-0:best")
    every = find(tmp_path / "runs", [task], all_snapshots=True).candidates["L1/12"]
    # distinct contents only: the wrong turn snapshot and one copy of the correct code
    assert sorted(c.path.name for c in every) == ["turn001-aa", "turn002-bb"]


def test_a_lying_record_is_rechecked_and_all_snapshots_finds_the_good_one(small_kernelbench, tmp_path):
    task = load_kernelbench(small_kernelbench, 1, 12)[0]
    solve_dir(tmp_path / "runs", task, WRONG_12, {"turn001-aa": CORRECT_12.replace("B * A", "B - A"), "turn002-bb": CORRECT_12})
    base = ["eval", str(tmp_path / "runs"), "--kernelbench", str(small_kernelbench), "--levels", "1", "--ids",
            "1,12", "--device", "cpu", "--rules", "kernelbench", "--no-timing", "--no-progress"]
    r = CliRunner().invoke(main, base + ["--out", str(tmp_path / "o1")])
    assert r.exit_code == 0, r.output
    rows = {json.loads(x)["problem_id"]: json.loads(x) for x in (tmp_path / "o1" / "results.jsonl").read_text().split("\n") if x}
    assert rows[12]["status"] == "checked" and rows[12]["compiled"] and not rows[12]["correct"]
    assert rows[12]["speedup_compile"] is None and rows[12]["solution"].endswith("best")
    assert rows[1]["status"] == "missing"

    r = CliRunner().invoke(main, base + ["--out", str(tmp_path / "o2"), "--all-snapshots"])
    assert r.exit_code == 0, r.output
    row = [json.loads(x) for x in (tmp_path / "o2" / "results.jsonl").read_text().split("\n") if x
           and json.loads(x)["problem_id"] == 12][0]
    assert row["correct"] and row["candidates"] == 3 and row["solution"].endswith("turn002-bb")


def test_a_real_solve_run_is_found_and_rechecked(small_kernelbench, tmp_path):
    """``cuda-agent solve`` (scripted back-end replaying a correct solution) then ``eval`` on its output."""
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "model_new.py").write_text(CORRECT_12)
    runs = tmp_path / "runs"
    r = CliRunner().invoke(main, ["solve", "L1/12", "--kernelbench", str(small_kernelbench), "--backend", "scripted",
                                  "--script", str(replay), "--device", "cpu", "--rules", "kernelbench",
                                  "--out", str(runs / "L1_12")])
    assert r.exit_code == 0, r.output
    assert (runs / "L1_12" / "attempt_0" / "trajectory.jsonl").is_file()
    r = CliRunner().invoke(main, ["eval", str(runs), "--out", str(tmp_path / "out"), "--kernelbench",
                                  str(small_kernelbench), "--levels", "1", "--ids", "12", "--device", "cpu",
                                  "--rules", "kernelbench", "--no-timing", "--no-progress"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().split("\n") if x]
    assert len(rows) == 1
    row = rows[0]
    assert row["status"] == "checked" and row["correct"] and row["seconds"] > 0
    assert row["origin"].endswith(":best") and row["solution"] == str(runs / "L1_12" / "attempt_0" / "best")
    assert row["speedup_eager"] is None  # re-checked here without timing: the recorded speedups are not copied
