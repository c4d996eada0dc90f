"""A local chat-completions server (127.0.0.1) for testing the back-ends with the real client.

It answers ``POST /v1/chat/completions`` from a queue of planned responses: a dict is a
message (``content`` and/or ``tool_calls``) turned into a completion; an int is an HTTP
error status to return instead.  Every request body is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatServer:
    def __init__(self, plan: list[Any] | None = None) -> None:
        self.plan: list[Any] = list(plan or [])
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n))
                with server.lock:
                    server.requests.append({"path": self.path, "body": body,
                                            "auth": self.headers.get("Authorization")})
                    step = server.plan.pop(0) if server.plan else {"content": "done"}
                if callable(step):
                    step = step(body)
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "not found", "type": "not_found"}})
                if isinstance(step, int):
                    headers = {"retry-after": "0"} if step == 429 else {}
                    return self._send(step, {"error": {"message": f"planned error {step}",
                                                       "type": "test", "code": step}}, headers)
                msg: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
                if step.get("tool_calls"):
                    msg["tool_calls"] = [
                        {"id": f"call_{i}_{len(server.requests)}", "type": "function",
                         "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                        for i, c in enumerate(step["tool_calls"])]
                prompt = sum(len(m.get("content") or "") for m in body["messages"]) // 4
                self._send(200, {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion",
                    "created": int(time.time()), "model": body["model"],
                    "choices": [{"index": 0, "message": msg,
                                 "finish_reason": "tool_calls" if step.get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": 7,
                              "total_tokens": prompt + 7}})

            def _send(self, code: int, obj: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "ChatServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
