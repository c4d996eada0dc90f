"""Shared fixtures for the synthesis tests: KernelBench path (skip if absent), evaluation workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuda_agent.synth.evaluate import FilterConfig
from cuda_agent.synth.runner import EvalWorker

KB_DEFAULT = str(Path(__file__).resolve().parents[2].parent / "shared" / "kernelbench" / "kernelbench.jsonl")


@pytest.fixture(scope="session")
def kernelbench_path() -> Path:
    p = Path(os.environ.get("CUDA_AGENT_KERNELBENCH", KB_DEFAULT))
    if not p.exists():
        pytest.skip(f"KernelBench dataset not found at {p} (set CUDA_AGENT_KERNELBENCH)")
    return p


@pytest.fixture(scope="session")
def cpu_worker():
    """One CPU evaluation process with the compile filter on (inductor) and a wide band."""
    w = EvalWorker(FilterConfig(device="cpu", band_ms=(0.05, 5000), compile=True, timeout_s=60,
                                compile_timeout_s=240))
    yield w
    w.close()


TASK = '''
import torch
import torch.nn as nn

batch_size = 64
features = 512


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        BODY


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''


def task(body: str, batch: int = 64, features: int = 512) -> str:
    """A small task whose forward body is ``body`` (one line, may use self.linear)."""
    return (TASK.replace("BODY", body).replace("batch_size = 64", f"batch_size = {batch}")
            .replace("features = 512", f"features = {features}"))


@pytest.fixture(scope="session")
def make_task():
    return task
