"""Real KernelBench level-1 problems at CPU-friendly sizes, and solutions written by the tests.

KernelBench's level-1 inputs are sized for a GPU (the smallest output is 4096 x 4096; one
CPU check of L1/12 at full size took 2.5 min here), so the tests read the problems from the
JSONL and rewrite only their module-level size constants (``N = 2048 * 2`` -> ``N = 64``);
the models, ``get_inputs`` and ``get_init_inputs`` are the dataset's own.  Nothing from
KernelBench is stored in the repository.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from cuda_agent.tasks import read_rows

PROBLEMS = (1, 12, 19, 23)
SIZE = 64

CORRECT_12 = """import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return B * A[:, None]
"""
WRONG_19 = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 1.5
"""
RAISES_23 = """import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        raise RuntimeError("this kernel is not written yet")
"""


def shrink(code: str, size: int = SIZE) -> str:
    """Module-level integer constants (``M = 4096``, ``N = 2048 * 2``) capped at ``size``."""
    tree = ast.parse(code)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = eval(compile(ast.Expression(node.value), "<size>", "eval"), {"__builtins__": {}})
            except Exception:
                continue
            if type(value) is int and value > size:
                node.value = ast.Constant(size)
    return ast.unparse(tree) + "\n"


@pytest.fixture(scope="session")
def small_kernelbench(kernelbench_jsonl, tmp_path_factory) -> Path:
    """A JSONL with the level-1 problems of PROBLEMS (plus L2/1 for the level checks), shrunk."""
    out = tmp_path_factory.mktemp("kb") / "kernelbench_small.jsonl"
    rows = []
    for r in read_rows(kernelbench_jsonl):
        if (r["level"] == 1 and r["problem_id"] in PROBLEMS) or (r["level"] == 2 and r["problem_id"] == 1):
            rows.append({**r, "code": shrink(r["code"])})
    assert len(rows) == len(PROBLEMS) + 1, "the KernelBench JSONL lacks a problem the tests use"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


@pytest.fixture
def solutions(tmp_path) -> Path:
    """L1/12 correct (a single file), L1/19 wrong by a factor (a workspace), L1/23 raises, L1/1 missing."""
    root = tmp_path / "solutions"
    (root / "L1" / "19").mkdir(parents=True)
    (root / "L1" / "12.py").write_text(CORRECT_12)
    (root / "L1" / "19" / "model_new.py").write_text(WRONG_19)
    (root / "L1" / "23_Softmax.py").write_text(RAISES_23)
    return root
