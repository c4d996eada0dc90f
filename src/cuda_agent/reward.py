"""Reward schemes, looked up by name in a registry (``paper``, ``milestones``, ``speedup``).

A scheme maps one :class:`~cuda_agent.sandbox.results.CheckResult`-like set of facts
(compiled, correct, t_gen, t_eager, t_compile) to a float.  Users add their own with
``@register("name")``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .registry import Registry


@dataclass(frozen=True)
class Outcome:
    """The facts a reward looks at."""

    compiled: bool
    correct: bool
    t_gen: float | None = None
    t_eager: float | None = None
    t_compile: float | None = None

    @property
    def ok(self) -> bool:
        return self.compiled and self.correct


Scheme = Callable[[Outcome], float]
_SCHEMES: Registry = Registry("reward scheme")


def register(name: str) -> Callable[[Scheme], Scheme]:
    """Decorator: ``@register("mine")``; a name taken by another scheme is refused."""
    return _SCHEMES.register(name)


def get(name: str) -> Scheme:
    try:
        return _SCHEMES[name]
    except KeyError:
        raise KeyError(f"unknown reward scheme {name!r}; known: {', '.join(sorted(_SCHEMES))}") from None


def names() -> list[str]:
    return sorted(_SCHEMES)


def compute(name: str, outcome: Outcome) -> float:
    return float(get(name)(outcome))


def _faster(t: float | None, base: float | None, margin: float) -> bool:
    """``t`` is more than ``margin`` (0.05 = 5%) faster than ``base``: base / t > 1 + margin."""
    return t is not None and base is not None and t > 0 and base / t > 1.0 + margin


@register("paper")
def paper(o: Outcome) -> float:
    """CUDA Agent paper: -1 fail; +1 correct; +2 >5% faster than eager; +3 >5% faster than eager and compile."""
    if not o.ok:
        return -1.0
    if _faster(o.t_gen, o.t_eager, 0.05):
        return 3.0 if _faster(o.t_gen, o.t_compile, 0.05) else 2.0
    return 1.0


@register("milestones")
def milestones(o: Outcome) -> float:
    """+3 if t < 0.5 t_eager; +2 if t < 0.8 t_eager; +1 if t < t_eager; 0 if t < t_compile; else -1."""
    if not o.ok or o.t_gen is None or o.t_eager is None:
        return -1.0
    t = o.t_gen
    if t < 0.5 * o.t_eager:
        return 3.0
    if t < 0.8 * o.t_eager:
        return 2.0
    if t < o.t_eager:
        return 1.0
    if o.t_compile is not None and t < o.t_compile:
        return 0.0
    return -1.0


@register("speedup")
def speedup(o: Outcome) -> float:
    """Ablation: r = t_compile / t_gen (0 when failing)."""
    if not o.ok or not o.t_gen or o.t_compile is None:
        return 0.0
    return o.t_compile / o.t_gen
