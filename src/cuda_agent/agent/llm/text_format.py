"""The text tool-call format for models without native tool calls (``text`` and ``hf`` back-ends).

The model is told the tools in the system prompt and calls one by writing a block::

    <tool_call>
    {"name": "Bash", "arguments": {"command": "ls kernels"}}
    </tool_call>

(several blocks in one reply are several calls; a reply with no block is the final answer).
For leniency the ReAct form ``Action: Bash`` / ``Action Input: {...}`` is accepted too.
Tool results go back as a user message of ``<tool_result name=... id=...>`` blocks.  The
trajectory itself stays in OpenAI format: :func:`to_text_messages` converts the history
for the model, :func:`parse_reply` converts the model's text back into tool calls.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .base import ToolCall

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_REACT = re.compile(r"^\s*Action:\s*([A-Za-z_][\w]*)\s*\n\s*Action Input:\s*(\{.*?\})\s*(?=\n\s*(?:Action:|Observation:)|\Z)",
                    re.S | re.M)


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The system-prompt section describing the tools and the call format."""
    lines = ["# Tools", "",
             "You can call these tools. To call one, write a block exactly like this "
             "(the arguments are a JSON object):", "",
             "<tool_call>", '{"name": "TOOL_NAME", "arguments": {"arg": "value"}}', "</tool_call>", "",
             "You may write several blocks in one reply; each result comes back in a "
             "<tool_result> block. When you are done, reply without any tool_call block.", ""]
    for t in tools:
        f = t["function"]
        lines.append(f"## {f['name']}\n{f['description']}\nParameters (JSON schema): "
                     f"{json.dumps(f['parameters'], separators=(',', ':'))}\n")
    return "\n".join(lines)


def render_call(call: dict[str, Any]) -> str:
    f = call["function"]
    try:
        args = json.loads(f["arguments"]) if f.get("arguments") else {}
    except json.JSONDecodeError:
        args = f["arguments"]
    return "<tool_call>\n" + json.dumps({"name": f["name"], "arguments": args}) + "\n</tool_call>"


def to_text_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """OpenAI-format history -> plain system/user/assistant text messages."""
    out: list[dict[str, str]] = []
    names: dict[str, str] = {}
    pending: list[str] = []

    def flush() -> None:
        if pending:
            out.append({"role": "user", "content": "\n".join(pending)})
            pending.clear()

    for m in messages:
        role = m["role"]
        if role == "tool":
            cid = m.get("tool_call_id", "")
            pending.append(f"<tool_result name={names.get(cid, m.get('name', '?'))} id={cid}>\n"
                           f"{m.get('content') or ''}\n</tool_result>")
            continue
        flush()
        if role == "system":
            content = (m.get("content") or "") + ("\n\n" + tools_prompt(tools) if tools else "")
            out.append({"role": "system", "content": content})
        elif role == "assistant":
            parts = [m.get("content") or ""]
            for c in m.get("tool_calls") or []:
                names[c["id"]] = c["function"]["name"]
                parts.append(render_call(c))
            out.append({"role": "assistant", "content": "\n".join(p for p in parts if p).strip()})
        else:
            out.append({"role": role, "content": m.get("content") or ""})
    flush()
    if tools and not any(m["role"] == "system" for m in out):
        out.insert(0, {"role": "system", "content": tools_prompt(tools)})
    return out


def _decode_call(blob: str) -> ToolCall:
    try:
        obj = json.loads(blob)
    except json.JSONDecodeError:
        # keep the raw text: the ToolSet answers with a clear "not valid JSON" error
        m = re.search(r'"name"\s*:\s*"([^"]+)"', blob)
        return ToolCall(name=m.group(1) if m else "?", arguments=blob)
    if not isinstance(obj, dict):
        return ToolCall(name="?", arguments=blob)
    args = obj.get("arguments", obj.get("parameters", {}))
    return ToolCall(name=str(obj.get("name", "?")),
                    arguments=args if isinstance(args, str) else json.dumps(args))


def parse_reply(text: str) -> tuple[str, list[ToolCall]]:
    """Model text -> (the text without the call blocks, tool calls)."""
    calls = [_decode_call(b) for b in _BLOCK.findall(text)]
    if calls:
        content = _BLOCK.sub("", text).strip()
        return content, calls
    react = _REACT.findall(text)
    if react:
        calls = [ToolCall(name=n, arguments=a) for n, a in react]
        content = text[:text.find("Action:")].strip()
        return content, calls
    return text.strip(), []
