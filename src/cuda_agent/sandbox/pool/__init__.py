"""The evaluator's GPU pool: many checks at once, one job per GPU, nothing lost.

``Pool`` (pool.py) takes jobs (task, solution snapshot, CheckOptions, priority), keeps them in
sqlite (store.py, jobs.py, snapshot.py), builds them on CPU builders and runs ``check()`` on
exclusive slots through a back-end chosen by name (backend.py; backends.py looks them up:
``local`` in local.py + worker.py, ``ray`` in ray_backend.py, or your own).  audit.py verifies afterwards that no two
jobs shared a device and that every job has a result; cli.py is ``cuda-agent pool``.
See docs/pool.md.  Names are imported lazily, so ``cuda-agent --help`` does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Pool": "pool", "job_timeout": "pool",
    "Audit": "audit", "audit_records": "audit",
    "Backend": "backend", "Event": "backend", "WorkItem": "backend", "register_backend": "backend",
    "backend_names": "backends", "get_backend": "backends",
    "JobRecord": "jobs", "options_from_dict": "jobs", "options_to_dict": "jobs",
    "PoolError": "store", "Store": "store",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
