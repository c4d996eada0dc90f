"""Reward schemes of SPEC.md section 3 at every threshold boundary, and the registry."""

from __future__ import annotations

import pytest

from cuda_agent import reward
from cuda_agent.reward import Outcome


def ok(t_gen, t_eager=None, t_compile=None) -> Outcome:
    return Outcome(compiled=True, correct=True, t_gen=t_gen, t_eager=t_eager, t_compile=t_compile)


# --- paper: -1 fail, +1 correct, +2 >5% faster than eager, +3 >5% faster than eager and compile ---

@pytest.mark.parametrize("compiled,correct", [(False, False), (True, False), (False, True)])
def test_paper_fail_is_minus_one(compiled, correct):
    assert reward.compute("paper", Outcome(compiled, correct, 1.0, 10.0, 10.0)) == -1.0


def test_paper_correct_but_not_faster():
    assert reward.compute("paper", ok(1.0, 1.0, 1.0)) == 1.0
    assert reward.compute("paper", ok(2.0, 1.0, 1.0)) == 1.0
    assert reward.compute("paper", ok(1.0, None, None)) == 1.0  # no timing: correct only


def test_paper_exactly_five_percent_faster_is_not_more_than_five_percent():
    # speedup = t_eager / t_gen = 1.05 exactly (values exact in binary: 21/20)
    assert 21.0 / 20.0 == 1.05
    assert reward.compute("paper", ok(20.0, 21.0, 21.0)) == 1.0


def test_paper_just_over_five_percent_faster_than_eager():
    # faster than eager by > 5%, not faster than compile by > 5%
    assert reward.compute("paper", ok(20.0, 21.0001, 21.0)) == 2.0
    assert reward.compute("paper", ok(20.0, 21.0001, 10.0)) == 2.0


def test_paper_more_than_five_percent_faster_than_both():
    assert reward.compute("paper", ok(20.0, 21.0001, 21.0001)) == 3.0
    assert reward.compute("paper", ok(1.0, 10.0, 5.0)) == 3.0


def test_paper_faster_than_compile_only_is_still_plus_one():
    # +3 needs "faster than eager AND compile"
    assert reward.compute("paper", ok(20.0, 20.0, 100.0)) == 1.0


def test_paper_zero_time_does_not_count_as_faster():
    assert reward.compute("paper", ok(0.0, 10.0, 10.0)) == 1.0


# --- milestones: +3 t<0.5 eager; +2 t<0.8 eager; +1 t<eager; 0 t<compile; else -1 ---

def test_milestones_fail():
    assert reward.compute("milestones", Outcome(False, False, 1.0, 10.0, 10.0)) == -1.0
    assert reward.compute("milestones", Outcome(True, False, 1.0, 10.0, 10.0)) == -1.0
    assert reward.compute("milestones", ok(None, 10.0, 10.0)) == -1.0
    assert reward.compute("milestones", ok(1.0, None, 10.0)) == -1.0


@pytest.mark.parametrize("t,expected", [
    (4.999, 3.0),   # < 0.5 t_eager
    (5.0, 2.0),     # t == 0.5 t_eager is not < 0.5 t_eager
    (7.999, 2.0),   # < 0.8 t_eager
    (8.0, 1.0),     # t == 0.8 t_eager
    (9.999, 1.0),   # < t_eager
])
def test_milestones_eager_boundaries(t, expected):
    assert reward.compute("milestones", ok(t, 10.0, 1000.0)) == expected


def test_milestones_compile_boundaries():
    # not faster than eager: 0 when faster than compile, else -1
    assert reward.compute("milestones", ok(10.0, 10.0, 12.0)) == 0.0  # t == t_eager, t < t_compile
    assert reward.compute("milestones", ok(11.0, 10.0, 11.001)) == 0.0
    assert reward.compute("milestones", ok(11.0, 10.0, 11.0)) == -1.0  # t == t_compile
    assert reward.compute("milestones", ok(12.0, 10.0, 11.0)) == -1.0
    assert reward.compute("milestones", ok(12.0, 10.0, None)) == -1.0


# --- speedup: t_compile / t_gen, 0 when failing ---

def test_speedup_scheme():
    assert reward.compute("speedup", ok(2.0, 10.0, 5.0)) == 2.5
    assert reward.compute("speedup", ok(5.0, 10.0, 5.0)) == 1.0
    assert reward.compute("speedup", ok(10.0, 1.0, 5.0)) == 0.5
    assert reward.compute("speedup", Outcome(True, False, 2.0, 10.0, 5.0)) == 0.0
    assert reward.compute("speedup", Outcome(False, False, None, None, None)) == 0.0
    assert reward.compute("speedup", ok(2.0, 10.0, None)) == 0.0
    assert reward.compute("speedup", ok(0.0, 10.0, 5.0)) == 0.0


# --- registry ---

def test_registry_names_and_errors():
    assert {"paper", "milestones", "speedup"} <= set(reward.names())
    with pytest.raises(KeyError) as e:
        reward.get("no-such-scheme")
    msg = str(e.value)
    assert "no-such-scheme" in msg and "paper" in msg and "milestones" in msg
    with pytest.raises(KeyError):
        reward.compute("no-such-scheme", ok(1.0, 1.0, 1.0))


def test_user_registered_scheme():
    name = "test-binary-correctness"

    @reward.register(name)
    def binary(o: Outcome) -> float:
        return 1 if o.ok else 0  # an int: compute() must return a float

    try:
        assert name in reward.names()
        assert reward.get(name) is binary
        r = reward.compute(name, ok(1.0))
        assert r == 1.0 and isinstance(r, float)
        assert reward.compute(name, Outcome(True, False)) == 0.0
    finally:
        reward._SCHEMES.pop(name, None)
    assert name not in reward.names()


def test_outcome_ok():
    assert Outcome(True, True).ok
    assert not Outcome(True, False).ok
    assert not Outcome(False, True).ok
