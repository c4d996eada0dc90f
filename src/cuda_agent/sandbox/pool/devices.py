"""Which GPUs a pool may use and what architecture they are, without touching CUDA in the
pool's own process (nvidia-smi first, a short child process as a fallback).

The architecture goes into every worker's ``CUDA_AGENT_ARCH``, so builders without a GPU
compile for the same target (and the same build-cache keys) as the slots that load the
result.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys


def host() -> str:
    return socket.gethostname()


def _smi(*args: str) -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return [line.strip() for line in p.stdout.splitlines() if line.strip()]


def visible_gpus() -> list[str]:
    """GPU ids this process may hand out: ``$CUDA_VISIBLE_DEVICES`` if set, else every GPU
    nvidia-smi lists, else what torch counts (in a child process)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    rows = _smi("--query-gpu=index", "--format=csv,noheader")
    if rows is not None:
        return rows
    code = "import torch; print(torch.cuda.device_count())"
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
        return [str(i) for i in range(int(p.stdout.strip() or 0))]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []


def gpu_arch(gpu: str) -> str | None:
    """``90`` for an H100/H200 (compute capability 9.0); None when it cannot be read."""
    if os.environ.get("CUDA_AGENT_ARCH"):
        return os.environ["CUDA_AGENT_ARCH"]
    rows = _smi("--query-gpu=compute_cap", "--format=csv,noheader", "-i", gpu)
    if rows and rows[0].replace(".", "").isdigit():
        return rows[0].replace(".", "")
    code = "import torch; a, b = torch.cuda.get_device_capability(0); print(f'{a}{b}')"
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "CUDA_VISIBLE_DEVICES": gpu})
        out = p.stdout.strip()
        return out if out.isdigit() else None
    except (OSError, subprocess.TimeoutExpired):
        return None
