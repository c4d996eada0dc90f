"""LLM back-ends, looked up by name: ``openai`` (native tool calls), ``text`` (tool calls
as text blocks over the same chat API), ``hf`` (local transformers model) and ``scripted``
(predetermined turns).  Add your own with :func:`register_backend`.
"""

from __future__ import annotations

from . import hf, openai_chat, scripted  # noqa: F401  (registration)
from .base import (Backend, BackendConfigError, BackendError, Reply, ToolCall, Usage,
                   approx_tokens, backend_names, make_backend, register_backend)
from .openai_chat import HOW_TO_CONFIGURE
from .scripted import Scripted
from .text_format import parse_reply, to_text_messages, tools_prompt

__all__ = ["Backend", "BackendConfigError", "BackendError", "Reply", "ToolCall", "Usage",
           "approx_tokens", "backend_names", "make_backend", "register_backend", "Scripted",
           "parse_reply", "to_text_messages", "tools_prompt", "HOW_TO_CONFIGURE"]
