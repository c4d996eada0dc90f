"""``cuda-agent eval`` end to end on real KernelBench level-1 problems (shrunk, see conftest.py),
CPU only, through the real evaluator: verdicts, metrics, report files and resuming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cuda_agent.cli import main


def invoke(*args):
    return CliRunner().invoke(main, ["eval", *map(str, args)])


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def by_label(rows: list[dict]) -> dict[str, dict]:
    return {f"L{r['level']}/{r['problem_id']}": r for r in rows}


def test_eval_end_to_end_timed_through_the_pool_then_resumes(small_kernelbench, solutions, tmp_path):
    out = tmp_path / "out"
    args = [solutions, "--out", out, "--kernelbench", small_kernelbench, "--levels", "1", "--ids", "1,12,19,23",
            "--device", "cpu", "--rules", "kernelbench", "--no-progress"]
    r = invoke(*args, "--workers", "2")
    assert r.exit_code == 0, r.output
    rows = rows_of(out)
    assert len(rows) == 4
    got = by_label(rows)

    ok = got["L1/12"]
    assert ok["status"] == "checked" and ok["compiled"] and ok["correct"], ok
    assert ok["error"] is None and ok["exploit_classes"] == []
    assert ok["t_gen_ms"] > 0 and ok["t_eager_ms"] > 0 and ok["t_compile_ms"] > 0
    assert ok["speedup_eager"] == pytest.approx(ok["t_eager_ms"] / ok["t_gen_ms"])
    assert ok["speedup_compile"] == pytest.approx(ok["t_compile_ms"] / ok["t_gen_ms"])
    assert ok["solution"].endswith("12.py") and ok["origin"] == "solutions"

    wrong = got["L1/19"]
    assert wrong["status"] == "checked" and wrong["compiled"] and not wrong["correct"]
    assert wrong["stage"] == "compare" and "atol" in wrong["error"], wrong
    assert wrong["t_gen_ms"] is None and wrong["speedup_eager"] is None

    raises = got["L1/23"]
    assert raises["status"] == "checked" and not raises["correct"]
    assert "this kernel is not written yet" in raises["error"] and "\n" not in raises["error"]

    missing = got["L1/1"]
    assert missing["status"] == "missing" and not missing["compiled"] and not missing["correct"]
    assert "no solution for L1/1" in missing["error"]

    m = json.loads((out / "metrics.json").read_text())["metrics"]
    l1 = m["levels"]["L1"]
    faster_e = ok["speedup_eager"] > 1.0
    faster_c = ok["speedup_compile"] > 1.0
    assert (l1["tasks"], l1["passed"]) == (4, 1)
    assert l1["pass_rate"] == pytest.approx(25.0)
    assert l1["faster_eager_rate"] == pytest.approx(25.0 * faster_e)
    assert l1["faster_compile_rate"] == pytest.approx(25.0 * faster_c)
    assert l1["geomean_eager"] == pytest.approx(ok["speedup_eager"])
    assert l1["geomean_compile"] == pytest.approx(ok["speedup_compile"])
    assert m["overall"]["tasks"] == 4 and m["overall"]["pass_rate"] == pytest.approx(25.0)

    report = (out / "report.md").read_text()
    assert "| split | tasks | pass | faster vs eager | faster vs compile | geomean vs eager | geomean vs compile |" \
        in report
    assert "| L1 | 4 | 25.0 |" in report and "paper" in report and "2.48x" in report
    for label, verdict in (("L1/12", "correct"), ("L1/19", "incorrect"), ("L1/23", "raised"), ("L1/1", "missing")):
        assert any(line.startswith(f"| {label} |") and f"| {verdict} |" in line for line in report.splitlines())
    for png in ("speedup_vs_compile.png", "rates.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert "L1       25.0" in r.output or "L1      4     25.0" in r.output

    # the same command again: nothing is re-checked (no row appended), same metrics
    r2 = invoke(*args, "--workers", "1")
    assert r2.exit_code == 0, r2.output
    assert r2.output.count("[from an earlier run]") == 4
    assert len(rows_of(out)) == 4
    assert json.loads((out / "metrics.json").read_text())["metrics"] == m

    # an eval killed before L1/23's row was written: only that problem runs again
    lines = (out / "results.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["problem_id"] != 23]
    (out / "results.jsonl").write_text("\n".join(kept) + "\n")
    r3 = invoke(*args)
    assert r3.exit_code == 0, r3.output
    assert r3.output.count("[from an earlier run]") == 3
    again = rows_of(out)
    assert len(again) == 4 and again[-1]["problem_id"] == 23 and not again[-1]["correct"]


def test_untimed_run_with_a_progress_bar_and_a_malformed_solution(small_kernelbench, solutions, tmp_path):
    (solutions / "L1" / "19" / "model_new.py").write_text("class ModelNew(:\n    pass\n")
    out = tmp_path / "out"
    r = invoke(solutions, "--out", out, "--kernelbench", small_kernelbench, "--levels", "1", "--ids",
               "L1/12,L1/1,L1/19", "--device", "cpu", "--rules", "kernelbench", "--no-timing")
    assert r.exit_code == 0, r.output
    got = by_label(rows_of(out))
    assert set(got) == {"L1/12", "L1/1", "L1/19"}
    assert got["L1/12"]["correct"] and got["L1/12"]["speedup_eager"] is None
    bad = got["L1/19"]
    assert bad["status"] == "checked" and not bad["compiled"] and "syntax error" in bad["error"], bad
    l1 = json.loads((out / "metrics.json").read_text())["metrics"]["levels"]["L1"]
    assert l1["pass_rate"] == pytest.approx(100 / 3) and l1["faster_eager_rate"] is None
    assert l1["geomean_compile"] is None
    report = (out / "report.md").read_text()
    assert "| L1 | 3 | 33.3 | n/a | n/a | n/a | n/a |" in report
    assert any(line.startswith("| L1/19 |") and "| invalid |" in line for line in report.splitlines())


def test_strict_rules_reject_a_torch_op_in_forward(small_kernelbench, solutions, tmp_path):
    out = tmp_path / "out"
    r = invoke(solutions, "--out", out, "--kernelbench", small_kernelbench, "--levels", "1", "--ids", "12",
               "--device", "cpu", "--rules", "strict", "--no-timing", "--no-progress")
    assert r.exit_code == 0, r.output
    row = rows_of(out)[0]
    assert not row["correct"] and row["exploit_classes"], row
    assert json.loads((out / "metrics.json").read_text())["metrics"]["overall"]["pass_rate"] == 0.0


@pytest.mark.parametrize("case, expect", [
    ("missing-dir", "does not exist"),
    ("unknown-level", "unknown level 7"),
    ("bad-entry", "cannot tell the problem id"),
    ("bad-ids", "not a problem id"),
    ("no-such-problem", "no problem 999"),
    ("empty", "holds no solutions"),
])
def test_bad_input_is_one_clear_line(case, expect, small_kernelbench, solutions, tmp_path):
    root, extra = solutions, []
    if case == "missing-dir":
        root = tmp_path / "nope"
    elif case == "unknown-level":
        extra = ["--levels", "1,7"]  # the last --levels wins
    elif case == "bad-entry":
        (solutions / "L1" / "notes.py").write_text("x = 1\n")
    elif case == "bad-ids":
        extra = ["--ids", "twelve"]
    elif case == "no-such-problem":
        extra = ["--ids", "999"]
    elif case == "empty":
        root = tmp_path / "empty"
        root.mkdir()
    r = invoke(root, "--out", tmp_path / "out", "--kernelbench", small_kernelbench, "--device", "cpu",
               "--no-progress", "--levels", "1", *extra)
    assert r.exit_code == 2  # a usage error (docs/cli.md)
    assert isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and expect in errors[0], r.output


def test_no_dataset_is_one_clear_line(solutions, tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_AGENT_KERNELBENCH", raising=False)
    r = invoke(solutions, "--out", tmp_path / "out", "--device", "cpu")
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "no KernelBench dataset" in r.output
