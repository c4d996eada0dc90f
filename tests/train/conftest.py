"""Shared set-up of the training tests: a small CPU task with a known C++ solution, a tiny
offline tokenizer (byte-level BPE trained here, with a Qwen-like chat template that renders
tools natively and ``<tool_call>`` blocks), a scripted generation server speaking verl's
server-manager interface (token ids in and out), and verl's own composed PPO config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuda_agent.tasks import Task

TASK_SRC = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Clamp to [0, 6] (ReLU6)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp(x, 0.0, 6.0)


def get_inputs():
    return [torch.randn(64, 256) * 4]


def get_init_inputs():
    return []
'''

KERNEL = '''#include <cstdint>
extern "C" int relu6_cpu(const float* x, float* out, int64_t n, float hi) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    out[i] = v < 0.0f ? 0.0f : (v > hi ? hi : v);
  }
  return 0;
}
'''

BINDING = '''#include "cuda_agent_binding.h"

extern "C" int relu6_cpu(const float* x, float* out, int64_t n, float hi);

at::Tensor relu6(const at::Tensor& x) {
  CA_CHECK_INPUT(x);
  CA_CHECK(x.scalar_type() == at::kFloat, "float32 only");
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH(relu6_cpu(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), HI));
  return out;
}

CUDA_AGENT_OPS(m) { m.def("relu6", &relu6); }
'''

MODEL_NEW = '''import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ops.relu6(x)
'''


def binding(hi: str = "6.0f") -> str:
    return BINDING.replace("HI", hi)


def answer(hi: str = "6.0f") -> str:
    """A stage-1 answer in the file-block format."""
    return ("I fuse the clamp into one pass.\n"
            f'<file path="kernels/relu6.cpp">\n{KERNEL}</file>\n'
            f'<file path="kernels/relu6_binding.cpp">\n{binding(hi)}</file>\n'
            f'<file path="model_new.py">\n{MODEL_NEW}</file>\n')


@pytest.fixture(scope="session")
def task() -> Task:
    return Task(id="test/relu6", source=TASK_SRC, meta={"level": 1})


# -- a tiny tokenizer ------------------------------------------------------------------------

CHAT_TEMPLATE = (
    "{% if messages[0].role == 'system' or tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
    "{% if tools %}{{ '\\n# Tools' }}{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}{% endif %}<|im_end|>"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{% for c in (m.tool_calls or []) %}{{ '\\n' }}<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments if c.function.arguments is string else c.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}<|im_end|>"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    """Byte-level BPE trained on our own prompts and code: any text round-trips exactly."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from cuda_agent.sandbox.workspace import skill_text

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [skill_text("cpu"), TASK_SRC, KERNEL, BINDING, MODEL_NEW,
              '<tool_call>\n{"name": "Bash", "arguments": {"command": "cuda-agent verify"}}\n</tool_call>']
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    d = tmp_path_factory.mktemp("tiny_tokenizer")
    fast.save_pretrained(d)
    fast.path = str(d)
    return fast


# -- a scripted generation server (verl's server-manager interface) ---------------------------

def render_step(step) -> str:
    """A scripted assistant turn as the text the model would generate."""
    if isinstance(step, str):
        return step
    parts = [step.get("content", "")]
    for c in step.get("tool_calls", []):
        parts.append("<tool_call>\n" + json.dumps({"name": c["name"], "arguments": c["arguments"]}) + "\n</tool_call>")
    return "\n".join(p for p in parts if p)


class ScriptedServer:
    """``await generate(request_id=, prompt_ids=, sampling_params=)`` -> verl ``TokenOutput``:
    the next scripted turn of that request id's episode, tokenized, ending with the EOS token,
    cut to ``max_tokens``, with made-up log-probs.  Records every request."""

    def __init__(self, tokenizer, steps) -> None:
        self.tokenizer = tokenizer
        self.steps = list(steps)
        self.requests: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        i = sum(r["request_id"] == request_id for r in self.requests)
        self.requests.append({"request_id": request_id, "prompt_ids": list(prompt_ids),
                              "sampling_params": dict(sampling_params)})
        text = render_step(self.steps[i]) if i < len(self.steps) else "(script finished)"
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        ids = ids[:int(sampling_params.get("max_tokens") or len(ids))]
        self.requests[-1]["generated"] = ids
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")


def call(name, **args):
    return {"tool_calls": [{"name": name, "arguments": args}]}


# -- verl's own config ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def verl_config_dir() -> Path:
    verl = pytest.importorskip("verl", reason="verl is not installed (pip install 'cuda-agent[train]')")
    return Path(verl.__file__).parent / "trainer" / "config"


@pytest.fixture(scope="session")
def tiny_model(tokenizer, tmp_path_factory) -> Path:
    """A randomly initialised two-layer Qwen2 with the tiny tokenizer, saved locally."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=131072,
                      tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)
    d = tmp_path_factory.mktemp("tiny_model")
    Qwen2ForCausalLM(cfg).save_pretrained(d)
    tokenizer.save_pretrained(d)
    return d
