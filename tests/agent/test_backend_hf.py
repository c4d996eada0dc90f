"""The hf back-end with tiny models built here (no download).

One model has random weights (the whole path runs: chat template, generate, token
accounting); the other is a GPT-2 whose weights are set by hand so that its output at
position p is a chosen byte: it writes a tool-call block, which the back-end must parse.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from cuda_agent.agent import Agent, AgentConfig, Budget  # noqa: E402
from cuda_agent.agent.llm import make_backend  # noqa: E402
from cuda_agent.agent.llm.hf import plain_prompt  # noqa: E402
from cuda_agent.agent.llm.text_format import to_text_messages  # noqa: E402
from cuda_agent.tasks import Task  # noqa: E402

EOS = "<|endoftext|>"


def byte_tokenizer(chat_template: str | None = None):
    """A byte-level tokenizer: 256 byte tokens + EOS, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    vocab[EOS] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    if chat_template:
        fast.chat_template = chat_template
    return fast


TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.fixture(scope="module")
def random_llama():
    tok = byte_tokenizer(TEMPLATE)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                   max_position_embeddings=8192, eos_token_id=tok.eos_token_id,
                                   pad_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval(), tok


def test_random_model_generates_with_token_accounting(random_llama):
    model, tok = random_llama
    be = make_backend("hf", model=model, tokenizer=tok, max_new_tokens=12)
    msgs = [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "hi"}]
    prompt = be.render(msgs, [])
    assert prompt == "<system>You write kernels.</system>\n<user>hi</user>\n<assistant>"
    r = be.complete(msgs, [])
    assert r.usage.prompt_tokens == len(prompt.encode()) == be.count_tokens(msgs)
    assert 1 <= r.usage.completion_tokens <= 12
    assert isinstance(r.content, str) and r.finish_reason in ("stop", "length")


def test_random_model_drives_an_episode(random_llama, tmp_path):
    model, tok = random_llama
    ws = tmp_path / "ws"
    ws.mkdir()
    task = Task(id="t", source="class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n")
    be = make_backend("hf", model=model, tokenizer=tok, max_new_tokens=4)
    res = Agent(be, None, AgentConfig(budget=Budget(max_turns=2))).run(task, ws, tmp_path / "out")
    t = res.trajectory
    assert t.stop_reason in ("finished", "max_turns") and t.turns
    assert t.turns[0].prompt_tokens > 1000  # the tool descriptions are in the prompt
    assert t.completion_tokens == sum(x.completion_tokens for x in t.turns) > 0


def crafted_gpt2(tok, prompt_len: int, target: str):
    """GPT-2 whose residual stream is a one-hot of the position; lm_head maps position
    prompt_len - 1 + k to byte k of ``target`` (then EOS)."""
    ids = tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    V = len(tok)
    P = prompt_len + len(ids) + 1
    H = V + P
    H += (-H) % 4
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=P, n_embd=H, n_layer=1, n_head=4,
                                  tie_word_embeddings=False, eos_token_id=tok.eos_token_id,
                                  pad_token_id=tok.eos_token_id)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.transformer.ln_f.weight.fill_(1.0)
        for blk in m.transformer.h:
            blk.ln_1.weight.fill_(1.0)
            blk.ln_2.weight.fill_(1.0)
        for pos in range(P):
            m.transformer.wpe.weight[pos, V + pos] = 1.0
        for k, t in enumerate(ids):
            m.lm_head.weight[t, V + prompt_len - 1 + k] = 1.0
    return m


def test_crafted_model_tool_call_is_parsed():
    tok = byte_tokenizer()
    msgs = [{"role": "user", "content": "list"}]
    prompt = plain_prompt(to_text_messages(msgs, []))
    n = len(tok(prompt, add_special_tokens=False)["input_ids"])
    target = 'Looking.\n<tool_call>\n{"name": "Bash", "arguments": {"command": "ls -1"}}\n</tool_call>'
    be = make_backend("hf", model=crafted_gpt2(tok, n, target), tokenizer=tok, max_new_tokens=200)
    r = be.complete(msgs, [])
    assert r.content == "Looking."
    assert [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [("Bash", {"command": "ls -1"})]
    assert r.usage.prompt_tokens == n and r.usage.completion_tokens == len(target.encode()) + 1
    assert r.finish_reason == "stop"
