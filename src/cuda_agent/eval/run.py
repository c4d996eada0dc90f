"""Check every selected problem's solution(s) and persist one row per problem, resumably.

Checks go through the evaluator (``sandbox.check.check``): in this process one after the
other (``workers=1``, no GPUs listed) or through the pool's local back-end (CPU slots or one
worker per GPU).  Each finished problem is appended to ``OUT/results.jsonl`` at once; a row
whose key (task sha + candidate contents + check options) is already there is not checked
again, so an interrupted eval resumes where it stopped (the pool's own database,
``OUT/pool-<device>.sqlite``, also keeps jobs that finished after the last row was written).  A
problem without a solution is a failure row; a solution that cannot be submitted or whose
check breaks is a failure row too, never dropped.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ..sandbox.results import rank
from ..tasks import Task
from .rows import FAILED, MISSING, ResultRow, first_line, from_check
from .solutions import Candidate, Found
from .suite import label

RESULTS = "results.jsonl"


@dataclass
class EvalOptions:
    """How the solutions are checked."""

    device: str = "cuda"
    rules: str = "strict"
    reward: str = "paper"
    timing: bool = True
    """Time the solutions and the eager / torch.compile baselines (speedups need it)."""
    workers: int = 1
    """Parallel checks: CPU slots on ``cpu``, GPUs on ``cuda``; 1 without ``gpus`` runs in this process."""
    gpus: list[int] | None = None
    n_sets: int = 5
    on_stage: Callable[[str, str, float], None] | None = field(default=None, repr=False)
    """Checks in this process: told (problem label, stage, seconds) as each stage of a check ends."""

    def check_options(self):
        from ..sandbox.check import CheckOptions

        return CheckOptions(device=self.device, rules=self.rules, reward=self.reward, timing=self.timing,
                            baselines=self.timing, n_sets=self.n_sets)

    def signature(self) -> str:
        """What changes a verdict (not how many workers run the checks)."""
        return json.dumps({"device": self.device, "rules": self.rules, "reward": self.reward,
                           "timing": self.timing, "n_sets": self.n_sets}, sort_keys=True)

    @property
    def uses_pool(self) -> bool:
        return self.workers > 1 or bool(self.gpus)


@dataclass
class Planned:
    """A problem, the candidates to check for it and its resume key."""

    task: Task
    candidates: list[Candidate]
    key: str
    results: list[ResultRow] = field(default_factory=list)

    def base(self) -> ResultRow:
        m = self.task.meta
        return ResultRow(level=int(m["level"]), problem_id=int(m["problem_id"]), name=str(m.get("name", "")),
                         task_id=self.task.id, key=self.key, candidates=len(self.candidates))


def plan(tasks: list[Task], found: Found, options: EvalOptions) -> list[Planned]:
    out = []
    for t in tasks:
        cands = found.candidates.get(label(t), [])
        blob = json.dumps([t.sha, [c.digest() for c in cands], options.signature()])
        out.append(Planned(t, cands, hashlib.sha256(blob.encode()).hexdigest()[:24]))
    return out


class ResultsFile:
    """``OUT/results.jsonl``: append-only rows; the last row of a key wins."""

    def __init__(self, out: str | Path) -> None:
        self.path = Path(out) / RESULTS

    def load(self) -> dict[str, ResultRow]:
        done: dict[str, ResultRow] = {}
        if not self.path.is_file():
            return done
        for line in self.path.read_text().splitlines():
            try:
                row = ResultRow.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError):
                continue  # a line cut short by a kill: that problem runs again
            if row.key:
                done[row.key] = row
        return done

    def append(self, row: ResultRow) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(row.to_dict()) + "\n")
            f.flush()


def missing_row(p: Planned, solutions: str | Path) -> ResultRow:
    row = p.base()
    row.status = MISSING
    row.error = f"no solution for {label(p.task)} in {solutions}"
    return row


def _failed(p: Planned, c: Candidate, error: str) -> ResultRow:
    row = p.base()
    row.status, row.solution, row.origin = FAILED, str(c.path), c.origin
    row.error = first_line(error)
    return row


def _checked(p: Planned, c: Candidate, result) -> ResultRow:
    row = from_check(p.base(), result)
    row.solution, row.origin = str(c.path), c.origin
    return row


def _best(p: Planned) -> ResultRow:
    best = max(p.results, key=rank)
    best.candidates = len(p.candidates)
    return best


Progress = Callable[[ResultRow, bool], None]
"""Called once per problem with its row and whether it came from an earlier run."""


def run(tasks: list[Task], found: Found, out: str | Path, options: EvalOptions, solutions: str | Path = "",
        on_row: Progress | None = None) -> list[ResultRow]:
    """Rows for ``tasks`` in their order: reused from ``OUT/results.jsonl`` or checked now."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store = ResultsFile(out)
    done = store.load()
    rows: dict[str, ResultRow] = {}
    pending: list[Planned] = []
    planned = plan(tasks, found, options)
    for p in planned:
        if p.key in done:
            rows[p.key] = done[p.key]
            if on_row:
                on_row(done[p.key], True)
        elif not p.candidates:
            rows[p.key] = missing_row(p, solutions)
            store.append(rows[p.key])
            if on_row:
                on_row(rows[p.key], False)
        else:
            pending.append(p)

    def finish(p: Planned) -> None:
        row = _best(p)
        rows[p.key] = row
        store.append(row)
        if on_row:
            on_row(row, False)

    if pending:
        (_run_pool if options.uses_pool else _run_here)(pending, out, options, finish)
    return [rows[p.key] for p in planned if p.key in rows]


def _concealing(copts, out: Path):
    """The checks must not reach this evaluation's own records (results.jsonl, the pool's
    database): a candidate could write a passing row for its problem there."""
    from dataclasses import replace

    from ..sandbox.isolation import Limits

    lim = copts.limits or Limits()
    return replace(copts, limits=replace(lim, conceal=(*lim.conceal, str(Path(out).resolve()))))


def _run_here(pending: list[Planned], out: Path, o: EvalOptions, finish: Callable[[Planned], None]) -> None:
    from ..sandbox.check import check
    from ..sandbox.process import spares

    copts = _concealing(o.check_options(), out)
    spares.enable(sum(len(p.candidates) for p in pending) > 1)  # each check finds its runner started
    try:
        for p in pending:
            if o.on_stage is not None:
                copts.progress = partial(o.on_stage, label(p.task))
            for c in p.candidates:
                try:
                    p.results.append(_checked(p, c, check(p.task, c.path, copts)))
                except Exception as e:  # check() never raises by contract; a row is kept if it does
                    p.results.append(_failed(p, c, f"the check broke: {type(e).__name__}: {e}"))
            finish(p)
    finally:
        spares.enable(False)


def _run_pool(pending: list[Planned], out: Path, o: EvalOptions, finish: Callable[[Planned], None]) -> None:
    from ..sandbox.pool import Pool
    from ..sandbox.pool.store import PoolError

    copts = _concealing(o.check_options(), out)
    kw = {"slots": o.workers} if o.device == "cpu" else {"gpus": o.gpus or o.workers}
    jobs: dict[int, tuple[Planned, Candidate]] = {}
    waiting: dict[str, int] = {}
    with Pool(out / f"pool-{o.device}.sqlite", device=o.device, backend="local", **kw) as pool:
        for p in pending:
            waiting[p.key] = 0
            for i, c in enumerate(p.candidates):
                try:
                    jid = pool.submit(p.task, c.path, copts, tag=label(p.task), key=f"eval:{p.key}:{i}:{c.digest()}")
                except PoolError as e:
                    p.results.append(_failed(p, c, str(e)))
                    continue
                jobs[jid] = (p, c)
                waiting[p.key] += 1
            if waiting[p.key] == 0:
                finish(p)
        seen: set[int] = set()

        def collect(_counts=None) -> None:
            for rec in pool.jobs([j for j in jobs if j not in seen]):
                if rec.status != "done":
                    continue
                seen.add(rec.id)
                p, c = jobs[rec.id]
                if rec.result is None:
                    p.results.append(_failed(p, c, f"the pool finished job {rec.id} without a result ({rec.outcome})"))
                else:
                    p.results.append(_checked(p, c, rec.result))
                waiting[p.key] -= 1
                if waiting[p.key] == 0:
                    finish(p)

        if jobs:
            last = [0.0]

            def progress(counts) -> None:
                if time.monotonic() - last[0] >= 1.0:
                    last[0] = time.monotonic()
                    collect()

            pool.wait(list(jobs), on_progress=progress)
            collect()
