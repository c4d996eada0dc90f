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
        self.scale = nn.Parameter(torch.randn(features))  # as Model: the same seed, the same values

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
    # the seconds it hung are booked to the round that hung, not to closing the job
    assert r.phases["verify"] > r.phases.get("close", 0.0) and r.phases["verify"] >= 5, r.phases
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


# --- 6. timing that a cache cannot fool -------------------------------------------------

CACHES = {
    # remembered by the inputs' address: stale as soon as the values change in place
    "address": ("        key = x.data_ptr()\n"),
    # by shape: every input of the task has the same one
    "shape": ("        key = tuple(x.shape)\n"),
    # by address plus a few sampled values (the measured hole: reward 3 at "2280x" on CPU)
    "checksum": ("        f = x.reshape(-1)\n"
                 "        key = (x.data_ptr(), float(f[0]), float(f[f.numel() // 2]), float(f[-1]))\n"),
}
CACHED = ("        if not hasattr(self, 'memo'):\n"
          "            self.memo = {{}}\n"
          "{key}"
          "        if key not in self.memo:\n"
          "            if len(self.memo) >= 64:  # the 64 most recent inputs\n"
          "                del self.memo[next(iter(self.memo))]\n"
          "            self.memo[key] = x * torch.sigmoid(x) * self.scale\n"
          "        return self.memo[key]\n")


def test_the_input_pool_gives_every_timed_call_new_values():
    import random

    import torch

    from cuda_agent.sandbox.timing import InputPool, measure

    bases = [[torch.randn(64, 33), torch.arange(5)] for _ in range(2)]
    pool = InputPool(bases, "cpu", 1000, random.Random(0))
    assert pool.n == 1000 and all((s[0].data_ptr() - pool.sets[0][0].data_ptr()) % 512 == 0 for s in pool.sets)
    seen: set = set()
    timed = repeats = 0

    def call(i: int) -> None:
        nonlocal repeats, timed
        x, idx = pool.sets[i]
        key = (x.data_ptr(), float(x[0, 0]), float(x[-1, -1]))
        if refreshed:  # the warm-up and the estimate of k run on the drawn values, over and over
            timed += 1
            repeats += key in seen
        seen.add(key)
        assert torch.equal(idx, torch.arange(5))  # integer inputs keep their values

    refreshed: list = []

    def refresh(indices: list[int]) -> None:
        refreshed.append(len(indices))
        pool.refresh(indices)

    r = measure(call, pool.n, "cpu", QUICK, refresh=refresh)
    assert 1 < r["calls_per_sample"] <= pool.n
    assert timed > 1000 and repeats == 0, (timed, repeats)
    ratio = pool.sets[0][0] / bases[0][0]
    assert float(ratio.min()) >= 0.6 and float(ratio.max()) <= 1.6  # signs, zeros and scale kept


@pytest.mark.parametrize("kind", sorted(CACHES))
def test_a_cached_output_earns_nothing(example_task, tmp_path, kind):
    """Cached by address or shape: rejected (a stale output in verification or in a spot check
    inside the timing loop), its class named.  By a checksum of sampled values: every timed
    call has new values, so the cache never hits and the solution times like the honest one."""
    f = solution(tmp_path, CACHED.format(key=CACHES[kind]), kind)
    honest_f = solution(tmp_path, HONEST, "honest") if kind == "checksum" else None
    honest = [check(example_task, honest_f, opts(timing=True, n_sets=3))] if honest_f else []
    r = check(example_task, f, opts(timing=True, n_sets=3))
    if kind == "checksum":
        # (without fresh inputs in the timing loop it timed 0.005 ms a call against the honest
        # solution's 0.3 ms: a "60x" speedup on this task).  The honest one is timed before and
        # after it and the faster time kept: a busy moment on shared cores can slow one of them 8x.
        assert r.correct, r.error
        honest.append(check(example_task, honest_f, opts(timing=True, n_sets=3)))
        fastest = min(h.t_gen_ms for h in honest)
        assert r.t_gen_ms > 0.2 * fastest, (r.timing, [h.timing for h in honest])  # noise, not 60x
    else:
        assert not r.correct and r.reward == -1, r.to_dict()
        assert set(r.exploit_classes) & {7, 12}, (r.exploit_classes, r.error)


# --- machine load: CPU stress beside the checks ------------------------------------------

class Stress:
    """``per_core`` busy processes per core, started and killed by pid."""

    def __init__(self, per_core: int = 4) -> None:
        self.n = per_core * (os.cpu_count() or 1)
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Stress":
        for _ in range(self.n):
            self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        time.sleep(1.0)
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


TWICE = ("        y = x * torch.sigmoid(x) * self.scale\n"
         "        return (y + x * torch.sigmoid(x) * self.scale) / 2\n")


def _busiest_processes(n: int = 5) -> str:
    out = subprocess.run(["ps", "-eo", "pcpu,pid,args", "--sort=-pcpu"], capture_output=True, text=True).stdout
    return "\n".join(line[:160] for line in out.splitlines()[: n + 1])


@pytest.mark.slow
def test_a_baseline_measured_on_a_busy_machine_does_not_move_a_later_reward(example_task, tmp_path):
    """The baseline is first measured under CPU stress (what the issue saw: eager 19.96 ms for a
    0.62 ms task, then "15x" and reward 2 for a solution twice as slow as eager).  Then, on a
    quiet machine, a solution that does the work twice is checked: its speedup is that of
    the quiet machine (about 0.5, reward 1), because the busy baseline is not comparable and
    is measured again."""
    from cuda_agent.sandbox import baselines

    recipe = Recipe(warmup_ms=30, sample_ms=1.0, min_samples=10, max_samples=60, round_size=10, target=0.02,
                    budget_s=2.5)  # a cache key of its own
    with Stress():
        busy = baselines.conditions("cpu")
        poisoned = baselines.get(example_task, "cpu", recipe, 2, compile=False, under=busy)
    assert "error" not in poisoned, poisoned
    assert busy["cpu"] > 1.5, busy  # the probe sees the stress
    # and so does the measurement's own record, taken after seconds of waiting for its runner (the
    # probe's busy loop alone read 1.0-1.09 there for 2 of 8 such measurements: cached as quiet)
    assert poisoned["conditions"]["cpu"] > 1.5, poisoned
    quiet = baselines.conditions("cpu")  # the premise: the stress is gone (else name what is running)
    assert quiet["cpu"] < 1.35, (quiet, _busiest_processes())
    r = check(example_task, solution(tmp_path, TWICE, "twice"), opts(timing=True, baselines=True, recipe=recipe))
    assert r.correct, r.error
    if poisoned.get("stable"):  # cached: not comparable with this quiet check, so measured again beside it
        assert any(w.startswith("baselines measured again") for w in r.warnings), r.warnings
    # (the eager times of two measurements minutes apart are no yardstick on a shared 2-core VM: quiet, stable
    # ones of this task read 0.50-0.99 ms here; the ratio of the candidate to the baseline beside it is)
    assert r.speedup_eager < 0.85 and r.reward == 1, (r.speedup_eager, r.t_gen_ms, r.t_eager_ms, poisoned)


def test_a_measurement_on_a_busy_machine_records_it(example_task):
    """The judge's thread, back from seconds of waiting for its runner, may get a core to itself
    for tens of ms beside one busy process per core and more: the probe's busy loop alone read
    1.0-1.09 before and after 2 of 8 such measurements here.  Each one's record says busy."""
    from cuda_agent.sandbox import baselines

    recipe = Recipe(warmup_ms=10, sample_ms=1.0, min_samples=10, max_samples=30, round_size=10, budget_s=0.5)
    with Stress():
        seen = [baselines.measure(example_task, "cpu", recipe, 1, compile=False).get("conditions") for _ in range(4)]
    assert all(c and c["cpu"] > 1.5 for c in seen), seen


def _verdict(r) -> tuple:
    """Passed or not, a hang or not, caught as an exploit or not (which defence catches an
    address-keyed cache first depends on where the allocator puts the next input set)."""
    return (r.correct, r.verdict is not None and r.verdict.stage == "timeout", bool(r.exploit_classes))


@pytest.mark.slow
def test_verdicts_are_the_same_alone_and_beside_cpu_stress(example_task, tmp_path):
    """A small mixed batch - honest, wrong, cached by address, endless loop - gives the same
    verdicts with the machine to itself and with 2 busy processes per core beside it."""
    batch = {"honest": HONEST, "wrong": "        return 2 * x * torch.sigmoid(x) * self.scale\n",
             "cached": CACHED.format(key=CACHES["address"]), "spin": SPIN}
    files = {k: solution(tmp_path, body, k) for k, body in batch.items()}
    o = opts(timing=True, extra_round=False, hang_floor=5.0)
    alone = {k: _verdict(check(example_task, f, o)) for k, f in files.items()}
    with Stress(per_core=2):
        busy = {k: _verdict(check(example_task, f, o)) for k, f in files.items()}
    assert alone == busy
    assert alone == {"honest": (True, False, False), "wrong": (False, False, False),
                     "cached": (False, False, True), "spin": (False, True, True)}
