"""``ResultRow``: one problem's outcome in an evaluation (one JSON line of ``results.jsonl``).

Built from the evaluator's :class:`~cuda_agent.sandbox.results.CheckResult` of the best
candidate, or as a failure when there was no solution or the check could not run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

CHECKED, MISSING, FAILED = "checked", "missing", "failed"


@dataclass
class ResultRow:
    """A problem's verdict, times and speedups."""

    level: int
    problem_id: int
    name: str
    task_id: str
    status: str = CHECKED
    """``checked`` (the evaluator ran), ``missing`` (no solution), ``failed`` (the check could not
    be submitted, e.g. an unreadable solution)."""
    compiled: bool = False
    correct: bool = False
    t_gen_ms: float | None = None
    t_eager_ms: float | None = None
    t_compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    reward: float | None = None
    error: str | None = None
    """First line of the evaluator's error (or why there is no check)."""
    exploit_classes: list[int] = field(default_factory=list)
    stage: str | None = None
    """Where the verdict stopped (``load``, ``forward``, ``compare``, ``timeout`` ...)."""
    solution: str | None = None
    """The candidate scored (path) and where it came from."""
    origin: str | None = None
    candidates: int = 0
    """How many candidates were checked for this problem (the best one is scored)."""
    key: str = ""
    """Resume key: task sha + candidate contents + options (a finished key is not re-checked)."""
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"L{self.level}/{self.problem_id}"

    @property
    def verdict(self) -> str:
        if self.status == MISSING:
            return "missing"
        if self.status == FAILED:
            return "failed"
        if not self.compiled:
            return "build failed" if (self.error or "").startswith("build failed") else "invalid"
        if self.correct:
            return "correct"
        if self.stage == "weights":
            return "invalid"
        if self.stage in ("load", "init", "forward"):
            return "raised"
        if self.stage in ("timeout", "worker-timeout"):
            return "timeout"
        if self.stage in ("crash", "memory", "processes", "worker-died", "gave-up"):
            return "crashed"
        return "incorrect"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ResultRow":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def first_line(text: str | None, limit: int = 300) -> str | None:
    """The first non-empty line of ``text``, cut at ``limit`` characters."""
    if not text:
        return None
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return None


def from_check(base: ResultRow, r: Any) -> ResultRow:
    """``base`` (identity fields) filled with a CheckResult's verdict."""
    base.status = CHECKED
    base.compiled, base.correct = bool(r.compiled), bool(r.correct and r.compiled)
    base.t_gen_ms, base.t_eager_ms, base.t_compile_ms = r.t_gen_ms, r.t_eager_ms, r.t_compile_ms
    base.speedup_eager, base.speedup_compile = r.speedup_eager, r.speedup_compile
    base.reward = r.reward
    base.error = first_line(r.error)
    if base.error and base.error.rstrip(":").endswith("failed") and r.error and "\n" in r.error:
        base.error = first_line(base.error + " " + (first_line(r.error.split("\n", 1)[1]) or ""))
    base.exploit_classes = list(r.exploit_classes or [])
    base.stage = r.verdict.stage if r.verdict is not None else None
    base.seconds = float(r.seconds or 0.0)
    return base

