"""``hf`` back-end: a local Hugging Face ``transformers`` causal LM.

The history is rendered with the text tool-call format of :mod:`.text_format` (tools
described in the system prompt, calls written as ``<tool_call>{json}</tool_call>`` blocks,
results returned in ``<tool_result>`` blocks) and then with the tokenizer's chat template;
a tokenizer without one gets a plain ``<|role|>`` template.  Token counts come from the
tokenizer.  Generation runs under a lock, so parallel attempts can share one model.
"""

from __future__ import annotations

import threading
from typing import Any

from .base import BackendConfigError, Reply, Usage, register_backend
from .text_format import parse_reply, to_text_messages

PLAIN_TEMPLATE_SEP = "\n"


def plain_prompt(messages: list[dict[str, str]]) -> str:
    """The fallback template: ``<|role|>\\ncontent`` blocks, then ``<|assistant|>``."""
    parts = [f"<|{m['role']}|>{PLAIN_TEMPLATE_SEP}{m['content']}" for m in messages]
    return PLAIN_TEMPLATE_SEP.join(parts) + f"{PLAIN_TEMPLATE_SEP}<|assistant|>{PLAIN_TEMPLATE_SEP}"


@register_backend("hf")
class HFLocal:
    """Generate with a local model; ``model`` is a path / hub id or a loaded model object."""

    name = "hf"

    def __init__(self, model: Any = None, tokenizer: Any = None, max_new_tokens: int = 1024,
                 temperature: float = 0.0, top_p: float = 1.0, device: str | None = None,
                 dtype: str | None = None, max_context_tokens: int | None = None) -> None:
        if model is None:
            raise BackendConfigError("the hf back-end needs --model PATH (a local transformers model directory)")
        try:
            import torch
            import transformers
        except ImportError:  # pragma: no cover
            raise BackendConfigError("the hf back-end needs transformers: pip install transformers") from None
        if isinstance(model, str):
            kwargs: dict[str, Any] = {}
            if dtype:
                kwargs["dtype"] = getattr(torch, dtype)
            self.model_name = model
            tokenizer = tokenizer or transformers.AutoTokenizer.from_pretrained(model)
            model = transformers.AutoModelForCausalLM.from_pretrained(model, **kwargs)
        else:
            self.model_name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        if tokenizer is None:
            raise BackendConfigError("the hf back-end needs a tokenizer with a model object")
        self.lm = model
        self.tokenizer = tokenizer
        if device:
            self.lm.to(device)
        self.device = next(self.lm.parameters()).device
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.max_context_tokens = max_context_tokens
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        """The model's name (the module itself is ``self.lm``)."""
        return self.model_name

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        text_msgs = to_text_messages(messages, tools)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(text_msgs, tokenize=False, add_generation_prompt=True)
        return plain_prompt(text_msgs)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        import torch

        prompt = self.render(messages, tools)
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
        if self.max_context_tokens and ids.shape[1] > self.max_context_tokens:
            ids = ids[:, -self.max_context_tokens:]
        ids = ids.to(self.device)
        gen: dict[str, Any] = {"max_new_tokens": self.max_new_tokens,
                               "attention_mask": torch.ones_like(ids)}
        if self.temperature > 0:
            gen.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        else:
            gen.update(do_sample=False)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        if pad is not None:
            gen["pad_token_id"] = pad
        with self._lock, torch.no_grad():
            out = self.lm.generate(ids, **gen)
        new = out[0, ids.shape[1]:]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        content, calls = parse_reply(text)
        eos = self.tokenizer.eos_token_id
        finish = "stop" if (eos is not None and len(new) and int(new[-1]) == eos) or len(new) < self.max_new_tokens else "length"
        return Reply(content=content, tool_calls=calls,
                     usage=Usage(prompt_tokens=int(ids.shape[1]), completion_tokens=int(len(new))),
                     finish_reason=finish)

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return len(self.tokenizer(self.render(messages, []), add_special_tokens=False)["input_ids"])
