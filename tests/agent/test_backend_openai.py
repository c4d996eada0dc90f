"""The openai and text back-ends against a local chat-completions server (real client code)."""

from __future__ import annotations

import json

import pytest

from cuda_agent.agent import Agent, AgentConfig, Budget
from cuda_agent.agent.llm import BackendConfigError, BackendError, make_backend
from cuda_agent.tasks import Task

from .chat_server import ChatServer

TOOLS = [{"type": "function", "function": {"name": "Bash", "description": "run",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                          "required": ["command"]}}}]


def test_native_tool_calls_and_usage():
    plan = [{"content": "let me look", "tool_calls": [{"name": "Bash", "arguments": {"command": "ls"}}]}]
    with ChatServer(plan) as srv:
        be = make_backend("openai", model="m1", base_url=srv.url, api_key="k-test", temperature=0.5)
        msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
        r = be.complete(msgs, TOOLS)
    assert r.content == "let me look"
    assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [("Bash", {"command": "ls"})]
    assert r.tool_calls[0].id.startswith("call_0_")
    assert r.usage.completion_tokens == 7 and r.finish_reason == "tool_calls"
    req = srv.requests[0]
    assert req["auth"] == "Bearer k-test"
    assert req["body"]["model"] == "m1" and req["body"]["tools"] == TOOLS
    assert req["body"]["temperature"] == 0.5 and req["body"]["messages"] == msgs
    assert r.message()["tool_calls"][0]["function"]["name"] == "Bash"


def test_retries_on_rate_limit_and_server_error():
    with ChatServer([429, 503, 500, {"content": "ok"}]) as srv:
        be = make_backend("openai", model="m", base_url=srv.url, backoff_s=0.01, max_backoff_s=0.02)
        r = be.complete([{"role": "user", "content": "hi"}], [])
    assert r.content == "ok" and be.retries_done == 3 and len(srv.requests) == 4
    assert "tools" not in srv.requests[0]["body"]


def test_no_retry_on_client_error_and_gives_up():
    with ChatServer([400, {"content": "never"}]) as srv:
        be = make_backend("openai", model="m", base_url=srv.url, backoff_s=0.01)
        with pytest.raises(BackendError, match="400"):
            be.complete([{"role": "user", "content": "hi"}], [])
        assert len(srv.requests) == 1
    with ChatServer([500, 500, 500]) as srv:
        be = make_backend("openai", model="m", base_url=srv.url, backoff_s=0.01, max_retries=2)
        with pytest.raises(BackendError, match="after 3 attempts"):
            be.complete([{"role": "user", "content": "hi"}], [])


def test_config_from_env_and_missing(monkeypatch):
    monkeypatch.delenv("CUDA_AGENT_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(BackendConfigError, match="--model"):
        make_backend("openai")
    with pytest.raises(BackendConfigError, match="API key"):
        make_backend("openai", model="gpt")
    with ChatServer([{"content": "env ok"}]) as srv:
        monkeypatch.setenv("CUDA_AGENT_MODEL", "from-env")
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        be = make_backend("openai")
        assert be.complete([{"role": "user", "content": "x"}], []).content == "env ok"
        assert srv.requests[0]["body"]["model"] == "from-env"
    with pytest.raises(BackendConfigError, match="unknown back-end"):
        make_backend("nope")


def test_text_backend_parses_blocks_and_renders_history():
    reply = ('I will list files.\n<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>')
    with ChatServer([{"content": reply}]) as srv:
        be = make_backend("text", model="plain", base_url=srv.url)
        history = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "go"},
                   {"role": "assistant", "content": "first", "tool_calls": [
                       {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "pwd"}'}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "/ws"}]
        r = be.complete(history, TOOLS)
    assert r.content == "I will list files."
    assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [("Bash", {"command": "ls"})]
    sent = srv.requests[0]["body"]
    assert "tools" not in sent
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert "<tool_call>" in sent["messages"][0]["content"] and "## Bash" in sent["messages"][0]["content"]
    assert '"command": "pwd"' in sent["messages"][2]["content"]
    assert sent["messages"][3]["content"] == "<tool_result name=Bash id=c1>\n/ws\n</tool_result>"


def test_episode_through_openai_backend(tmp_path):
    """The loop, the real client and the tools together: the server plays the policy."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "SKILL.md").write_text("# Skill\nBe fast.")
    plan = [
        {"content": "write", "tool_calls": [{"name": "Write", "arguments": {"file_path": "notes.txt", "content": "hello\n"}}]},
        {"content": "check", "tool_calls": [{"name": "Bash", "arguments": {"command": "cat notes.txt; wc -l < notes.txt"}},
                                            {"name": "Read", "arguments": {"file_path": "notes.txt"}}]},
        {"content": "All done."},
    ]
    task = Task(id="t/echo", source="import torch\nclass Model(torch.nn.Module):\n    pass\n"
                                    "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    with ChatServer(plan) as srv:
        be = make_backend("openai", model="policy", base_url=srv.url)
        res = Agent(be, None, AgentConfig(budget=Budget(max_turns=10))).run(task, ws, tmp_path / "out")
    t = res.trajectory
    assert t.stop_reason == "finished" and len(t.turns) == 3
    assert (ws / "notes.txt").read_text() == "hello\n"
    tool_msgs = [m for m in t.messages if m["role"] == "tool"]
    assert tool_msgs[1]["content"] == "hello\n1\n" and "     1\thello" in tool_msgs[2]["content"]
    # the third request carries the whole history in OpenAI format, tool ids matching
    third = srv.requests[2]["body"]["messages"]
    assert third[0]["content"].startswith("# Skill\nBe fast.") and "class Model" in third[0]["content"]
    ids = [c["id"] for m in third if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert [m["tool_call_id"] for m in third if m["role"] == "tool"] == ids
    saved = [json.loads(l) for l in (tmp_path / "out" / "trajectory.jsonl").read_text().splitlines()]
    assert len(saved) == 1 and saved[0]["messages"] == t.messages and saved[0]["tools"][0]["function"]["name"] == "Bash"
    assert saved[0]["prompt_tokens"] > 0 and saved[0]["completion_tokens"] == 21
