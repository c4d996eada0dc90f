"""The pool's records: one :class:`JobRecord` per submitted candidate, and the JSON forms of
the :class:`~cuda_agent.sandbox.check.CheckOptions` it is checked with.

A job moves ``queued -> building -> ready -> running -> done`` (a failed build or bad input
goes ``building -> done``).  ``outcome`` says how it ended; ``result`` is always a
:class:`~cuda_agent.sandbox.results.CheckResult` once the job is done, also when the worker
that held it died.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any

from ...tasks import Task
from ..check import CheckOptions
from ..exploits import Exploit
from ..isolation import Limits
from ..results import CheckResult
from ..timing import Recipe

QUEUED, BUILDING, READY, RUNNING, DONE = "queued", "building", "ready", "running", "done"
STATUSES = (QUEUED, BUILDING, READY, RUNNING, DONE)

CHECKED = "checked"
"""check() ran on a slot and returned its result."""
REJECTED_AT_BUILD = "rejected-at-build"
"""The build stage already gave the final result (compile error, bad input); no slot used."""
WORKER_DIED = "worker-died"
WORKER_TIMEOUT = "worker-timeout"
GAVE_UP = "gave-up"
"""The pool process died too many times while this job was running."""
OUTCOMES = (CHECKED, REJECTED_AT_BUILD, WORKER_DIED, WORKER_TIMEOUT, GAVE_UP)


def options_to_dict(o: CheckOptions) -> dict[str, Any]:
    d = {f.name: getattr(o, f.name) for f in fields(o) if f.name != "progress"}  # a callback stays home
    for k in ("recipe", "limits"):
        if is_dataclass(d.get(k)):
            d[k] = asdict(d[k])  # type: ignore[arg-type]
    return d


def options_from_dict(d: dict[str, Any]) -> CheckOptions:
    """Inverse of :func:`options_to_dict`; unknown keys (from another version) are dropped."""
    names = {f.name for f in fields(CheckOptions)}
    kw = {k: v for k, v in d.items() if k in names}
    if isinstance(kw.get("recipe"), dict):
        rnames = {f.name for f in fields(Recipe)}
        kw["recipe"] = Recipe(**{k: v for k, v in kw["recipe"].items() if k in rnames})
    if isinstance(kw.get("limits"), dict):
        lnames = {f.name for f in fields(Limits)}
        lim = {k: v for k, v in kw["limits"].items() if k in lnames}
        if "conceal" in lim:
            lim["conceal"] = tuple(lim["conceal"])
        kw["limits"] = Limits(**lim)
    if isinstance(kw.get("sanitize"), list):  # JSON has no tuples
        kw["sanitize"] = tuple(kw["sanitize"])
    return CheckOptions(**kw)


@dataclass
class JobRecord:
    """One job as the pool's database holds it."""

    id: int
    status: str
    priority: int
    task: Task
    options: CheckOptions
    solution: str
    """The path the caller submitted (for reports; never read again)."""
    snapshot: str
    """The copy in the pool's store that is judged."""
    submitted: float
    tag: str = ""
    key: str | None = None
    timeout: float | None = None
    """Wall-clock limit on a slot (None: the pool's, else derived from the options)."""
    build_worker: str | None = None
    build_start: float | None = None
    build_end: float | None = None
    slot: str | None = None
    """Slot that ran check(), e.g. ``gpu:3``, ``cpu:0``, ``ray:1``."""
    device: str | None = None
    """The physical device behind the slot (``host/gpu:3``): what exclusivity is audited on."""
    worker_pid: int | None = None
    visible_devices: str | None = None
    """``CUDA_VISIBLE_DEVICES`` inside the worker while it ran the job."""
    start: float | None = None
    end: float | None = None
    attempts: int = 0
    """Times the job was handed to a slot."""
    restarts: int = 0
    """Times the pool process died while the job was in flight."""
    outcome: str | None = None
    note: str = ""
    result: CheckResult | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["task"] = {"id": self.task.id, "sha": self.task.sha}
        d["options"] = options_to_dict(self.options)
        d["result"] = self.result.to_dict() if self.result else None
        return d

    @property
    def seconds(self) -> float | None:
        return None if self.start is None or self.end is None else self.end - self.start


def failure_result(task: Task, o: CheckOptions, stage: str, message: str, compiled: bool) -> CheckResult:
    """The CheckResult of a job whose evaluation could not finish (its worker died or hung)."""
    return CheckResult.failed(task, message, device=o.device, rules=o.rules, reward_scheme=o.reward,
                              stage=stage, compiled=compiled, exploit_class=Exploit.CRASH_OR_HANG)


def dumps(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"))
