"""Decontamination: a near copy of a KernelBench task is caught; normalization and dedup."""

from __future__ import annotations

import json
import re

from cuda_agent.synth.decontam import ReferenceIndex, norm_hash, normalize, similarity


def _near_copy(src: str) -> str:
    """Rename the user identifiers, change every integer constant, drop the docstrings."""
    out = re.sub(r'"""(.|\n)*?"""', "", src)
    out = re.sub(r"\bbatch_size\b", "B", out)
    out = re.sub(r"\bModel\b", "Model", out)
    out = re.sub(r"\bx\b", "inp", out)
    return re.sub(r"\b(\d+)\b", lambda m: str(int(m.group(1)) + 3), out)


def test_near_copy_of_kernelbench_task_is_above_threshold(kernelbench_path):
    rows = [json.loads(line) for line in open(kernelbench_path)]
    idx = ReferenceIndex.kernelbench(kernelbench_path)
    assert len(idx) >= 250
    row = next(r for r in rows if r["level"] == 2)
    copy = _near_copy(row["code"])
    assert copy != row["code"]
    sim, nearest = idx.max_similarity(copy)
    assert sim > 0.9
    assert nearest == f"kernelbench/L{row['level']}/{row['problem_id']}"
    assert norm_hash(normalize(copy)) == norm_hash(normalize(row["code"]))


def test_different_tasks_score_lower_and_similarity_is_symmetric():
    a = ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
         "        return torch.relu(x)\ndef get_inputs():\n    return [torch.randn(4, 4)]\n"
         "def get_init_inputs():\n    return []\n")
    b = a.replace("torch.relu(x)", "torch.softmax(torch.cumsum(x, dim=1), dim=-1) * 3")
    assert similarity(a, a) == 1.0
    assert similarity(a, b) == similarity(b, a) < 0.9
    assert normalize(a) != normalize(b)


def test_identifier_and_constant_normalization():
    a = "y = torch.exp(z) * 2\n"
    b = "w = torch.exp(q) * 7\n"
    c = "w = torch.log(q) * 7\n"
    assert normalize(a) != normalize("y = torch.exp(z)\n")
    assert normalize("def f(z):\n    y = torch.exp(z) * 2\n") == normalize("def g(q):\n    w = torch.exp(q) * 7\n")
    assert normalize(b) != normalize(c)
    assert "exp" in normalize(a)
