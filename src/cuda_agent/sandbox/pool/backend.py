"""What a pool back-end is, and the registry that names them (``local``, ``ray``, yours).

A back-end owns processes, nothing else: *slots* (``slots_per_gpu`` per GPU, or ``slots`` on
the CPU back-end), each running one check at a time, and *builders* on the CPU.  Slots that share
a device share it through the judges' device lock (sandbox/devicelock.py): verification side by
side, timing alone.  The pool's
scheduler hands it :class:`WorkItem` s and reads back :class:`Event` s; the database,
priorities, retries and verdicts for dead workers stay in the scheduler, so a back-end
is small.  Register your own with ``@register_backend("name")`` on a :class:`Backend`
subclass; ``Pool(backend="name", backend_options={...})`` passes the options to it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from ...registry import Registry

BUILT, CHECKED, DIED, FAILED = "built", "checked", "died", "failed"

SLOTS_PER_GPU = 1
"""Slot workers per GPU unless told otherwise.  A check holds its GPU exclusively only while it
measures, so a second or third slot verifies one job while another is timed; the default stays 1
(a GPU per job, as before) until the gain and the verdicts are measured on a GPU (docs/pool.md)."""


def check_slots_per_gpu(device: str, n: int) -> int:
    """``slots_per_gpu`` as a back-end takes it: at least 1, and only for GPUs (the CPU back-end's
    ``slots`` already share the one CPU)."""
    from .store import PoolError

    if int(n) < 1:
        raise PoolError("slots_per_gpu must be at least 1")
    if device != "cuda" and int(n) != 1:
        raise PoolError("slots_per_gpu is for device='cuda'; on the CPU give slots=N (they share the CPU)")
    return int(n)


@dataclass
class WorkItem:
    """One unit of work for a builder or a slot (JSON-serializable)."""

    job: int
    task: dict[str, Any]
    """``Task.to_dict()``."""
    options: dict[str, Any]
    """``options_to_dict(CheckOptions)``."""
    solution: str
    """Path handed to check(): the snapshot in the pool's store."""
    timeout: float
    """Seconds after which the back-end kills the worker and reports ``died`` with ``timeout``."""
    snapshot_root: str = ""
    """The snapshot directory (equal to ``solution`` for a workspace)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WorkItem":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class Event:
    """What came back from a worker."""

    kind: str
    """``built`` (result None: ready for a slot; else the final result), ``checked``, ``died``
    (the worker exited or was killed; ``timeout`` says if for running over time) or
    ``failed`` (the worker raised; ``reason`` holds the traceback)."""
    job: int
    worker: str
    """Slot name (``gpu:0``) or builder name (``build:1``)."""
    role: str
    """``slot`` or ``build``."""
    result: dict[str, Any] | None = None
    start: float | None = None
    end: float = field(default_factory=time.time)
    pid: int | None = None
    visible: str | None = None
    device: str | None = None
    reason: str = ""
    timeout: bool = False


class Backend:
    """Interface of a pool back-end.  All methods are called from the pool's scheduler thread,
    except ``start`` and ``close`` (the thread that creates / closes the pool)."""

    name = "base"

    def start(self) -> None:
        """Acquire resources (processes, a Ray cluster).  Raise with one clear sentence if impossible."""

    def slots(self) -> list[str]:
        """Names of all slots (stable for the life of the back-end)."""
        raise NotImplementedError

    def free_slots(self) -> list[str]:
        """Slots that can take a job now."""
        raise NotImplementedError

    def free_builders(self) -> int:
        raise NotImplementedError

    def dispatch_build(self, item: WorkItem) -> str:
        """Start building ``item``; return the builder's name."""
        raise NotImplementedError

    def dispatch_check(self, slot: str, item: WorkItem) -> None:
        raise NotImplementedError

    def poll(self, timeout: float) -> list[Event]:
        """Wait up to ``timeout`` seconds for events; replace dead workers; enforce timeouts."""
        raise NotImplementedError

    def replaced(self) -> int:
        """How many workers were replaced after dying."""
        return 0

    def close(self) -> None:
        """Stop every worker (jobs in flight are left to the database's recovery)."""


BackendFactory = Callable[..., Backend]
_BACKENDS: Registry = Registry("pool back-end")


def register_backend(name: str) -> Callable[[BackendFactory], BackendFactory]:
    """Class/factory decorator; a name taken by another back-end is refused."""
    return _BACKENDS.register(name)
