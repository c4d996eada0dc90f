"""The LLM composer against a local chat-completions server (127.0.0.1), through the openai client."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cuda_agent.synth.compose import get_composer
from cuda_agent.synth.compose.llm import extract_code
from cuda_agent.synth.crawl import seed_library
from cuda_agent.synth.pipeline import run_synth
from cuda_agent.synth.program import ComposeError

FUSED = '''import torch
import torch.nn as nn

batch_size = 128
in_features = 512
out_features = 256


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x)) * 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''


class _Handler(BaseHTTPRequestHandler):
    requests: list[dict] = []
    replies: list[str] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body})
        i = len(type(self).requests) - 1
        text = type(self).replies[min(i, len(type(self).replies) - 1)]
        payload = {"id": f"c{i}", "object": "chat.completion", "created": 0, "model": body["model"],
                   "choices": [{"index": 0, "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text}}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture()
def server():
    _Handler.requests = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", _Handler
    srv.shutdown()


def test_llm_composer_retries_malformed_reply_and_parses_code(server):
    url, h = server
    h.replies = ["Sure! Here is an idea without code.", f"Here you go:\n```python\n{FUSED}```\nDone."]
    comp = get_composer("llm", library=seed_library(include_transformers=False), profile="cpu", base_url=url,
                        api_key="test", model="tiny-test", retries=3)
    cand = comp.compose("2", seed=5)
    assert cand.source == FUSED
    assert cand.composer == "llm" and cand.op_count == 2 and cand.extra["attempts"] == 2
    assert len(h.requests) == 2 and h.requests[0]["path"] == "/v1/chat/completions"
    first = h.requests[0]["body"]
    assert first["model"] == "tiny-test"
    assert "class Model" in first["messages"][1]["content"]  # seed examples are shown
    assert "not usable" in h.requests[1]["body"]["messages"][-1]["content"]


def test_llm_composer_gives_up_with_a_reason(server):
    url, h = server
    h.replies = ["no code here"]
    comp = get_composer("llm", library=seed_library(include_transformers=False), profile="cpu", base_url=url,
                        api_key="k", model="m", retries=2)
    with pytest.raises(ComposeError, match="no usable task after 2 tries"):
        comp.compose("1", seed=1)


def test_extract_code_variants():
    assert extract_code("```py\nx = 1\n```") == "x = 1\n"
    with pytest.raises(ComposeError):
        extract_code("nothing")


def test_llm_tasks_go_through_the_same_filters(server, tmp_path):
    url, h = server
    h.replies = [f"```python\n{FUSED}```"]
    res = run_synth(1, tmp_path / "ds", composer="llm", mix="2=1", compile=False, decontaminate=False,
                    workers=1, include_transformers=False, progress=False,
                    composer_options={"base_url": url, "api_key": "k", "model": "m"})
    assert res.accepted == 1
    rows = [json.loads(line) for line in open(res.files["jsonl"])]
    assert rows[0]["code"] == FUSED and rows[0]["composer"] == "llm"
