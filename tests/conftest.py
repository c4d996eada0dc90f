"""Shared set-up for the evaluator-core tests.

* ``CUDA_AGENT_CACHE`` points at one temporary directory for the whole session, so the
  fixed infrastructure object and the CPU example's objects are compiled once per test
  session and every test solution that copies the example's binding reuses them
  (``CUDA_AGENT_TEST_KEEP_CACHE=1`` keeps a caller's ``CUDA_AGENT_CACHE`` instead, for
  quick local re-runs).
* Paths of the CPU example and the test fixtures, the KernelBench JSONL (skipped when
  absent), and ``make_solution`` which copies the example's workspace and swaps files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cpu_scaled_swish"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
KERNELBENCH_DEFAULT = ROOT.parent / "shared" / "kernelbench" / "kernelbench.jsonl"  # ../shared beside the checkout


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """One build/baseline cache per test session (unless the caller set one explicitly)."""
    if os.environ.get("CUDA_AGENT_TEST_KEEP_CACHE") and os.environ.get("CUDA_AGENT_CACHE"):
        yield Path(os.environ["CUDA_AGENT_CACHE"])
        return
    old = os.environ.get("CUDA_AGENT_CACHE")
    d = tmp_path_factory.mktemp("cuda_agent_cache")
    os.environ["CUDA_AGENT_CACHE"] = str(d)
    yield d
    if old is None:
        os.environ.pop("CUDA_AGENT_CACHE", None)
    else:
        os.environ["CUDA_AGENT_CACHE"] = old


@pytest.fixture(scope="session")
def example_dir() -> Path:
    return EXAMPLE


@pytest.fixture(scope="session")
def example_task():
    from cuda_agent.tasks import load_file

    return load_file(EXAMPLE / "task.py")


@pytest.fixture(scope="session")
def kernelbench_jsonl() -> Path:
    p = Path(os.environ.get("CUDA_AGENT_KERNELBENCH") or KERNELBENCH_DEFAULT)
    if not p.is_file() or p.suffix not in (".jsonl", ".json", ".parquet"):
        pytest.skip(f"KernelBench JSONL not found at {p} (set CUDA_AGENT_KERNELBENCH)")
    return p


def copy_example(dst: Path, replace: dict[str, str | Path | None] | None = None) -> Path:
    """Copy the CPU example's solution to ``dst``; ``replace`` maps a relative path
    (``kernels/swish.cpp``, ``model_new.py``) to new text, a fixture file to copy, or None
    to delete it."""
    shutil.copytree(EXAMPLE / "solution", dst)
    for rel, val in (replace or {}).items():
        target = dst / rel
        assert target.parent.is_dir(), target
        if val is None:
            target.unlink()
        elif isinstance(val, Path):
            target.write_text(val.read_text())
        else:
            target.write_text(val)
    return dst


@pytest.fixture
def make_solution(tmp_path):
    """``make_solution(name, {"kernels/swish.cpp": text_or_path})`` -> a copy of the example
    solution with files swapped."""
    def make(name: str = "sol", replace: dict | None = None):
        return copy_example(tmp_path / name, replace)
    return make
