"""Check a pool's records afterwards: nothing lost, one job at a time on a slot, and nothing
beside a measurement on its device.

Exclusivity is read off what the workers themselves recorded: for every job that reached a
slot, the slot and the physical device behind it, the worker's ``CUDA_VISIBLE_DEVICES``, when
check() started and ended, and when it held its device's lock shared or exclusive
(``CheckResult.holds``, sandbox/devicelock.py).  Two jobs whose intervals overlap on one slot,
an exclusive hold (a timing) that overlaps any other job's hold of the same device, a GPU job
that saw other than exactly one GPU, or a CPU job that saw a GPU are violations.  Several slots
may share a device (``slots_per_gpu``, the CPU slots): their jobs overlap, their timings may not.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..devicelock import EXCLUSIVE
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
    """(job, job, slot) pairs that ran at the same time on one slot."""
    exclusive_overlaps: list[tuple[int, int, str]] = field(default_factory=list)
    """(job holding the device exclusively, other job holding it, device) at the same time."""
    wrong_visibility: list[int] = field(default_factory=list)
    per_device: dict[str, int] = field(default_factory=dict)
    busy_seconds: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.unfinished or self.lost or self.overlaps or self.exclusive_overlaps or self.wrong_visibility)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "jobs": self.jobs, "done": self.done, "unfinished": self.unfinished,
                "lost": self.lost, "overlaps": [list(o) for o in self.overlaps],
                "exclusive_overlaps": [list(o) for o in self.exclusive_overlaps],
                "wrong_visibility": self.wrong_visibility, "per_device": self.per_device,
                "busy_seconds": {k: round(v, 3) for k, v in self.busy_seconds.items()}, "outcomes": self.outcomes}


def audit_records(records: list[JobRecord]) -> Audit:
    a = Audit(jobs=len(records))
    by_device: dict[str, list[JobRecord]] = defaultdict(list)
    by_slot: dict[str, list[JobRecord]] = defaultdict(list)
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
            by_slot[r.slot or r.device].append(r)
            vis = r.visible_devices
            if vis is not None:
                n_seen = len([g for g in vis.split(",") if g.strip() and g.strip() != "-1"])
                if (r.options.device == "cuda" and n_seen != 1) or (r.options.device == "cpu" and n_seen != 0):
                    a.wrong_visibility.append(r.id)
    for dev, rs in by_device.items():
        a.per_device[dev] = len(rs)
        a.busy_seconds[dev] = sum(r.end - r.start for r in rs)  # type: ignore[operator]
    for slot, rs in by_slot.items():
        rs.sort(key=lambda r: r.start)  # type: ignore[arg-type,return-value]
        latest = rs[0]
        for r in rs[1:]:
            if r.start < latest.end:  # type: ignore[operator]
                a.overlaps.append((latest.id, r.id, slot))
            if r.end > latest.end:  # type: ignore[operator]
                latest = r
    a.exclusive_overlaps = _exclusive_overlaps([r for rs in by_slot.values() for r in rs])
    a.outcomes = dict(outcomes)
    return a


def _exclusive_overlaps(records: list[JobRecord]) -> list[tuple[int, int, str]]:
    """Pairs of jobs where one held a device exclusively while the other held it at all."""
    holds: dict[str, list[tuple[float, float, bool, int]]] = defaultdict(list)
    for r in records:
        for h in (r.result.holds if r.result is not None else []):
            holds[h.device].append((h.start, h.end, h.mode == EXCLUSIVE, r.id))
    out: dict[tuple[int, int, str], None] = {}  # ordered, each pair once
    for dev, hs in holds.items():
        hs.sort()
        for i, (s1, e1, x1, j1) in enumerate(hs):
            for s2, e2, x2, j2 in hs[i + 1:]:
                if s2 >= e1:
                    break
                if j1 != j2 and (x1 or x2):
                    out[(j1, j2, dev) if x1 else (j2, j1, dev)] = None
    return list(out)
