"""The loop's door to the evaluator: an :class:`Evaluator` protocol and the sandbox default.

The loop only needs ``check(task, solution_dir) -> CheckResult``; the default
:class:`SandboxEvaluator` calls :func:`cuda_agent.sandbox.check.check` (imported lazily)
with the device, rules and reward scheme of the run.  Tests and remote pools plug in
their own object with the same method.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..sandbox.results import CheckResult
from ..tasks import Task


class Evaluator(Protocol):
    def check(self, task: Task, solution_dir: Path) -> CheckResult:
        ...


class SandboxEvaluator:
    """Build, verify, time and reward through the local sandbox; keyword arguments are
    :class:`~cuda_agent.sandbox.check.CheckOptions` fields (one definition of the options)."""

    def __init__(self, **options) -> None:
        from ..sandbox.check import CheckOptions

        self.options = CheckOptions(**options)

    def check(self, task: Task, solution_dir: Path) -> CheckResult:
        from ..sandbox.check import check

        return check(task, solution_dir, self.options)


def rank(r: CheckResult) -> tuple:
    """Order of "better": correct first, then speedup vs torch.compile, then vs eager."""
    return (bool(r.correct and r.compiled), r.speedup_compile or 0.0, r.speedup_eager or 0.0,
            r.reward if r.reward is not None else float("-inf"))
