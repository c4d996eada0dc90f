"""Workspaces: layout, read-only reference, SKILL.md, the starter's verdicts, finding the task."""

from __future__ import annotations

import json
import re
import stat

import pytest

from cuda_agent.sandbox.check import CheckOptions, check
from cuda_agent.sandbox.workspace import (create_workspace, find_workspace, skill_text, starter,
                                          workspace_task)
from cuda_agent.tasks import TaskError


@pytest.fixture
def ws(example_task, tmp_path):
    return create_workspace(example_task, tmp_path / "ws", device="cpu")


def test_layout(ws, example_task):
    assert sorted(p.name for p in ws.iterdir()) == [".cuda_agent", "SKILL.md", "kernels", "model.py",
                                                    "model_new.py"]
    assert (ws / "kernels").is_dir() and list((ws / "kernels").iterdir()) == []
    assert (ws / "model.py").read_text() == example_task.source
    mode = (ws / "model.py").stat().st_mode
    assert not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH), oct(mode)
    meta = json.loads((ws / ".cuda_agent" / "task.json").read_text())
    assert meta == {"task_id": example_task.id, "task_sha": example_task.sha, "device": "cpu"}


def test_starter_is_the_reference_renamed(ws, example_task):
    src = (ws / "model_new.py").read_text()
    assert src == starter(example_task)
    assert "class ModelNew(nn.Module)" in src and not re.search(r"\bModel\b", src.split("\n", 2)[2])
    assert "from cuda_agent.ext import ops" in src  # the hint in the header comment


def test_skill_md_mentions_commands_rules_and_verdicts(ws):
    text = (ws / "SKILL.md").read_text()
    for cmd in ("cuda-agent compile", "cuda-agent verify", "cuda-agent profile", "--json"):
        assert cmd in text, cmd
    for rule in ("No torch compute operators inside `ModelNew.forward`", "load_state_dict",
                 "Return new tensors (never an input), do not modify inputs", "Do not touch `model.py`",
                 "cuBLAS only for matrix products"):
        assert rule in text, rule
    for verdict in ("compiled: false", "`load`", "`init`", "`weights`", "`forward`", "`compare`", "`timeout`",
                    "`crash`", "violations", "speedup_compile", "reward"):
        assert verdict in text, verdict
    assert "CPU (C++ kernels, no CUDA)" in text and "kernels/<name>.cpp" in text
    assert "#define CUDA_AGENT_OPS(m)" in text  # the binding header is inlined
    assert not re.search(r"\{(device|kernel_files|n_sets|binding_header)\}", text)
    assert "CUDA GPU" in skill_text("cuda") and "5 fresh random input sets" in skill_text("cuda")


def test_refuses_to_clobber_and_overwrites_on_request(ws, example_task):
    (ws / "model_new.py").write_text("# my work\n")
    with pytest.raises(TaskError, match="already holds a workspace"):
        create_workspace(example_task, ws, device="cpu")
    assert (ws / "model_new.py").read_text() == "# my work\n"
    create_workspace(example_task, ws, device="cpu", overwrite=True)  # read-only model.py rewritten
    assert (ws / "model_new.py").read_text() == starter(example_task)


def test_find_workspace_and_task(ws, example_task, tmp_path):
    assert find_workspace(ws / "kernels") == ws.resolve()
    with pytest.raises(TaskError, match="not inside a cuda-agent workspace"):
        find_workspace(tmp_path)
    m = ws / "model.py"
    m.chmod(0o644)
    m.write_text("tampered\n")
    task, device = workspace_task(ws)
    assert task.source == example_task.source and task.sha == example_task.sha  # from the cache
    assert device == "cpu"


def test_starter_passes_kernelbench_rules_and_fails_strict(ws, example_task):
    o = dict(device="cpu", timing=False, baselines=False, n_sets=2)
    kb = check(example_task, ws, CheckOptions(rules="kernelbench", **o))
    assert kb.correct and kb.compiled and kb.violations == [], kb.error
    assert kb.reward == 1.0
    strict = check(example_task, ws, CheckOptions(rules="strict", **o))
    assert strict.compiled and not strict.correct and strict.reward == -1.0
    assert strict.verdict.correct  # right numbers, forbidden ops
    # torch ran, and nothing of the solution's own (the starter has no kernel yet)
    assert {v.rule for v in strict.violations} == {"torch-op-in-forward", "no-custom-code"}
    assert all(v.where.startswith("model_new.py:") for v in strict.violations if v.rule == "torch-op-in-forward")
