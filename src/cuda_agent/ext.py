"""The runtime side of a workspace: ``from cuda_agent.ext import ops`` in ``model_new.py``.

``ops`` is ``torch.ops.kernels``, the namespace that ``CUDA_AGENT_OPS(m)`` registers into.
The library comes from ``$CUDA_AGENT_EXTENSION`` (set by the evaluator's candidate process,
which builds first); when it is unset (the agent runs ``model_new.py`` by hand) the
workspace that holds the importing ``model_new.py`` (or the current directory) is built
through the same cache and loaded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

_loaded: str | None = None


def load(path: str | None = None, device: str | None = None) -> object:
    """Load the extension once per process and return ``torch.ops.kernels``."""
    global _loaded
    if _loaded is None:
        so = path or os.environ.get("CUDA_AGENT_EXTENSION")
        if not so:
            from .sandbox.build import build

            root = Path(os.environ.get("CUDA_AGENT_WORKSPACE") or Path.cwd())
            dev = device or os.environ.get("CUDA_AGENT_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
            res = build(root / "kernels", dev)
            if not res.ok:
                raise ImportError(f"building {root / 'kernels'} failed:\n{res.log}")
            so = res.so_path
        torch.ops.load_library(so)
        _loaded = so
    hook = sys.modules.get("cuda_agent.sandbox.inline_hook")  # in the evaluator's runner: count calls
    return _Counted(torch.ops.kernels, hook) if hook is not None else torch.ops.kernels


class _Counted:
    """``torch.ops.kernels`` whose ops count their calls (the result says whether the solution's
    own kernels ran during forward)."""

    def __init__(self, ns: object, hook) -> None:
        self._ns, self._hook, self._ops = ns, hook, {}

    def __getattr__(self, name: str):
        op = self._ops.get(name)
        if op is None:
            op = self._ops[name] = self._hook.counted(getattr(self._ns, name), f"kernels.{name}")
        return op


def __getattr__(name: str):
    if name == "ops":
        return load()
    raise AttributeError(name)
