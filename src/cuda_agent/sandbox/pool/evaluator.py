"""The pool's client for loops that check many solutions, and the choice pool-or-local.

:class:`PoolEvaluator` submits each check as one job to a pool's database that another
process serves (``cuda-agent pool serve``): the path for CPU-only processes such as verl's
agent-loop workers.  :func:`evaluator_for` is the one place that chooses between it and the
local :class:`~cuda_agent.sandbox.evaluator.SandboxEvaluator`.
"""

from __future__ import annotations

import time
from pathlib import Path

from ...tasks import Task
from ..evaluator import Evaluator, SandboxEvaluator, SerialEvaluator
from ..results import CheckResult

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
        from ..check import CheckOptions
        from .pool import Pool

        self.options = CheckOptions(**options)
        self.pool = Pool(db, device=self.options.device, backend=None, start=False)
        self.timeout, self.server_wait = float(timeout), float(server_wait)
        self.priority, self.tag = priority, tag

    def check(self, task: Task, solution_dir: Path) -> CheckResult:
        from .store import PoolError

        db = self.pool.store.db
        o = self.options

        def failed(msg: str) -> CheckResult:  # not the candidate's doing
            return CheckResult.failed(task, f"pool evaluator: {msg}", device=o.device, rules=o.rules,
                                      reward_scheme=o.reward, stage="pool")

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


def evaluator_for(pool_db: str | Path | None, *, serial: bool = False, timeout: float = 7200.0,
                  tag: str = "", **options) -> Evaluator:
    """The pool at ``pool_db`` (a :class:`PoolEvaluator`: ``timeout``, ``tag``) when it is set,
    else the sandbox in this process (one check at a time with ``serial``, for callers that run
    attempts in parallel threads on one device: the pool already runs one job per device).
    Keyword arguments are :class:`~cuda_agent.sandbox.check.CheckOptions` fields."""
    if pool_db:
        return PoolEvaluator(pool_db, timeout=timeout, tag=tag, **options)
    local = SandboxEvaluator(**options)
    return SerialEvaluator(local) if serial else local
