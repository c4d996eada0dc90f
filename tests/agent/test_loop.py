"""Loop budgets, context shortening, back-end failures, and the text tool-call parser."""

from __future__ import annotations

import json
import time

from cuda_agent.agent import Agent, AgentConfig, Budget
from cuda_agent.agent.llm import BackendError, Reply, make_backend, parse_reply
from cuda_agent.sandbox.results import CheckResult
from cuda_agent.tasks import Task

TASK = Task(id="t/x", source="class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n")


def bash(cmd):
    return {"tool_calls": [{"name": "Bash", "arguments": {"command": cmd}}]}


def run(steps, tmp_path, evaluator=None, **budget):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    agent = Agent(make_backend("scripted", steps=steps), evaluator, AgentConfig(budget=Budget(**budget)))
    return agent.run(TASK, ws, tmp_path / "out")


def test_max_turns(tmp_path):
    res = run([bash("echo hi")] * 10, tmp_path, max_turns=3)
    assert res.trajectory.stop_reason == "max_turns" and len(res.trajectory.turns) == 3


def test_wall_time(tmp_path):
    res = run([bash("sleep 0.4")] * 10, tmp_path, wall_time_s=0.6)
    assert res.trajectory.stop_reason == "wall_time" and len(res.trajectory.turns) == 2


def test_old_tool_outputs_shortened_first(tmp_path):
    steps = [bash("seq 1 3000")] * 6 + [lambda msgs: {"content": json.dumps([len(m["content"]) for m in msgs if m["role"] == "tool"])}]
    res = run(steps, tmp_path, context_tokens=12_000, keep_recent_tool_outputs=2, shortened_chars=300)
    t = res.trajectory
    assert t.stop_reason == "finished"
    seen = json.loads(t.messages[-1]["content"])  # tool output lengths the model saw on the last turn
    full = len(t.messages[3]["content"])
    assert full > 10_000
    assert seen[-2:] == [full, full] and all(n < 500 for n in seen[:2])
    assert t.shortened and all(t.messages[i]["role"] == "tool" for i in t.shortened)
    # the trajectory keeps the whole outputs
    assert all(len(m["content"]) == full for m in t.messages if m["role"] == "tool")


def test_context_budget_exhausted(tmp_path):
    res = run([bash("seq 1 3000")] * 5, tmp_path, context_tokens=2_000, keep_recent_tool_outputs=10)
    assert res.trajectory.stop_reason == "context"


class Flaky:
    name, model = "flaky", "f"

    def __init__(self, exc):
        self.exc = exc

    def complete(self, messages, tools):
        raise self.exc

    def count_tokens(self, messages):
        return 10


def test_backend_failure_keeps_trajectory(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for exc, want in ((BackendError("server down"), "llm_error: server down"),
                      (ZeroDivisionError("bug"), "llm_error: ZeroDivisionError: bug")):
        res = Agent(Flaky(exc), None).run(TASK, ws, tmp_path / "out")
        assert res.trajectory.stop_reason == want
    assert len((tmp_path / "out" / "trajectory.jsonl").read_text().splitlines()) == 2


class CountingEvaluator:
    """Marks a solution correct when model_new.py contains 'GOOD'; speed from a SPEED=x line."""

    def __init__(self):
        self.calls = []

    def check(self, task, solution_dir):
        self.calls.append(solution_dir)
        src = (solution_dir / "model_new.py").read_text() if (solution_dir / "model_new.py").exists() else ""
        speed = float(src.split("SPEED=")[1].split()[0]) if "SPEED=" in src else None
        ok = "GOOD" in src
        return CheckResult(task_id=task.id, task_sha=task.sha, device="cpu", rules="strict", compiled=True,
                           correct=ok, speedup_compile=speed, reward=1.0 if ok else -1.0)


def test_best_snapshot_kept_and_identical_snapshots_checked_once(tmp_path):
    ev = CountingEvaluator()
    steps = [bash("echo 'GOOD SPEED=2.0' > model_new.py; cuda-agent verify >/dev/null 2>&1; true"),
             bash("cuda-agent profile >/dev/null 2>&1; true"),  # same content: not re-checked
             bash("echo 'GOOD SPEED=1.5' > model_new.py; cuda-agent verify >/dev/null 2>&1; true"),
             bash("echo 'BAD' > model_new.py"),
             "stop"]
    res = run(steps, tmp_path, evaluator=ev)
    t = res.trajectory
    assert len(ev.calls) == 3  # turn 0, turn 2, final
    assert t.reward == -1.0 and res.final.correct is False
    assert res.best.correct and res.best.speedup_compile == 2.0 and t.best_reward == 1.0
    assert (res.best_dir / "model_new.py").read_text() == "GOOD SPEED=2.0\n"
    assert t.turns[1].check == t.turns[0].check


def test_parse_text_calls():
    content, calls = parse_reply('thinking\n<tool_call>\n{"name": "Read", "arguments": {"file_path": "a"}}\n</tool_call>\n'
                                 '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>')
    assert content == "thinking" and [c.name for c in calls] == ["Read", "Bash"]
    assert json.loads(calls[0].arguments) == {"file_path": "a"}
    # ReAct form
    content, calls = parse_reply('I should list.\nAction: Bash\nAction Input: {"command": "ls -la"}')
    assert content == "I should list." and calls[0].name == "Bash" and json.loads(calls[0].arguments) == {"command": "ls -la"}
    # unterminated block and bad JSON still become a call the ToolSet answers with an error
    _, calls = parse_reply('<tool_call>{"name": "Bash", "arguments": {"command": ')
    assert calls[0].name == "Bash" and calls[0].arguments.startswith("{")
    assert parse_reply("just an answer") == ("just an answer", [])


def test_bad_tool_call_from_model_is_an_error_result(tmp_path):
    steps = [{"tool_calls": [{"name": "Bash", "arguments": '{"command": '}]},
             {"tool_calls": [{"name": "Teleport", "arguments": {}}]}, "ok"]
    res = run(steps, tmp_path)
    results = [m["content"] for m in res.trajectory.messages if m["role"] == "tool"]
    assert results[0].startswith("Error: the arguments of Bash are not valid JSON")
    assert results[1].startswith("Error: unknown tool 'Teleport'")
    assert res.trajectory.stop_reason == "finished" and res.trajectory.turns[0].tools[0].error
