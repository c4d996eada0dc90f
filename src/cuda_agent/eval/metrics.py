"""The paper's KernelBench metrics (SPEC section 5), as pure functions of result rows.

Per split (a level, or all of them):

* pass rate: share of the split's tasks whose solution compiles and is correct;
* faster rate vs eager / vs torch.compile: share of ALL the split's tasks whose solution is
  correct and has speedup > 1.0 (a missing, failing or untimed solution is not faster);
* geometric-mean speedup vs eager / vs torch.compile over the correct solutions that have one.

Overall: the rates and the geometric means are the per-level values weighted by the number
of tasks evaluated in each level (100/100/50 for full levels 1-3); for the means that is a
weighted geometric mean of the level means, which reproduces the paper's Table 1 (levels
without a correct timed solution carry no weight there).  Every task of the split counts:
a missing solution is a failure, never skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol


class RowLike(Protocol):
    level: int
    compiled: bool
    correct: bool
    speedup_eager: float | None
    speedup_compile: float | None


@dataclass
class SplitMetrics:
    """Metrics of one split (``L1``, ``L2``, ``L3``, ``overall``)."""

    split: str
    tasks: int
    """Tasks in the split (the denominator of every rate)."""
    passed: int
    """Compiled and correct."""
    faster_eager: int
    faster_compile: int
    timed_eager: int
    """Correct solutions with a speedup vs eager (the geomean's sample size)."""
    timed_compile: int
    pass_rate: float
    """Percent, 0-100."""
    faster_eager_rate: float | None
    """Percent; None when correct solutions exist but none was timed (``--no-timing``)."""
    faster_compile_rate: float | None
    geomean_eager: float | None
    """None without any timed correct solution."""
    geomean_compile: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def geomean(xs: Iterable[float]) -> float | None:
    """Geometric mean of positive numbers (None for none; non-positive values are an error)."""
    vals = list(xs)
    if not vals:
        return None
    if any(not (v > 0) or math.isinf(v) for v in vals):
        raise ValueError(f"geometric mean needs finite positive values, got {vals}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _ok(r: RowLike) -> bool:
    return bool(r.compiled and r.correct)


def _rate(n: int, total: int) -> float:
    return 100.0 * n / total if total else 0.0


def split_metrics(rows: Sequence[RowLike], split: str) -> SplitMetrics:
    """Metrics of ``rows`` (every task of the split, including failures and missing ones)."""
    good = [r for r in rows if _ok(r)]
    se = [r.speedup_eager for r in good if r.speedup_eager is not None]
    sc = [r.speedup_compile for r in good if r.speedup_compile is not None]
    fe = sum(1 for s in se if s > 1.0)
    fc = sum(1 for s in sc if s > 1.0)
    n = len(rows)
    return SplitMetrics(
        split=split, tasks=n, passed=len(good), faster_eager=fe, faster_compile=fc,
        timed_eager=len(se), timed_compile=len(sc), pass_rate=_rate(len(good), n),
        faster_eager_rate=None if good and not se else _rate(fe, n),
        faster_compile_rate=None if good and not sc else _rate(fc, n),
        geomean_eager=geomean(se), geomean_compile=geomean(sc))


def _weighted_rate(levels: Sequence[SplitMetrics], attr: str) -> float | None:
    vals = [(m.tasks, getattr(m, attr)) for m in levels if m.tasks]
    if any(v is None for _, v in vals):
        known = [(n, v) for n, v in vals if v is not None]
        if not known:
            return None
        vals = known
    total = sum(n for n, _ in vals)
    return sum(n * v for n, v in vals) / total if total else 0.0


def _weighted_geomean(levels: Sequence[SplitMetrics], attr: str) -> float | None:
    vals = [(m.tasks, getattr(m, attr)) for m in levels if m.tasks and getattr(m, attr) is not None]
    total = sum(n for n, _ in vals)
    if not total:
        return None
    return math.exp(sum(n * math.log(g) for n, g in vals) / total)


def overall(levels: Sequence[SplitMetrics]) -> SplitMetrics:
    """The ``overall`` split: per-level values weighted by each level's task count."""
    return SplitMetrics(
        split="overall", tasks=sum(m.tasks for m in levels), passed=sum(m.passed for m in levels),
        faster_eager=sum(m.faster_eager for m in levels), faster_compile=sum(m.faster_compile for m in levels),
        timed_eager=sum(m.timed_eager for m in levels), timed_compile=sum(m.timed_compile for m in levels),
        pass_rate=_weighted_rate(levels, "pass_rate") or 0.0,
        faster_eager_rate=_weighted_rate(levels, "faster_eager_rate"),
        faster_compile_rate=_weighted_rate(levels, "faster_compile_rate"),
        geomean_eager=_weighted_geomean(levels, "geomean_eager"),
        geomean_compile=_weighted_geomean(levels, "geomean_compile"))


@dataclass
class Metrics:
    """Every split of an evaluation: one per level evaluated, then ``overall``."""

    levels: list[SplitMetrics]
    overall: SplitMetrics

    @property
    def splits(self) -> list[SplitMetrics]:
        return [*self.levels, self.overall]

    def to_dict(self) -> dict[str, Any]:
        return {"levels": {m.split: m.to_dict() for m in self.levels}, "overall": self.overall.to_dict()}


def compute(rows: Sequence[RowLike], levels: Sequence[int] | None = None) -> Metrics:
    """Per-level and overall metrics; ``levels`` fixes which splits appear (default: those in rows)."""
    lv = sorted({r.level for r in rows}) if levels is None else list(levels)
    per = [split_metrics([r for r in rows if r.level == level], f"L{level}") for level in lv]
    return Metrics(per, overall(per))
