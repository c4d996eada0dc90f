"""``openai`` and ``text`` back-ends: any OpenAI-compatible chat-completions server.

``openai`` uses native tool calls; ``text`` sends no ``tools`` and uses the text format of
:mod:`.text_format` (for models served without a tool-call parser).  Base URL, key and model
come from the arguments or ``$OPENAI_BASE_URL`` / ``$OPENAI_API_KEY`` / ``$CUDA_AGENT_MODEL``.
Rate limits (429), server errors (5xx), timeouts and connection errors are retried with
exponential backoff and jitter; other errors (400, 401, 404 ...) fail at once.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

from .base import (BackendConfigError, BackendError, Reply, ToolCall, Usage, approx_tokens,
                   register_backend)
from .text_format import parse_reply, to_text_messages

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "CUDA_AGENT_MODEL"

HOW_TO_CONFIGURE = (f"no LLM configured: pass --model MODEL (or set ${ENV_MODEL}) and the server with "
                    f"--base-url URL / ${ENV_BASE_URL} (default api.openai.com) and --api-key KEY / "
                    f"${ENV_API_KEY}")


@register_backend("openai")
class OpenAIChat:
    """Chat completions with native tool calls through the ``openai`` client."""

    name = "openai"
    native_tools = True

    def __init__(self, model: str | None = None, base_url: str | None = None,
                 api_key: str | None = None, temperature: float | None = None,
                 top_p: float | None = None, max_tokens: int | None = None,
                 max_retries: int = 6, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 timeout_s: float = 600.0, extra_body: dict[str, Any] | None = None) -> None:
        try:
            import openai
        except ImportError:  # pragma: no cover - depends on the install
            raise BackendConfigError("the openai back-end needs the openai package: "
                                     "pip install 'cuda-agent[agent]'") from None
        self.model = model or os.environ.get(ENV_MODEL) or ""
        if not self.model:
            raise BackendConfigError(HOW_TO_CONFIGURE)
        base_url = base_url or os.environ.get(ENV_BASE_URL) or None
        api_key = api_key or os.environ.get(ENV_API_KEY)
        if not api_key:
            if base_url is None:
                raise BackendConfigError(HOW_TO_CONFIGURE.replace("no LLM configured",
                                                                  "no API key for api.openai.com"))
            api_key = "EMPTY"  # local servers (vLLM, SGLang) accept any key
        self._openai = openai
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                                    timeout=timeout_s)
        self.base_url = str(self.client.base_url)
        self.sampling = {k: v for k, v in {"temperature": temperature, "top_p": top_p,
                                           "max_tokens": max_tokens}.items() if v is not None}
        self.extra_body = extra_body
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.retries_done = 0

    def _retryable(self, e: Exception) -> bool:
        o = self._openai
        if isinstance(e, (o.RateLimitError, o.APITimeoutError, o.APIConnectionError,
                          o.InternalServerError)):
            return True
        return isinstance(e, o.APIStatusError) and e.status_code >= 500

    def _create(self, **kwargs: Any) -> Any:
        delay = self.backoff_s
        for attempt in range(self.max_retries + 1):
            try:
                return self.client.chat.completions.create(model=self.model, **self.sampling,
                                                           extra_body=self.extra_body, **kwargs)
            except self._openai.OpenAIError as e:
                if attempt >= self.max_retries or not self._retryable(e):
                    status = getattr(e, "status_code", None)
                    raise BackendError(f"chat completion failed ({type(e).__name__}"
                                       f"{' ' + str(status) if status else ''}) after {attempt + 1} "
                                       f"attempt{'s' if attempt else ''}: {e}") from None
                wait = delay
                retry_after = getattr(getattr(e, "response", None), "headers", {}) or {}
                if "retry-after" in retry_after:
                    try:
                        wait = max(wait, float(retry_after["retry-after"]))
                    except ValueError:
                        pass
                time.sleep(min(self.max_backoff_s, wait) * (0.5 + random.random() / 2))
                delay = min(self.max_backoff_s, delay * 2)
                self.retries_done += 1
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _usage(resp: Any) -> Usage:
        u = getattr(resp, "usage", None)
        if u is None:
            return Usage()
        return Usage(prompt_tokens=u.prompt_tokens or 0, completion_tokens=u.completion_tokens or 0)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        resp = self._create(messages=messages, **({"tools": tools} if tools else {}))
        if not resp.choices:
            raise BackendError("the server returned no choices")
        ch = resp.choices[0]
        msg = ch.message
        calls = [ToolCall(id=c.id or ToolCall("", "").id, name=c.function.name,
                          arguments=c.function.arguments or "{}")
                 for c in (msg.tool_calls or []) if getattr(c, "function", None)]
        reasoning = getattr(msg, "reasoning_content", None) or (msg.model_extra or {}).get("reasoning_content")
        return Reply(content=msg.content or "", tool_calls=calls, usage=self._usage(resp),
                     finish_reason=ch.finish_reason or "stop", reasoning=reasoning)

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return approx_tokens(messages)


@register_backend("text")
class TextChat(OpenAIChat):
    """The same server, tool calls written as text blocks (see :mod:`.text_format`)."""

    name = "text"
    native_tools = False

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        resp = self._create(messages=to_text_messages(messages, tools))
        if not resp.choices:
            raise BackendError("the server returned no choices")
        ch = resp.choices[0]
        content, calls = parse_reply(ch.message.content or "")
        return Reply(content=content, tool_calls=calls, usage=self._usage(resp),
                     finish_reason=ch.finish_reason or "stop")
