"""Check a pool's records afterwards: nothing lost, and no two jobs on one device at once.

Exclusivity is read off what the workers themselves recorded: for every job that reached a
slot, the physical device behind it, the worker's ``CUDA_VISIBLE_DEVICES``, and when check()
started and ended.  Two intervals that overlap on one device, a GPU job that saw other than
exactly one GPU, or a CPU job that saw a GPU are violations.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .jobs import CHECKED, DONE, WORKER_DIED, WORKER_TIMEOUT, JobRecord

SLOT_OUTCOMES = (CHECKED, WORKER_DIED, WORKER_TIMEOUT)


@dataclass
class Audit:
    jobs: int = 0
    done: int = 0
    unfinished: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    """Done but without a result (must never happen)."""
    overlaps: list[tuple[int, int, str]] = field(default_factory=list)
    """(job, job, device) pairs that ran at the same time on one device."""
    wrong_visibility: list[int] = field(default_factory=list)
    per_device: dict[str, int] = field(default_factory=dict)
    busy_seconds: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.unfinished or self.lost or self.overlaps or self.wrong_visibility)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "jobs": self.jobs, "done": self.done, "unfinished": self.unfinished,
                "lost": self.lost, "overlaps": [list(o) for o in self.overlaps],
                "wrong_visibility": self.wrong_visibility, "per_device": self.per_device,
                "busy_seconds": {k: round(v, 3) for k, v in self.busy_seconds.items()}, "outcomes": self.outcomes}


def audit_records(records: list[JobRecord]) -> Audit:
    a = Audit(jobs=len(records))
    by_device: dict[str, list[JobRecord]] = defaultdict(list)
    outcomes: dict[str, int] = defaultdict(int)
    for r in records:
        if r.status != DONE:
            a.unfinished.append(r.id)
            continue
        a.done += 1
        outcomes[r.outcome or "?"] += 1
        if r.result is None:
            a.lost.append(r.id)
        if r.outcome in SLOT_OUTCOMES and r.device and r.start is not None and r.end is not None:
            by_device[r.device].append(r)
            vis = r.visible_devices
            if vis is not None:
                n_seen = len([g for g in vis.split(",") if g.strip() and g.strip() != "-1"])
                if (r.options.device == "cuda" and n_seen != 1) or (r.options.device == "cpu" and n_seen != 0):
                    a.wrong_visibility.append(r.id)
    for dev, rs in by_device.items():
        rs.sort(key=lambda r: r.start)  # type: ignore[arg-type,return-value]
        a.per_device[dev] = len(rs)
        a.busy_seconds[dev] = sum(r.end - r.start for r in rs)  # type: ignore[operator]
        latest = rs[0]
        for r in rs[1:]:
            if r.start < latest.end:  # type: ignore[operator]
                a.overlaps.append((latest.id, r.id, dev))
            if r.end > latest.end:  # type: ignore[operator]
                latest = r
    a.outcomes = dict(outcomes)
    return a
