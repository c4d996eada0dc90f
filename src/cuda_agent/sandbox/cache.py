"""Where the evaluator keeps what it may reuse: built objects and libraries, tasks by sha,
workspace manifests, baseline timings.  One home, imported by everything that touches the
cache and by nothing it depends on (build, the isolation planner and the pool all read it)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "CUDA_AGENT_CACHE"


def default_cache_root() -> Path:
    return Path.home() / ".cache" / "cuda_agent"


def cache_root() -> Path:
    """``$CUDA_AGENT_CACHE`` or ``~/.cache/cuda_agent`` (created)."""
    root = Path(os.environ.get(CACHE_ENV) or default_cache_root())
    root.mkdir(parents=True, exist_ok=True)
    return root
