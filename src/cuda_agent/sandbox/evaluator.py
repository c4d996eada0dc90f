"""The door to the evaluator for loops that check many solutions: an :class:`Evaluator`
protocol and the local default.

A caller (the agent's loop, verl's agent-loop workers, ``cuda-agent check``) only needs
``check(task, solution_dir) -> CheckResult``.  :class:`SandboxEvaluator` calls
:func:`cuda_agent.sandbox.check.check` in this process (imported lazily, so importing this
module does not load torch); the pool's client, ``PoolEvaluator``, and the factory that
chooses between the two, ``evaluator_for``, are in ``sandbox/pool/evaluator.py``.  Tests plug
in their own object with the same method.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from ..tasks import Task
from .results import CheckResult


class Evaluator(Protocol):
    def check(self, task: Task, solution_dir: Path) -> CheckResult:
        ...


class SandboxEvaluator:
    """Build, verify, time and reward through the local sandbox; keyword arguments are
    :class:`~cuda_agent.sandbox.check.CheckOptions` fields (one definition of the options)."""

    def __init__(self, **options) -> None:
        from .check import CheckOptions

        self.options = CheckOptions(**options)

    def check(self, task: Task, solution_dir: Path) -> CheckResult:
        from .check import check

        return check(task, solution_dir, self.options)


class SerialEvaluator:
    """Lets one check run at a time (parallel attempts share the device; timings must not overlap)."""

    def __init__(self, inner: Evaluator) -> None:
        self.inner = inner
        self._lock = threading.Lock()

    def check(self, task: Task, solution_dir: Path) -> CheckResult:
        with self._lock:
            return self.inner.check(task, solution_dir)
