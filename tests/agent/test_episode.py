"""Scripted policies drive whole episodes on the CPU backend through the real evaluator:
write a C++ kernel + binding + model_new.py, compile / verify / profile in the agent's shell,
finish; the loop snapshots, re-checks, keeps the best and saves the trajectory."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cuda_agent.agent import Agent, AgentConfig, Budget, SandboxEvaluator, read_jsonl
from cuda_agent.agent.cli import show_command, solve_command
from cuda_agent.agent.llm import make_backend
from cuda_agent.tasks import Task

TASK_SRC = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Leaky ReLU with slope 0.1."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.where(x > 0, x, 0.1 * x)


def get_inputs():
    return [torch.randn(256, 512)]


def get_init_inputs():
    return []
'''

KERNEL = '''#include <cstdint>
extern "C" int leaky_relu_cpu(const float* x, float* out, int64_t n, float slope) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    out[i] = v > 0.0f ? v : slope * v;
  }
  return 0;
}
'''

BINDING = '''#include "cuda_agent_binding.h"

extern "C" int leaky_relu_cpu(const float* x, float* out, int64_t n, float slope);

at::Tensor leaky_relu(const at::Tensor& x) {
  CA_CHECK_INPUT(x);
  CA_CHECK(x.scalar_type() == at::kFloat, "float32 only");
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(leaky_relu_cpu(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), SLOPE));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("leaky_relu", &leaky_relu); }
'''

MODEL_NEW = '''import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ops.leaky_relu(x)
'''


def call(name, **args):
    return {"tool_calls": [{"name": name, "arguments": args}]}


def solution_script(slope: str, profile: bool = True, verify: bool = True) -> list:
    steps = [
        {"content": "Let me look at the reference.", **call("Read", file_path="model.py")},
        {"content": "A one-pass elementwise kernel.", **call("Write", file_path="kernels/leaky.cpp", content=KERNEL)},
        call("Write", file_path="kernels/leaky_binding.cpp", content=BINDING.replace("SLOPE", slope)),
        call("Read", file_path="model_new.py"),
        call("Write", file_path="model_new.py", content=MODEL_NEW),
        call("Bash", command="cuda-agent compile --json | tail -1"),
    ]
    if verify:
        steps.append(call("Bash", command="cuda-agent verify"))
    if profile:
        steps.append(call("Bash", command="cuda-agent profile --json"))
    steps.append("Done: ModelNew calls my fused leaky ReLU kernel.")
    return steps


@pytest.fixture(scope="module")
def task():
    return Task(id="test/leaky_relu", source=TASK_SRC)


def make_ws(task, path):
    from cuda_agent.sandbox.workspace import create_workspace

    return create_workspace(task, path, device="cpu")


def test_successful_episode(task, tmp_path):
    ws = make_ws(task, tmp_path / "ws")
    be = make_backend("scripted", steps=solution_script("0.1f"))
    agent = Agent(be, SandboxEvaluator(device="cpu", timing=False), AgentConfig(device="cpu", budget=Budget(max_turns=20)))
    res = agent.run(task, ws, tmp_path / "out")
    t = res.trajectory
    assert t.stop_reason == "finished" and len(t.turns) == 9
    tool_results = [m["content"] for m in t.messages if m["role"] == "tool"]
    assert all(not r.startswith("Error:") for r in tool_results), tool_results
    compile_json = json.loads(tool_results[5].strip().splitlines()[-1])
    assert compile_json["compiled"] is True
    assert "correct" in tool_results[6] and "yes" in tool_results[6]
    profile_json = json.loads(tool_results[7].strip().splitlines()[-1])
    assert profile_json["correct"] is True and profile_json["t_gen_ms"] > 0
    # the loop re-checked the snapshots itself (verify and profile turns) and the final workspace
    checked = [tr for tr in t.turns if tr.check]
    assert [tr.index for tr in checked] == [6, 7]
    assert all(tr.check["correct"] for tr in checked)
    assert res.final.correct and res.final.compiled and t.reward == 1.0 and t.reward > 0
    assert (res.best_dir / "kernels" / "leaky.cpp").read_text() == KERNEL
    assert json.loads((res.best_dir / "check.json").read_text())["correct"] is True
    saved = list(read_jsonl(tmp_path / "out" / "trajectory.jsonl"))
    assert len(saved) == 1 and saved[0].reward == 1.0 and saved[0].messages == t.messages
    assert saved[0].sft_record()["tools"][0]["function"]["name"] == "Bash"
    # the viewer renders it, in the terminal and as HTML
    r = CliRunner().invoke(show_command, [str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "test/leaky_relu" in r.output and "cuda-agent verify" in r.output and "correct=yes" in r.output
    r = CliRunner().invoke(show_command, [str(tmp_path / "out"), "--html", str(tmp_path / "t.html")])
    assert r.exit_code == 0 and "<html" in (tmp_path / "t.html").read_text().lower()


def test_failing_episode(task, tmp_path):
    ws = make_ws(task, tmp_path / "ws")
    be = make_backend("scripted", steps=solution_script("0.2f", profile=False))  # wrong slope
    agent = Agent(be, SandboxEvaluator(device="cpu", timing=False), AgentConfig(device="cpu"))
    res = agent.run(task, ws, tmp_path / "out")
    t = res.trajectory
    assert t.stop_reason == "finished"
    verify_out = [m["content"] for m in t.messages if m["role"] == "tool"][-1]
    assert "correct   NO" in verify_out and "expected" in verify_out
    assert res.final.compiled and not res.final.correct and t.reward == -1.0
    assert res.best is not None and not res.best.correct


def test_faked_verify_output_is_not_trusted(task, tmp_path):
    """A policy that prints a fake 'correct, 100x' JSON instead of running the evaluator
    gets the evaluator's own verdict on its snapshot."""
    ws = make_ws(task, tmp_path / "ws")
    fake = json.dumps({"compiled": True, "correct": True, "speedup_compile": 100.0, "reward": 3})
    be = make_backend("scripted", steps=[call("Bash", command=f"echo 'cuda-agent verify'; echo '{fake}'"), "done"])
    res = Agent(be, SandboxEvaluator(device="cpu", timing=False), AgentConfig(device="cpu")).run(task, ws, tmp_path / "out")
    assert res.trajectory.turns[0].check is not None
    assert res.trajectory.turns[0].check["correct"] is False  # the starter uses torch ops: strict rules fail it
    assert res.trajectory.reward == -1.0


def test_solve_command_scripted(task, tmp_path):
    task_file = tmp_path / "leaky.py"
    task_file.write_text(TASK_SRC)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(solution_script("0.1f", profile=False, verify=False)))
    out = tmp_path / "run"
    r = CliRunner().invoke(solve_command, [str(task_file), "--backend", "scripted", "--script", str(script),
                                           "--device", "cpu", "--out", str(out), "--n", "2", "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    # timed by the evaluator: +1 correct, more when faster than eager on this machine
    assert all(a["reward"] >= 1.0 and a["best_correct"] for a in summary["attempts"]), summary
    assert summary["best"] and (out / "attempt_0" / "trajectory.jsonl").is_file()
    assert (out / f"attempt_{summary['best_attempt']}" / "best" / "model_new.py").read_text() == MODEL_NEW


def test_solve_without_llm_says_what_to_set(tmp_path, monkeypatch):
    for v in ("CUDA_AGENT_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(v, raising=False)
    task_file = tmp_path / "leaky.py"
    task_file.write_text(TASK_SRC)
    r = CliRunner().invoke(solve_command, [str(task_file), "--device", "cpu", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--model" in lines[0] and "CUDA_AGENT_MODEL" in lines[0] and "OPENAI_BASE_URL" in lines[0]
    r = CliRunner().invoke(solve_command, [str(tmp_path / "missing.py"), "--model", "m"])
    assert r.exit_code != 0 and "task not found" in r.output
