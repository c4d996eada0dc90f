"""The paper's metrics (SPEC section 5) on hand-made rows, with hand-computed expectations."""

from __future__ import annotations

import math

import pytest

from cuda_agent.eval.metrics import SplitMetrics, compute, geomean, overall, split_metrics
from cuda_agent.eval.rows import MISSING, ResultRow


def row(level: int, pid: int, correct: bool = True, se: float | None = None, sc: float | None = None,
        compiled: bool = True, status: str = "checked") -> ResultRow:
    return ResultRow(level=level, problem_id=pid, name="", task_id=f"kernelbench/L{level}/{pid}", status=status,
                     compiled=compiled, correct=correct, speedup_eager=se, speedup_compile=sc)


def test_geomean_by_hand():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([0.5, 2.0, 1.0]) == pytest.approx(1.0)
    assert geomean([3.0]) == pytest.approx(3.0)
    assert geomean([]) is None
    with pytest.raises(ValueError):
        geomean([1.0, 0.0])


def test_one_level_by_hand():
    rows = [row(1, 1, se=2.0, sc=0.5),   # correct, faster than eager only
            row(1, 2, se=8.0, sc=4.0),   # correct, faster than both
            row(1, 3, se=1.0, sc=1.0),   # correct, exactly 1.0: not faster
            row(1, 4, correct=False, se=50.0, sc=50.0),  # wrong: its speedups count for nothing
            row(1, 5, correct=False, compiled=False),     # build failed
            row(1, 6, correct=False, compiled=False, status=MISSING)]  # no solution: a failure
    m = split_metrics(rows, "L1")
    assert (m.tasks, m.passed, m.faster_eager, m.faster_compile) == (6, 3, 2, 1)
    assert m.pass_rate == pytest.approx(50.0)
    assert m.faster_eager_rate == pytest.approx(100 * 2 / 6)
    assert m.faster_compile_rate == pytest.approx(100 * 1 / 6)
    assert m.geomean_eager == pytest.approx((2.0 * 8.0 * 1.0) ** (1 / 3))     # 16^(1/3) = 2.5198
    assert m.geomean_compile == pytest.approx((0.5 * 4.0 * 1.0) ** (1 / 3))   # 2^(1/3) = 1.2599
    assert (m.timed_eager, m.timed_compile) == (3, 3)


def test_correct_needs_compiled_and_untimed_correct_rows_are_not_faster():
    rows = [row(2, 1, compiled=False, correct=True, se=3.0, sc=3.0),  # inconsistent row: not a pass
            row(2, 2, se=None, sc=None),                              # correct, not timed
            row(2, 3, se=4.0, sc=None)]                               # compile baseline missing
    m = split_metrics(rows, "L2")
    assert m.passed == 2 and m.pass_rate == pytest.approx(200 / 3)
    assert m.faster_eager == 1 and m.faster_eager_rate == pytest.approx(100 / 3)
    assert m.faster_compile == 0 and m.faster_compile_rate is None   # no correct row has a compile time
    assert m.geomean_eager == pytest.approx(4.0) and m.geomean_compile is None


def test_no_timing_at_all_gives_na_not_zero():
    m = split_metrics([row(1, 1), row(1, 2, correct=False)], "L1")
    assert m.pass_rate == pytest.approx(50.0)
    assert m.faster_eager_rate is None and m.faster_compile_rate is None
    assert m.geomean_eager is None and m.geomean_compile is None
    # nothing correct: 0% faster is a fact, not n/a
    m0 = split_metrics([row(1, 1, correct=False)], "L1")
    assert m0.faster_eager_rate == 0.0 and m0.geomean_eager is None


def test_overall_is_weighted_by_task_counts():
    l1 = split_metrics([row(1, 1, se=2.0, sc=2.0), row(1, 2, correct=False)], "L1")          # 50% pass, gm 2
    l2 = split_metrics([row(2, i, se=8.0, sc=0.5) for i in range(1, 5)], "L2")                # 100% pass, gm 8
    o = overall([l1, l2])
    assert o.tasks == 6 and o.passed == 5
    assert o.pass_rate == pytest.approx(100 * 5 / 6)                  # (2*50 + 4*100) / 6
    assert o.faster_eager_rate == pytest.approx(100 * 5 / 6)
    assert o.faster_compile_rate == pytest.approx(100 * 1 / 6)
    # weighted geometric mean of the level means: exp((2 ln 2 + 4 ln 8) / 6) = 2^(14/6)
    assert o.geomean_eager == pytest.approx(2 ** (14 / 6))
    assert o.geomean_compile == pytest.approx(math.exp((2 * math.log(2.0) + 4 * math.log(0.5)) / 6))


def _split(name, n, p, fe, fc, ge, gc) -> SplitMetrics:
    return SplitMetrics(name, n, round(n * p / 100), round(n * fe / 100), round(n * fc / 100), 0, 0, p, fe, fc, ge, gc)


def test_overall_reproduces_the_papers_table1():
    """L1/L2/L3 of Table 1 with 100/100/50 tasks give its overall row."""
    levels = [_split("L1", 100, 100.0, 99.0, 97.0, 2.48, 1.87), _split("L2", 100, 100.0, 100.0, 100.0, 3.27, 2.80),
              _split("L3", 50, 94.0, 94.0, 90.0, 1.80, 1.52)]
    o = overall(levels)
    assert o.tasks == 250
    assert round(o.pass_rate, 1) == 98.8
    assert round(o.faster_eager_rate, 1) == 98.4
    assert round(o.faster_compile_rate, 1) == 96.8
    assert round(o.geomean_eager, 2) == 2.60
    assert round(o.geomean_compile, 2) == 2.11


def test_compute_keeps_every_selected_level_even_without_rows():
    m = compute([row(1, 1, se=2.0, sc=3.0)], levels=[1, 2])
    assert [s.split for s in m.splits] == ["L1", "L2", "overall"]
    assert m.levels[1].tasks == 0 and m.levels[1].pass_rate == 0.0
    assert m.overall.tasks == 1 and m.overall.geomean_compile == pytest.approx(3.0)
    d = m.to_dict()
    assert d["levels"]["L1"]["faster_compile"] == 1 and d["overall"]["split"] == "overall"
