"""Spare runners (process.Spares): a long-lived judge (a pool slot, an evaluation run) starts
the next check's runner ahead of time.  The check must then skip the runner's start-up, give
the same verdicts as a fresh runner, see solutions the spare could not see when it started
(one in the judge's /tmp is staged read-only), share nothing between the jobs (a spare is a
fresh process per job) and leave no process or directory behind."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from cuda_agent.sandbox.check import CheckOptions, check
from cuda_agent.sandbox.process import descendants, spares
from cuda_agent.tasks import load_file

ROOT = Path(__file__).resolve().parents[1]
TASK = load_file(ROOT / "examples" / "cpu_scaled_swish" / "task.py")

# pure torch, right numbers: kernelbench's rules pass it.  It leaves a file in /tmp and its own
# module state, and fails if it finds either from an earlier job: a runner or a /tmp shared
# between two checks would show here.
LEAVES_TRACES = textwrap.dedent('''\
    import os
    import torch
    import torch.nn as nn

    MARK = "/tmp/cuda-agent-spare-test-mark"


    class ModelNew(nn.Module):
        def __init__(self, features):
            super().__init__()
            self.scale = nn.Parameter(torch.randn(features))
            if os.path.exists(MARK) or os.environ.get("SPARE_TEST_SEEN"):
                raise RuntimeError("a trace of an earlier job is visible")
            open(MARK, "w").close()
            os.environ["SPARE_TEST_SEEN"] = "1"

        def forward(self, x):
            return x * torch.sigmoid(x) * self.scale
''')

OPTS = CheckOptions(device="cpu", rules="kernelbench", timing=False, baselines=False, n_sets=1)


def _spare_pids() -> set[int]:
    return set(descendants(os.getpid()))


@pytest.fixture
def spare_on():
    spares.enable()
    try:
        yield
    finally:
        spares.enable(False)


def test_checks_find_their_runner_started_and_agree_with_fresh_ones(tmp_path, spare_on):
    sol = tmp_path / "model_new.py"  # in the judge's /tmp: out of a spare's sight, staged for it
    sol.write_text(LEAVES_TRACES)
    first = check(TASK, sol, OPTS)  # no spare yet: a fresh runner (and one spare started)
    assert first.correct, first.error
    assert first.phases["start"] > 0.3, first.phases
    for _ in range(2):  # each finds the spare warm: no interpreter or torch import to wait for
        spares.settle()  # as a timed check does before its clocks (these checks time nothing)
        r = check(TASK, sol, OPTS)
        assert r.correct, r.error
        assert r.phases["start"] < first.phases["start"] / 2, (first.phases, r.phases)
        assert r.isolation == first.isolation
        assert (r.correct, r.exploit_classes, r.custom_calls) == (first.correct, first.exploit_classes,
                                                                  first.custom_calls)
    assert not Path("/tmp/cuda-agent-spare-test-mark").exists()  # it was the runner's private /tmp


def test_a_wrong_solution_is_rejected_alike_in_a_spare(tmp_path, spare_on):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(LEAVES_TRACES.replace("* self.scale", "* self.scale * 1.5"))
    verdicts = [check(TASK, wrong, OPTS)]
    spares.settle()
    verdicts.append(check(TASK, wrong, OPTS))
    assert [v.correct for v in verdicts] == [False, False]
    assert verdicts[0].verdict.stage == verdicts[1].verdict.stage
    assert verdicts[1].phases["start"] < verdicts[0].phases["start"]


def test_closing_leaves_no_spare_process_or_directory(tmp_path):
    # processes of session-wide fixtures (a synth worker kept for the whole run) are not ours
    before = _spare_pids()
    spares.enable()
    try:
        sol = tmp_path / "model_new.py"
        sol.write_text(LEAVES_TRACES)
        assert check(TASK, sol, OPTS).correct  # leaves one spare waiting
        assert _spare_pids() - before, "no spare was started"
        dirs = [d for sp in spares._waiting.values() for d in (sp.job_dir, sp.stage)]
        assert dirs and all(d.is_dir() for d in dirs)
    finally:
        spares.enable(False)
    assert not _spare_pids() - before, "a spare outlived spares.enable(False)"
    assert not [d for d in dirs if d.exists()]
