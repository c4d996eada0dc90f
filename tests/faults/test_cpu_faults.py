"""Each CPU fault of catalog.py through ``check()``: the verdict names the fault (stage and
error text), what the fault left behind is gone, and the next check of the good example
passes.  The catalog makes the candidates from examples/cpu_scaled_swish."""

from __future__ import annotations

import re

import pytest

from faults.catalog import CPU_FAULTS, expected_problems, missing_features, run_fault


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", CPU_FAULTS, ids=[f.name for f in CPU_FAULTS])
def test_fault_gets_a_clear_verdict_and_the_next_check_passes(fault, tmp_path):
    why = missing_features(fault)
    if why:
        pytest.skip(why)
    out = run_fault(fault, tmp_path)
    if fault.build_fails:
        assert out.stage == "build", out.error
    elif fault.stages:
        assert out.stage in fault.stages, out.error
    else:
        assert out.verdict.startswith("ran correctly"), out.error
    if fault.text:
        assert re.search(fault.text, out.error or ""), out.error
    assert "Traceback" not in (out.error or "")
    assert out.problems == [], out.problems
    assert out.recovered and out.recovery_s is not None


def test_expectations_can_fail():
    """The catalog's verdict check rejects a verdict other than the expected one."""
    from types import SimpleNamespace

    fault = next(f for f in CPU_FAULTS if f.name == "segfault")
    wrong = SimpleNamespace(compiled=True, correct=False, error="run did not finish within 10 s (killed)",
                            verdict=SimpleNamespace(stage="timeout", correct=False))
    assert len(expected_problems(fault, wrong)) == 2
    harmless = next(f for f in CPU_FAULTS if f.name == "background-process")
    broken = SimpleNamespace(compiled=True, correct=False, error="RuntimeError: boom",
                             verdict=SimpleNamespace(stage="forward", correct=False))
    assert expected_problems(harmless, broken)
