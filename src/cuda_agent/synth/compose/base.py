"""What every composer shares: buckets, the op-count mix, ``Candidate``, the ``Composer``
protocol and its registry (the package's ``__init__`` adds the built-in composers to it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ...registry import Registry

BUCKETS = ("1", "2", "3", "4", "5", "transformers")

PAPER_MIX: dict[str, float] = {"1": 0.0340, "2": 0.8377, "3": 0.0762, "4": 0.0280, "5": 0.0123,
                               "transformers": 0.0118}
"""Op-count mix of the released CUDA-Agent-Ops-6K set (SPEC.md section 1)."""


@dataclass
class Candidate:
    """A composed task before filtering, with how it was made."""

    source: str
    bucket: str
    ops: list[str]
    categories: list[str]
    composer: str
    seed: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def op_count(self) -> int:
        return len(self.ops)


class Composer(Protocol):
    name: str

    def compose(self, bucket: str, seed: int) -> Candidate:
        """One candidate for ``bucket``; raises :class:`~cuda_agent.synth.program.ComposeError`."""
        ...  # pragma: no cover

    def buckets(self) -> tuple[str, ...]:
        """The buckets this composer can fill."""
        ...  # pragma: no cover


COMPOSERS: Registry = Registry("composer")


def register_composer(name: str) -> Callable[[Callable[..., Composer]], Callable[..., Composer]]:
    """Class/factory decorator: ``@register_composer("mine")``; a name taken by another composer is refused."""
    return COMPOSERS.register(name)


def parse_mix(text: str | dict[str, float] | None) -> dict[str, float]:
    """``"1=0.1,2=0.8,3=0.1"`` or a dict -> normalized mix over :data:`BUCKETS`."""
    if text is None:
        return dict(PAPER_MIX)
    if isinstance(text, str):
        mix: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            if "=" not in part:
                raise ValueError(f"mix entry {part!r} is not BUCKET=WEIGHT")
            k, v = part.split("=", 1)
            mix[k.strip()] = float(v)
    else:
        mix = {str(k): float(v) for k, v in text.items()}
    bad = [k for k in mix if k not in BUCKETS]
    if bad:
        raise ValueError(f"unknown mix bucket(s) {', '.join(bad)} (valid: {', '.join(BUCKETS)})")
    if any(v < 0 for v in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError("mix weights must be >= 0 and not all zero")
    total = sum(mix.values())
    return {k: mix.get(k, 0.0) / total for k in BUCKETS if mix.get(k, 0.0) > 0}


def quotas(n: int, mix: dict[str, float]) -> dict[str, int]:
    """Largest-remainder split of ``n`` tasks over the mix."""
    raw = {k: n * v for k, v in mix.items()}
    q = {k: int(v) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: raw[k] - q[k], reverse=True)[: n - sum(q.values())]:
        q[k] += 1
    return q
