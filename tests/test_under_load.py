"""The evaluator under load, on the CPU backend (issue 18): hangs cost the task's time, not the
caps; verdicts do not change when the machine is busy; a baseline measured on a busy machine
does not move later rewards; and a solution that caches its output across calls gains nothing
in the timing loop (or is caught by a spot check)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox.check import CheckOptions, check, machine_load
from cuda_agent.sandbox.timing import Recipe

from conftest import EXAMPLE

QUICK = Recipe(warmup_ms=30, sample_ms=1.0, min_samples=10, max_samples=60, round_size=10, target=0.02,
               budget_s=2.0)

HEADER = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(features))

    def forward(self, x):
"""
HONEST = "        return x * torch.sigmoid(x) * self.scale\n"
SPIN = "        while True:\n            pass\n"


def solution(tmp_path: Path, body: str, name: str) -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "model_new.py").write_text(HEADER + body)
    return d / "model_new.py"


def opts(**kw) -> CheckOptions:
    base = dict(device="cpu", rules="kernelbench", compile_baseline=False, timing=False, baselines=False,
                n_sets=2, recipe=QUICK)
    return CheckOptions(**{**base, **kw})


# --- 3. hangs bounded by the task --------------------------------------------------------

def test_an_endless_loop_costs_the_tasks_time_not_the_cap(example_task, tmp_path):
    """Default caps (300 s): the reference takes ~1 ms a call, so a forward that never returns
    is a hang after the 20 s floor (stretched only by the machine's load), and the next check
    passes."""
    load = machine_load()
    t = time.perf_counter()
    r = check(example_task, solution(tmp_path, SPIN, "spin"), opts())
    took = time.perf_counter() - t
    assert not r.correct and r.verdict.stage == "timeout" and 18 in r.exploit_classes, r.error
    assert "killed as a hang" in r.error and "the reference takes" in r.error, r.error
    assert took < 30 * load, (took, load)
    ok = check(example_task, solution(tmp_path, HONEST, "honest"), opts())
    assert ok.correct, ok.error


def test_a_slow_first_call_that_makes_progress_is_not_a_hang(example_task, tmp_path, monkeypatch):
    """A first call that compiles (processes come and go, files are written) for longer than the
    hang floor is waited for, up to the cap.  (The static rules flag the test's stand-in for a
    compiler; the verdict of the run itself is what counts here.)"""
    body = ("        import os, subprocess, time\n"
            "        if not hasattr(self, 'jit'):\n"
            "            for i in range(12):  # a 'compiler' run every half second for 6 s\n"
            "                subprocess.run(['sleep', '0.5'])\n"
            "                open(f'jit_{i}.o', 'w').write('x' * 4096)\n"
            "            self.jit = True\n" + HONEST)
    monkeypatch.setattr("cuda_agent.sandbox.check.machine_load", lambda: 1.0)
    t = time.perf_counter()  # a 2 s hang budget, whatever the reference takes
    r = check(example_task, solution(tmp_path, body, "jit"), opts(hang_floor=2.0, hang_factor=0.0,
                                                                   verify_timeout=120, extra_round=False))
    assert r.verdict is not None and r.verdict.correct, r.error
    assert time.perf_counter() - t > 6
