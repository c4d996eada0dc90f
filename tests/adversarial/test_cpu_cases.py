"""The adversarial suite on the CPU (runs in CI): every attack is rejected for the reason
its ``case.json`` names (rule id, exploit class, verdict stage/round, probe), and every
legitimate-but-unusual solution passes with no violation.  See suite.py for the format."""

from __future__ import annotations

import pytest

from .suite import all_cases, run_case

CASES = all_cases("cpu")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cpu_case(case):
    out = run_case(case)
    if out.isolation_unavailable:
        pytest.skip(f"isolation unavailable on this machine (the check warned: {out.warnings}): {out.why}")
    assert out.met, out.report()
