from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def task():
    """KernelBench L1/12 (diag(A) @ B), the problem of the single-file GPU cases."""
    from cuda_agent.tasks import TaskError, resolve

    try:
        return resolve("L1/12", os.environ.get("CUDA_AGENT_KERNELBENCH"))
    except TaskError as e:
        pytest.skip(f"KernelBench L1/12 not available: {e}")
