"""Candidates and tasks for the pool tests, all variants of examples/cpu_scaled_swish.

The task is the example at a small size (8 x 64), so a check costs little more than the
runner's start; the solutions copy the example and swap one file: a good one, a wrong one,
one that fails to build, one that crashes its runner (SIGSEGV), one that uses a torch op in
forward (strict rules reject it), and a slow one (its kernel sleeps 1.5 s).  Two tasks attack the
judge itself, i.e. the pool's worker: one kills it, one hangs it.  Builds share the session
cache of tests/conftest.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import EXAMPLE, FIXTURES, copy_example

from cuda_agent.sandbox.check import CheckOptions
from cuda_agent.tasks import Task

SMALL = (EXAMPLE / "task.py").read_text().replace("batch = 256", "batch = 8").replace("features = 4096",
                                                                                         "features = 64")
FORWARD = "        return ops.scaled_swish(x, self.scale)"


def small_task(**meta) -> Task:
    return Task(id="swish_small", source=SMALL, meta=dict(meta))


def judge_attack_task(body: str, name: str) -> Task:
    """A task whose reference forward (run by the judge, i.e. the pool worker) does ``body``."""
    src = SMALL.replace("        return x * torch.sigmoid(x) * self.scale",
                        f"        import os, signal, time\n{body}\n        return x * torch.sigmoid(x) * self.scale")
    assert src != SMALL
    return Task(id=name, source=src)


SLOW_KERNEL = (EXAMPLE / "solution" / "kernels" / "swish.cpp").read_text().replace(
    "#include <cmath>", "#include <cmath>\n#include <unistd.h>").replace(
    "  return 0;\n}", "  usleep(1500000);  // correct, but slow: 1.5 s a call\n  return 0;\n}")


def _model_new(body: str) -> str:
    src = (EXAMPLE / "solution" / "model_new.py").read_text()
    assert FORWARD in src
    return src.replace(FORWARD, body)


def make_variants(root: Path) -> dict[str, Path]:
    return {
        "good": copy_example(root / "good"),
        "wrong": copy_example(root / "wrong", {"kernels/swish.cpp": FIXTURES / "swish_times2.cpp"}),
        "build_fails": copy_example(root / "build_fails", {"kernels/swish.cpp": FIXTURES / "swish_compile_error.cpp"}),
        "crash": copy_example(root / "crash", {"model_new.py": _model_new(
            "        import ctypes\n        ctypes.string_at(0)\n" + FORWARD)}),
        "torch_op": copy_example(root / "torch_op", {"model_new.py": _model_new(
            "        return x * torch.sigmoid(x) * self.scale")}),
        "slow": copy_example(root / "slow", {"kernels/swish.cpp": SLOW_KERNEL}),
    }


@pytest.fixture(scope="session")
def variants(tmp_path_factory) -> dict[str, Path]:
    return make_variants(tmp_path_factory.mktemp("pool_variants"))


@pytest.fixture(scope="session")
def task() -> Task:
    return small_task()


@pytest.fixture
def opts() -> CheckOptions:
    return CheckOptions(device="cpu", timing=False, baselines=False, n_sets=2, verify_timeout=120)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_dead(pids, seconds: float = 15.0) -> list[int]:
    deadline = time.time() + seconds
    left = [p for p in pids if p]
    while left and time.time() < deadline:
        left = [p for p in left if alive(p)]
        time.sleep(0.1)
    return left
