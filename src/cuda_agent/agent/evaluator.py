"""The loop's door to the evaluator: an :class:`Evaluator` protocol and the sandbox default.

The loop only needs ``check(task, solution_dir) -> CheckResult``; the default
:class:`SandboxEvaluator` calls :func:`cuda_agent.sandbox.check.check` (imported lazily)
with the device, rules and reward scheme of the run; :class:`PoolEvaluator` submits to a
GPU pool's database that a ``cuda-agent pool serve`` process serves (the path for CPU-only
processes such as verl's agent-loop workers).  Tests plug in their own object with the same
method.
"""

from __future__ import annotations

import time
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


POOL_DB_ENV = "CUDA_AGENT_POOL_DB"
"""Set in the agent's shell when its checks go to a pool: ``cuda-agent compile/verify/profile``
there submit to the same pool instead of checking in the shell (which may see no GPU)."""


class PoolEvaluator:
    """Check through the pool at ``db``, served by another process (``cuda-agent pool serve``).

    Each check is one job (the solution is copied at submit).  It never raises and never
    hangs: bad input, no server for ``server_wait`` s in a row, or no result after ``timeout``
    s give a failed CheckResult whose ``error`` says which.  Keyword arguments are
    :class:`~cuda_agent.sandbox.check.CheckOptions` fields."""

    def __init__(self, db: str | Path, *, timeout: float = 7200.0, server_wait: float = 120.0,
                 priority: int = 0, tag: str = "", **options) -> None:
        from ..sandbox.check import CheckOptions
        from ..sandbox.pool import Pool

        self.options = CheckOptions(**options)
        self.pool = Pool(db, device=self.options.device, backend=None, start=False)
        self.timeout, self.server_wait = float(timeout), float(server_wait)
        self.priority, self.tag = priority, tag

    def check(self, task: Task, solution_dir: Path) -> CheckResult:
        from ..sandbox.pool import PoolError

        db = self.pool.store.db

        def failed(msg: str) -> CheckResult:
            return pool_failure(task, self.options, f"pool evaluator: {msg}")

        try:
            jid = self.pool.submit(task, solution_dir, self.options, priority=self.priority, tag=self.tag)
        except PoolError as e:
            return failed(f"submit to {db} refused: {e}")
        deadline = time.time() + self.timeout
        unserved_since: float | None = None
        while True:
            now = time.time()
            try:
                return self.pool.wait([jid], timeout=min(1.0, max(0.0, deadline - now)), poll=0.5)[jid]
            except PoolError:  # nobody holds the lock right now (not started, or restarting)
                unserved_since = unserved_since or now
                if now - unserved_since >= self.server_wait:
                    return failed(f"no pool served {db} for {self.server_wait:g} s (job {jid} stays queued); "
                                  f"start one: cuda-agent pool serve --db {db}")
                time.sleep(min(1.0, self.server_wait))
            except TimeoutError:
                unserved_since = None
            except Exception as e:  # a broken database must cost one check, not the episode
                return failed(f"reading {db} failed: {type(e).__name__}: {e}")
            if time.time() >= deadline:
                try:
                    status = self.pool.job(jid).status
                except Exception as e:
                    status = f"unreadable: {e}"
                return failed(f"job {jid} not finished after {self.timeout:g} s (status {status}) at {db}")


def pool_failure(task: Task, options, message: str) -> CheckResult:
    """A failed CheckResult for a check the pool could not deliver (not the candidate's doing)."""
    from .. import reward as rewards
    from ..sandbox.results import Verdict

    res = CheckResult(task_id=task.id, task_sha=task.sha, device=options.device, rules=options.rules,
                      reward_scheme=options.reward, error=message)
    res.verdict = Verdict(correct=False, error=message, stage="pool")
    try:
        res.reward = rewards.compute(options.reward, rewards.Outcome(compiled=False, correct=False))
    except KeyError:
        res.reward = None
    return res


def rank(r: CheckResult) -> tuple:
    """Order of "better": correct first, then speedup vs torch.compile, then vs eager."""
    return (bool(r.correct and r.compiled), r.speedup_compile or 0.0, r.speedup_eager or 0.0,
            r.reward if r.reward is not None else float("-inf"))
