"""What every LLM back-end returns and the registry that names them.

A back-end turns an OpenAI-format message history plus the tool schemas into one
:class:`Reply` (text, tool calls, token usage).  Back-ends register a factory with
``@register_backend("name")``; :func:`make_backend` builds one from keyword options.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol

from ...registry import Registry


class BackendError(RuntimeError):
    """The LLM could not be reached or answered garbage after all retries."""


class BackendConfigError(ValueError):
    """The back-end is not configured; the message says which flags / env vars to set."""


@dataclass
class ToolCall:
    """One function call requested by the model."""

    name: str
    arguments: str
    """JSON-encoded arguments (as in the OpenAI protocol)."""
    id: str = field(default_factory=lambda: "call_" + secrets.token_hex(6))

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Reply:
    """One assistant turn."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    reasoning: str | None = None
    """Reasoning text when the server returns it separately (``reasoning_content``)."""

    def message(self) -> dict[str, Any]:
        """The OpenAI-format assistant message for the history."""
        m: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            m["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.reasoning:
            m["reasoning_content"] = self.reasoning
        return m

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Backend(Protocol):
    """The interface the loop needs."""

    name: str
    model: str

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        ...

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        ...


def approx_tokens(messages: list[dict[str, Any]]) -> int:
    """A tokenizer-free estimate (about 3.5 characters per token for code and English)."""
    n = 0
    for m in messages:
        n += 4 + len(m.get("content") or "") // 3
        for c in m.get("tool_calls") or []:
            n += 8 + len(json.dumps(c)) // 3
    return n


_BACKENDS: Registry = Registry("LLM back-end")


def register_backend(name: str) -> Callable[[Callable[..., Backend]], Callable[..., Backend]]:
    """Register a back-end factory (a class or function taking keyword options); a name taken
    by another back-end is refused."""
    return _BACKENDS.register(name)


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def make_backend(name: str, **options: Any) -> Backend:
    """Build back-end ``name``; options the factory does not take are an error."""
    try:
        factory = _BACKENDS[name]
    except KeyError:
        raise BackendConfigError(f"unknown back-end {name!r}; known: {', '.join(backend_names())}") from None
    return factory(**options)
