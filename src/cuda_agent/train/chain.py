"""``cuda-agent train chain``: the four stages end to end on one GPU with a tiny model.

The recipe at toy scale, every stage on verl's own trainers with the ``hf`` rollout:

0. **warm start** (not a paper stage): a tiny Qwen2 and a byte-level BPE tokenizer built here
   from our own prompts, fitted with a short supervised run on scripted solutions of a few synth
   tasks (element-wise chains of synth's seed operators, composed and filtered by synth), half
   correct and half wrong (the last step wrong), in both the single-turn answer format and as
   multi-turn tool-calling episodes.  A random model gets the same reward on every episode (zero
   advantage); this one samples right and wrong solutions.
1. single-turn PPO with a critic (``stage 1``), rewards from the evaluator on the GPU; its
   samples are kept (``trainer.rollout_data_dir``);
2. RFT: SFT (``stage 2``) on the stage-1 samples with reward > 0;
3. value pretraining (``stage 3``): critic only, on agentic episodes of the RFT policy;
4. agentic PPO (``stage 4``), resumed from stage 3: multi-turn episodes of
   :class:`~cuda_agent.train.agent_loop.CudaAgentLoop`, checks through a GPU pool
   (``cuda-agent pool serve``, ``pool_db``).

Each stage's metrics (verl's file logger) go to ``<out>/<stage>/metrics.jsonl``, its console to
``<out>/<stage>/log.txt``; ``<out>/summary.json`` and ``<out>/plots/*.png`` sum them up.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..tasks import Task
from . import CONFIG_DIR
from .data import (JudgeSpec, agentic_messages, agentic_rows, episode_dir, single_turn_messages, single_turn_rows,
                   write_parquet)
from .presets import Preset
from .stages import LaunchSpec, command, rollout_env


# -- tasks from synth, with scripted right and wrong solutions -----------------------------------

# The seed operators of synth's table that the chain composes, each with the C expression of ``v``
# that computes it and a wrong one.  A wrong one moves a constant to 0.5 (or doubles/halves): it
# differs from the right one over a range that the outputs of these operators always reach (some
# values on each side of 0.5), so a wrong solution fails its check rather than passing by luck.
# Element-wise and without parameters: a solution is one loop over the elements.
C_OPS = {
    "torch.relu": ("fmaxf(v, 0.0f)", "fmaxf(v, 0.5f)"),
    "F.relu6": ("fminf(fmaxf(v, 0.0f), 6.0f)", "fminf(fmaxf(v, 0.0f), 0.5f)"),
    "torch.square": ("v * v", "v + v"),
    "torch.abs": ("fabsf(v)", "fabsf(v) * 0.5f"),
    "torch.neg": ("-v", "0.5f - v"),
    "torch.sigmoid": ("1.0f / (1.0f + expf(-v))", "1.0f / (1.0f + expf(-2.0f * v))"),
    "torch.tanh": ("tanhf(v)", "tanhf(0.5f * v)"),
}

BUCKETS = ("1", "2")
"""Synth's op-count buckets the chain draws from, in turn (most of the paper's mix is 2)."""


def _op_stmt(step, wrong: bool) -> str:
    """One C statement for one step of a synth program (chain, residual or two-branch form)."""
    def expr(spec_name: str) -> str:
        return "(" + C_OPS[spec_name][1 if wrong else 0] + ")"
    if step.form == "residual":
        return f"v = v + {expr(step.spec.name)};"
    if step.form == "branch" and step.branch is not None:
        return f"v = {expr(step.spec.name)} + {expr(step.branch.spec.name)};"
    return f"v = {expr(step.spec.name)};"


def kernel_body(prog, wrong: bool = False) -> str:
    """The statements that compute ``prog`` on ``v``; the wrong body gets its last step wrong."""
    n = len(prog.steps)
    return "\n    ".join(_op_stmt(st, wrong and i == n - 1) for i, st in enumerate(prog.steps))


def synth_programs(n: int, seed: int = 0) -> list:
    """``n`` synth tasks: programs of synth's programmatic composer over the seed operators of
    :data:`C_OPS`, buckets in turn, each kept only if synth's filters accept it, no two with the
    same operators.  CPU-profile sizes (~10^6 elements) whatever device judges them: synth's GPU
    sizes for an element-wise op are ~10^9 elements (its 1-100 ms band), and the chain's rewards
    are correctness only, so its checks stay short.  For the same reason the runtime band is not
    applied: it is the one filter that depends on the machine's speed, and the chain's two calls
    on one run directory must draw the same tasks.  Nor is the torch.compile step (inductor on a
    CPU takes minutes; these are element-wise torch ops)."""
    from ..synth.compose.programmatic import ProgrammaticComposer
    from ..synth.evaluate import FilterConfig, run_filters
    from ..synth.seed_table import SEED_TABLE

    composer = ProgrammaticComposer(library=[s for s in SEED_TABLE if s.name in C_OPS], profile="cpu")
    filters = FilterConfig(device="cpu", compile=False, band_ms=(0.0, float("inf")))
    progs, seen = [], set()
    k = seed
    while len(progs) < n:
        if k - seed > 50 * n:
            raise ValueError(f"synth gave fewer than {n} distinct accepted programs of {sorted(C_OPS)}")
        prog, _ = composer.program(BUCKETS[len(progs) % len(BUCKETS)], k)
        k += 1
        if tuple(prog.ops) in seen:
            continue
        with tempfile.TemporaryDirectory(prefix="ca-chain-filter-") as d:
            if not run_filters(prog.render(), filters, Path(d)).ok:
                continue
        seen.add(tuple(prog.ops))
        progs.append(prog)
    return progs


def op_name(prog) -> str:
    """The kernel's name: the operators' short names (``torch.relu`` -> ``relu``), in order."""
    short = [name.rsplit(".", 1)[-1].lower() for name in prog.ops]
    return "_".join(short) + ("_res" if any(st.form == "residual" for st in prog.steps) else "")

CUDA_KERNEL = '''#include <cuda_runtime.h>
#include <cstdint>

__global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {{
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) {{
    float v = x[i];
    {body}
    out[i] = v;
  }}
}}

extern "C" int {name}_launch(const float* x, float* out, int64_t n, void* stream) {{
  {name}_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(x, out, n);
  return (int)cudaGetLastError();
}}
'''

CPU_KERNEL = '''#include <cmath>
#include <cstdint>

extern "C" int {name}_launch(const float* x, float* out, int64_t n) {{
  for (int64_t i = 0; i < n; ++i) {{
    float v = x[i];
    {body}
    out[i] = v;
  }}
  return 0;
}}
'''

BINDING = '''#include "cuda_agent_binding.h"

extern "C" int {name}_launch(const float* x, float* out, int64_t n{stream_decl});

at::Tensor {name}(const at::Tensor& x) {{
  CA_CHECK_INPUT(x);
  CA_CHECK(x.scalar_type() == at::kFloat, "float32 only");
  at::Tensor out = at::empty_like(x);
  CA_CHECK_LAUNCH({name}_launch(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(){stream_arg}));
  return out;
}}

CUDA_AGENT_OPS(m) {{ m.def("{name}", &{name}); }}
'''

MODEL_NEW = '''import torch.nn as nn

from cuda_agent.ext import ops


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ops.{name}(x)
'''


@dataclass
class ScriptedTask:
    task: Task
    right: dict[str, str]
    wrong: dict[str, str]


def solution(name: str, body: str, device: str) -> dict[str, str]:
    """The files of an element-wise solution running the C statements ``body`` on ``v``."""
    cuda = device == "cuda"
    kernel = (CUDA_KERNEL if cuda else CPU_KERNEL).format(name=name, body=body)
    binding = BINDING.format(name=name, stream_decl=", void* stream" if cuda else "",
                             stream_arg=", cuda_agent_stream()" if cuda else "")
    return {f"kernels/{name}.{'cu' if cuda else 'cpp'}": kernel, f"kernels/{name}_binding.cpp": binding,
            "model_new.py": MODEL_NEW.format(name=name)}


def scripted_tasks(n: int, device: str) -> list[ScriptedTask]:
    """``n`` synth tasks (:func:`synth_programs`) with a right and a wrong scripted solution each."""
    if n < 1:
        raise ValueError("at least one task")
    out = []
    for prog in synth_programs(n):
        name = op_name(prog)
        task = Task(id=f"synth/chain-{name}", source=prog.render(),
                    meta={"level": 1, "ops": prog.ops, "composer": "programmatic",
                          "input_shape": list(prog.in_shape)})
        out.append(ScriptedTask(task, solution(name, kernel_body(prog), device),
                                solution(name, kernel_body(prog, wrong=True), device)))
    return out


def answer_text(files: dict[str, str]) -> str:
    """A single-turn answer in the file-block format (data.RESPONSE_FORMAT)."""
    return "".join(f'<file path="{p}">\n{c.rstrip()}\n</file>\n' for p, c in files.items())


def episode_messages(st: ScriptedTask, files: dict[str, str], device: str) -> tuple[list[dict], list[dict]]:
    """A scripted multi-turn episode (messages, tool schemas) with the tools' real outputs: write the
    kernel files, read then rewrite model_new.py, stop with a summary.  Its workspace is a new
    directory each call, laid out as the agent loop lays out its own."""
    from ..agent.tools import ToolSet
    from ..sandbox.workspace import create_workspace

    _, ep = episode_dir(Path(tempfile.gettempdir()))  # the path the agent loop's prompt shows
    try:
        ws = create_workspace(st.task, ep / "ws", device=device)
        tools = ToolSet(ws)
        msgs = agentic_messages(st.task, device, str(ws))
        steps = [("Write", {"file_path": p, "content": c}) for p, c in files.items() if p != "model_new.py"]
        steps += [("Read", {"file_path": "model_new.py"}),
                  ("Write", {"file_path": "model_new.py", "content": files["model_new.py"]})]
        for i, (name, args) in enumerate(steps):
            cid = f"call_{i}"
            msgs.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
            msgs.append({"role": "tool", "tool_call_id": cid, "name": name, "content": tools.call(name, args)})
        msgs.append({"role": "assistant", "content": "ModelNew calls my kernel."})
        return msgs, tools.schemas()
    finally:
        shutil.rmtree(ep, ignore_errors=True)


# -- tokenizer and model --------------------------------------------------------------------------

CHAT_TEMPLATE = (
    "{% if messages[0].role == 'system' or tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
    "{% if tools %}{{ '\\n# Tools' }}{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content or '' }}"
    "{% for c in (m.tool_calls or []) %}{{ '\\n' }}<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments if c.function.arguments is string else c.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""Qwen-style: tools in the system turn, ``<tool_call>`` blocks (what our reply parser reads)."""
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tokenizer(corpus: list[str], vocab: int, out: Path):
    """A byte-level BPE trained on ``corpus`` (any text still round-trips), saved to ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def loaded_tokenizer(model_dir: Path, trained):
    """The tokenizer as verl and the rollout load it: ``AutoTokenizer`` on the model directory.

    transformers chooses the class from the model's type (``Qwen2Tokenizer`` for a Qwen2 config),
    which brings its own pre-tokenizer: the same text then becomes other ids than the trained
    tokenizer gives (measured: 5,411 tokens instead of 5,110 for a stage-1 prompt), and a model
    fitted on the trained tokenizer's ids saw none of the prompts verl feeds it.  The warm start
    therefore learns the ids of this one; the vocabulary must be the trained one's."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.get_vocab() != trained.get_vocab():
        raise RuntimeError(f"{model_dir}: the tokenizer loaded from the model directory ({type(tok).__name__}) "
                           "has another vocabulary than the one trained")
    return tok


def build_model(tokenizer, preset: Preset, max_len: int, out: Path):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tokenizer), hidden_size=preset.hidden, intermediate_size=4 * preset.hidden,
                      num_hidden_layers=preset.layers, num_attention_heads=preset.heads,
                      num_key_value_heads=max(1, preset.heads // 2), max_position_embeddings=max_len,
                      tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def encode_example(tokenizer, messages: list[dict], tools: list[dict] | None, n_prompt: int) -> tuple[list[int], list[int]]:
    """(ids, labels) of a conversation as verl's agent loop builds its token stream, loss on
    everything after the first ``n_prompt`` messages (tool outputs are learnt too, which a tiny
    model can afford).

    Rendering the whole conversation and tokenizing it once is not that stream: the model writes
    each turn after the prompt's last token, so no BPE merge crosses that boundary (Qwen's
    pre-tokenizer joins the generation prompt's "\n" with an empty reply's "\n" before a tool
    call). So: the prompt as verl's builder renders it, each assistant turn tokenized on its own
    up to its end-of-turn token, each run of tool results merged by the same builder."""
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    builder = create_continuous_token_builder(tokenizer, hf_model_type="qwen2")
    kw = {"tools": tools} if tools else {}
    ids = _ids(builder.build_initial_tokens(messages[:n_prompt], tools=tools))
    n, k = len(ids), n_prompt
    while k < len(messages):
        if messages[k]["role"] == "assistant":
            before = tokenizer.apply_chat_template(messages[:k], tokenize=False, add_generation_prompt=True, **kw)
            after = tokenizer.apply_chat_template(messages[:k + 1], tokenize=False, **kw)
            if not after.startswith(before):
                raise ValueError(f"the chat template does not render turn {k} as an append of the conversation")
            turn = after[len(before):]
            end = turn.find(tokenizer.eos_token)
            if end < 0:
                raise ValueError(f"turn {k} has no end-of-turn token {tokenizer.eos_token!r}")
            ids += _ids(tokenizer.encode(turn[:end + len(tokenizer.eos_token)], add_special_tokens=False))
            k += 1
        else:
            j = next((j for j in range(k, len(messages)) if messages[j]["role"] != "tool"), len(messages))
            ids = _ids(builder.merge_context_tokens(messages[:k], messages[:j], ids, tools=tools).token_ids)
            k = j
    return ids, [-100] * n + ids[n:]


def _ids(x) -> list[int]:
    if hasattr(x, "keys") and "input_ids" in x:  # transformers 5 returns a BatchEncoding
        x = x["input_ids"]
    return list(x)


def warm_start(model, examples: list[tuple[list[int], list[int]]], steps: int, lr: float, device: str,
               log: Callable[[dict], None]) -> list[float]:
    """Plain next-token fitting of the scripted examples (batch of one, AdamW); returns the losses."""
    import torch

    import math

    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warm = max(1, steps // 20)  # linear warm-up, then cosine down to 5%: a low final loss, so samples keep the code intact
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
        0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, steps))))))
    rng = random.Random(0)
    losses = []
    for step in range(steps):
        ids, labels = examples[rng.randrange(len(examples))]
        x = torch.tensor([ids], device=device)
        y = torch.tensor([labels], device=device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=x, labels=y).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % 25 == 0 or step == steps - 1:
            log({"warm_step": step, "loss": losses[-1]})
    model.eval()
    with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        final = [float(model(input_ids=torch.tensor([i], device=device), labels=torch.tensor([y], device=device)).loss)
                 for i, y in examples]
    log({"final_loss_per_example": final})
    model.to("cpu")
    if device == "cuda":
        torch.cuda.empty_cache()  # the stages run in other processes on this GPU
    return losses


# -- stage-1 samples -> RFT rows --------------------------------------------------------------------

def rft_rows_from_samples(samples_dir: Path, tasks: dict[str, Task], device: str,
                          min_reward: float = 0.0) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """verl's stage-1 sample dumps (``<step>.jsonl``: input, output, gts, score, ...) -> SFT rows
    (``messages`` = the stage-1 prompt + the sampled answer) of the samples with score > min_reward."""
    by_source = {t.source: t for t in tasks.values()}
    rows, seen = [], {"read": 0, "kept": 0, "not above min_reward": 0, "unknown task": 0}
    for f in sorted(samples_dir.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            s = json.loads(line)
            seen["read"] += 1
            if float(s.get("score", -1)) <= min_reward:
                seen["not above min_reward"] += 1
                continue
            task = by_source.get(s.get("gts"))
            if task is None:
                seen["unknown task"] += 1
                continue
            msgs = single_turn_messages(task, device) + [{"role": "assistant", "content": s["output"]}]
            rows.append({"messages": msgs, "tools": "[]", "task_id": task.id, "reward": float(s["score"]),
                         "trajectory_id": f"stage1-{f.stem}-{seen['read']}"})
            seen["kept"] += 1
    return rows, seen


# -- metrics and plots --------------------------------------------------------------------------------

PLOTTED = {
    "reward (score mean)": "critic/score/mean",
    "entropy": "actor/entropy",
    "KL (old -> new policy)": "actor/ppo_kl",
    "policy loss": "actor/pg_loss",
    "critic loss": "critic/vf_loss",
    "explained variance": "critic/vf_explained_var",
    "advantage max": "critic/advantages/max",
    "advantage min": "critic/advantages/min",
    "SFT loss": "train/loss",
}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """verl's file logger lines ``{"step": N, "data": {...}}`` -> [{"step": N, **data}]."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            out.append({"step": d.get("step"), **(d.get("data") or {})})
    return out


def plot_stage(name: str, rows: list[dict[str, Any]], out: Path) -> Path | None:
    """One figure per stage: each plotted metric it logged, against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {label: [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
              for label, key in PLOTTED.items()}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    fig, axes = plt.subplots(1, len(series), figsize=(3.2 * len(series), 2.8), squeeze=False)
    for ax, (label, pts) in zip(axes[0], series.items()):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if len(pts) < 50 else None)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(name, fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# -- the chain ------------------------------------------------------------------------------------------

MIN_STAGE_S = 90
"""A stage is not started with less time than this left (Ray and the model alone take about as long)."""


class OutOfTime(Exception):
    """The chain's time limit leaves too little for the next stage."""


@dataclass
class StageRun:
    name: str
    rc: int | None = None
    seconds: float = 0.0
    note: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The last step's plotted metrics."""


class Chain:
    """Runs the warm start and the four stages into ``out``; ``summary()`` says what happened."""

    def __init__(self, out: Path, preset: Preset, device: str = "cuda", rollout: str = "hf",
                 stage_timeout_s: float = 600.0, time_limit_s: float | None = None,
                 echo: Callable[[str], None] = print) -> None:
        self.out, self.preset, self.device, self.rollout = out.resolve(), preset, device, rollout
        self.stage_timeout_s = stage_timeout_s
        self.deadline = time.time() + time_limit_s if time_limit_s else None
        self.echo = echo
        self.runs: list[StageRun] = []
        self.out.mkdir(parents=True, exist_ok=True)

    # -- data and model ----------------------------------------------------------------
    def prepare(self) -> dict[str, Any]:
        p, d = self.preset, self.device
        self.scripted = scripted_tasks(p.n_tasks, d)
        self.tasks = {s.task.id: s.task for s in self.scripted}
        judge = JudgeSpec(device=d, rules="strict", reward="paper")
        reps = max(1, -(-2 * max(p.batch, p.agentic_batch) // p.n_tasks))  # at least two batches of rows
        single = single_turn_rows([s.task for s in self.scripted] * reps, judge)
        agentic = agentic_rows([s.task for s in self.scripted] * reps, judge)
        for r in single + agentic:  # correctness-only rewards: -1 wrong, +1 right; no timing runs
            r["extra_info"]["timing"] = False
        self.data = self.out / "data"
        write_parquet(single, self.data / "single_turn.parquet")
        write_parquet(agentic, self.data / "agentic.parquet")
        examples_msgs = []
        for s in self.scripted:
            for files in (s.right, s.wrong):
                examples_msgs.append((single_turn_messages(s.task, d) + [
                    {"role": "assistant", "content": answer_text(files)}], None))
                examples_msgs += [episode_messages(s, files, d) for _ in range(p.path_variants)]
        corpus = [m["content"] for msgs, _ in examples_msgs for m in msgs] + [
            json.dumps(t) for _, tools in examples_msgs if tools for t in tools]
        self.model0 = self.out / "model0"
        done = self.out / "warm_start" / "info.json"
        info = json.loads(done.read_text()) if done.is_file() else {}
        # an earlier run's warm start (one without "tokenizer" learnt other ids than verl feeds: redo it)
        if "tokenizer" in info and (self.model0 / "model.safetensors").is_file():
            self.prompt_len = int(info["prompt_tokens_max"])
            self.echo(f"warm start: reused {self.model0}")
            return {**info, "reused": True}
        trained = build_tokenizer(corpus, p.vocab, self.model0)
        # the config goes first so that the tokenizer can be loaded as verl loads it; its position
        # range is a bound (RoPE: no weights), doubled because the loaded tokenizer's ids run longer
        model = build_model(trained, p, 2 * self._prompt_len(trained, examples_msgs) + p.agentic_response, self.model0)
        model.save_pretrained(self.model0)
        tok = loaded_tokenizer(self.model0, trained)
        examples = [encode_example(tok, msgs, tools, 2) for msgs, tools in examples_msgs]
        self.warm_messages, self.warm_examples = examples_msgs, examples  # what the warm start learns (tests)
        self.prompt_len = self._prompt_len(tok, examples_msgs)
        longest = max(len(ids) for ids, _ in examples)
        info = {"tasks": list(self.tasks), "examples": len(examples), "prompt_tokens_max": self.prompt_len,
                "example_tokens_max": longest, "vocab": len(tok), "tokenizer": type(tok).__name__,
                "parameters": sum(x.numel() for x in model.parameters())}
        self.echo(f"warm start: {json.dumps(info)}")
        t0 = time.time()
        log = self._jsonl(self.out / "warm_start" / "metrics.jsonl")
        losses = warm_start(model, examples, p.warm_steps, p.warm_lr, self.device if self._cuda() else "cpu", log)
        model.save_pretrained(self.model0)
        tok.save_pretrained(self.model0)
        info.update(warm_loss_first=losses[0], warm_loss_last=losses[-1], warm_seconds=round(time.time() - t0, 1))
        self._plot_losses(losses)
        (self.out / "warm_start" / "info.json").write_text(json.dumps(info, indent=1))
        return info

    @staticmethod
    def _prompt_len(tok, examples_msgs: list[tuple[list[dict], list[dict] | None]]) -> int:
        return max(len(_ids(tok.apply_chat_template(m[:2], tokenize=True, add_generation_prompt=True,
                                                    **({"tools": t} if t else {}))))
                   for m, t in examples_msgs) + 64

    def _cuda(self) -> bool:
        import torch

        return self.device == "cuda" and torch.cuda.is_available()

    def _jsonl(self, path: Path) -> Callable[[dict], None]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

        def log(d: dict) -> None:
            with path.open("a") as f:
                f.write(json.dumps(d) + "\n")
        return log

    def _plot_losses(self, losses: list[float]) -> None:
        plot_stage("warm start",
                   [{"step": i, "train/loss": v} for i, v in enumerate(losses)],
                   self.out / "plots" / "0_warm_start.png")

    # -- verl stages ------------------------------------------------------------------
    def ppo_overrides(self, response: int, batch: int) -> list[str]:
        p = self.preset
        tokens = self.prompt_len + response
        return [
            f"data.train_batch_size={batch}", f"data.max_prompt_length={self.prompt_len}",
            f"data.max_response_length={response}", "data.dataloader_num_workers=0",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={tokens}",
            f"actor_rollout_ref.actor.optim.lr={p.actor_lr}",
            f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={tokens}",
            "actor_rollout_ref.rollout.agent.num_workers=2", "actor_rollout_ref.rollout.nnodes=1",
            f"actor_rollout_ref.rollout.max_num_seqs={batch}",
            # the fitted model is sure of its code but not of the one expression it saw right and
            # wrong: a cooler sample keeps the boilerplate intact (verl scales the trainer's
            # log-probs by the same temperature)
            "actor_rollout_ref.rollout.temperature=0.7",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "actor_rollout_ref.model.use_remove_padding=false",
            "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
            f"critic.ppo_max_token_len_per_gpu={tokens}", f"critic.optim.lr={p.critic_lr}",
            "critic.model.enable_gradient_checkpointing=false", "critic.model.use_remove_padding=false",
            "+critic.model.override_config.attn_implementation=sdpa",
            "trainer.logger=[console,file]", f"trainer.save_freq={p.ppo_steps}",
            "reward.num_workers=2",  # each Ray actor holds a CPU; verl's 8 crowd a small node
        ]

    def agent_loop_yaml(self, stage_dir: Path, pool_db: Path | None) -> Path:
        import yaml

        reg = yaml.safe_load((CONFIG_DIR / "agent_loop.yaml").read_text())
        reg[0].update(max_turns=self.preset.max_turns, wall_time_s=300, bash_timeout_s=60, timing=False,
                      trajectory_dir=str(stage_dir / "trajectories"), max_parallel_episodes=16,
                      pool_db=str(pool_db) if pool_db else None, pool_timeout_s=600)
        out = stage_dir / "agent_loop.yaml"
        stage_dir.mkdir(parents=True, exist_ok=True)
        out.write_text(yaml.safe_dump(reg, sort_keys=False))
        return out

    def run_stage(self, name: str, spec: LaunchSpec, done: Path | None = None) -> StageRun:
        """Run one verl stage; when ``done`` (its output) exists from an earlier run into the same
        directory, reuse it: a chain cut by a time limit continues where it stopped."""
        d = self.out / name
        d.mkdir(parents=True, exist_ok=True)
        if done is not None and done.exists():
            run = StageRun(name, 0, 0.0, f"reused {done}")
            rows = read_metrics(d / "metrics.jsonl")
            if rows:
                run.metrics = {k: rows[-1][v] for k, v in PLOTTED.items() if v in rows[-1]}
            self.echo(f"== {name}: {run.note}")
            self.runs.append(run)
            return run
        argv = command(spec)
        env = {**os.environ, **rollout_env(spec), "VERL_FILE_LOGGER_PATH": str(d / "metrics.jsonl"),
               "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "0"}
        (d / "command.txt").write_text(" ".join(argv) + "\n")
        limit = self.stage_timeout_s
        if self.deadline is not None:
            limit = min(limit, self.deadline - time.time())
            if limit < MIN_STAGE_S:  # a stage cut short is lost; the next run into this directory starts it
                raise OutOfTime(name)
        self.echo(f"== {name}: {' '.join(argv[:6])} ... ({len(argv)} args; {d / 'command.txt'})")
        run = StageRun(name)
        t0 = time.time()
        with (d / "log.txt").open("w") as log:
            # its own process group: a timeout (or our own SIGTERM) ends the stage with the local Ray
            # cluster it started, so the next stage gets the GPU back
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=d,
                                    start_new_session=True)
            try:
                run.rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                run.rc, run.note = 124, f"timed out after {limit:.0f} s"
            finally:
                _end_group(proc)
        run.seconds = round(time.time() - t0, 1)
        rows = read_metrics(d / "metrics.jsonl")
        if rows:
            run.metrics = {k: rows[-1][v] for k, v in PLOTTED.items() if v in rows[-1]}
            run.metrics["steps_logged"] = len(rows)
        try:
            plot_stage(name, rows, self.out / "plots" / f"{name}.png")
        except ImportError as e:  # no matplotlib: the metrics are in metrics.jsonl all the same
            self.echo(f"== {name}: no plot ({e})")
        if run.rc != 0 and not run.note:
            run.note = "failed: " + " | ".join(_tail(d / "log.txt", 6))
        self.echo(f"== {name}: rc={run.rc} {run.seconds}s {json.dumps(run.metrics)} {run.note}")
        self.runs.append(run)
        self.summary()
        return run

    def stage1(self) -> Path | None:
        p = self.preset
        spec = LaunchSpec(stage=1, model=str(self.model0), data=[str(self.data / "single_turn.parquet")], gpus=1,
                          out_dir=str(self.out / "1_single_turn" / "ckpt"), rollout=self.rollout,
                          overrides=self.ppo_overrides(p.single_response, p.batch) + [
                              f"trainer.total_training_steps={p.ppo_steps}",
                              f"trainer.rollout_data_dir={self.out / '1_single_turn' / 'samples'}"])
        ckpt = self.out / "1_single_turn" / "ckpt"
        run = self.run_stage("1_single_turn", spec, done=_hf_dir(ckpt, "actor") or ckpt / "none")
        return _hf_dir(ckpt, "actor", self.model0) if run.rc == 0 else None

    def stage2(self, stage1_model: Path) -> Path | None:
        rows, seen = rft_rows_from_samples(self.out / "1_single_turn" / "samples", self.tasks, self.device)
        d = self.out / "2_rft"
        d.mkdir(parents=True, exist_ok=True)
        (d / "selection.json").write_text(json.dumps(seen, indent=1))
        self.echo(f"== 2_rft: stage-1 samples {json.dumps(seen)}")
        if not rows:
            self.runs.append(StageRun("2_rft", None, 0.0, "skipped: no stage-1 sample with reward > 0; "
                                                        "stages 3-4 start from the stage-1 actor"))
            return None
        while len(rows) < 4:  # the SFT batch below
            rows = rows + rows
        data = write_parquet(rows, d / "rft.parquet")
        longest = self.prompt_len + self.preset.single_response + 64
        spec = LaunchSpec(stage=2, model=str(stage1_model), data=[str(data)], gpus=1, out_dir=str(d / "ckpt"),
                          overrides=["data.train_batch_size=4", "data.micro_batch_size_per_gpu=1",
                                     f"data.max_length={longest}", "data.truncation=right", "data.num_workers=0",
                                     # the step count ends the run (verl stops at total_epochs too)
                                     "trainer.total_epochs=100", "trainer.total_training_steps=4",
                                     "trainer.save_freq=4",
                                     "trainer.logger=[console,file]",
                                     "+model.override_config.attn_implementation=sdpa"])
        run = self.run_stage("2_rft", spec, done=_hf_dir(d / "ckpt", None) or d / "ckpt" / "none")
        return _hf_dir(d / "ckpt", None, self.model0) if run.rc == 0 else None

    def stage34(self, model: Path, pool_db: Path | None) -> None:
        p = self.preset
        d3, d4 = self.out / "3_value_pretrain", self.out / "4_agentic"
        common = self.ppo_overrides(p.agentic_response, p.agentic_batch)
        # stage 3 keeps its config's actor lr of 0 (its last step saves the checkpoint, stage3 yaml)
        common3 = [o for o in common if not o.startswith("actor_rollout_ref.actor.optim.lr=")]
        spec3 = LaunchSpec(stage=3, model=str(model), data=[str(self.data / "agentic.parquet")], gpus=1,
                           out_dir=str(d3 / "ckpt"), warmup_steps=p.ppo_steps, rollout=self.rollout,
                           agent_loop=str(self.agent_loop_yaml(d3, pool_db)), overrides=common3)
        step = d3 / "ckpt" / f"global_step_{p.ppo_steps}"
        run3 = self.run_stage("3_value_pretrain", spec3, done=step)
        run3.metrics["episodes"] = episode_stats(d3 / "trajectories")
        if run3.rc != 0:
            return
        spec4 = LaunchSpec(stage=4, model=str(model), data=[str(self.data / "agentic.parquet")], gpus=1,
                           out_dir=str(d4 / "ckpt"), resume_from=str(step), steps=p.ppo_steps, rollout=self.rollout,
                           agent_loop=str(self.agent_loop_yaml(d4, pool_db)),
                           overrides=common + [f"trainer.rollout_data_dir={d4 / 'samples'}"])
        run4 = self.run_stage("4_agentic", spec4)
        run4.metrics["episodes"] = episode_stats(d4 / "trajectories")
        self.echo(f"== 4_agentic episodes: {json.dumps(run4.metrics['episodes'])}")

    def summary(self) -> dict[str, Any]:
        s = {"preset": asdict(self.preset), "device": self.device, "rollout": self.rollout,
             "stages": [asdict(r) for r in self.runs]}
        (self.out / "summary.json").write_text(json.dumps(s, indent=1, default=str))
        return s

    def run(self, stages: tuple[int, ...] = (1, 2, 3, 4)) -> dict[str, Any]:
        t0 = time.time()
        warm = self.prepare()
        self.runs.append(StageRun("0_warm_start", 0, 0.0 if warm.get("reused") else warm["warm_seconds"],
                                  "reused" if warm.get("reused") else "",
                                  {"loss first": warm["warm_loss_first"], "loss last": warm["warm_loss_last"]}))
        model = self.model0
        try:
            if 1 in stages:
                m1 = self.stage1()
                if m1 is None:
                    return self.summary()
                model = m1
            if 2 in stages and 1 in stages:
                m2 = self.stage2(model)
                model = m2 or model
            if 3 in stages:
                with pool(self.out / "pool", self.device) as db:
                    self.stage34(model, db)
        except OutOfTime as e:
            self.runs.append(StageRun(str(e), None, 0.0, "not started: the time limit is spent; the same "
                                                         "command again continues from here"))
            self.echo(f"== {e}: not started (time limit); run the same command again to continue")
        s = self.summary()
        s["seconds"] = round(time.time() - t0, 1)
        (self.out / "summary.json").write_text(json.dumps(s, indent=1, default=str))
        return s


def _hf_dir(ckpt: Path, role: str | None, tokenizer_from: Path | None = None) -> Path | None:
    """The Hugging Face weights of the last checkpoint under ``ckpt`` (the ``role`` subdirectory
    when there is one; never the critic's), with the tokenizer copied in if the save left it out."""
    steps = sorted(ckpt.glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))
    if not steps:
        return None
    base = steps[-1] / role if role and (steps[-1] / role).is_dir() else steps[-1]
    found = [p.parent for p in sorted(base.rglob("huggingface/config.json")) if "critic" not in p.parts]
    if not found:
        return None
    hf = found[0]
    if tokenizer_from and not (hf / "tokenizer.json").is_file():
        for f in tokenizer_from.iterdir():
            if f.name.startswith("tokenizer") or f.name in ("chat_template.jinja", "special_tokens_map.json"):
                shutil.copyfile(f, hf / f.name)
    return hf


def episode_stats(traj_dir: Path) -> dict[str, Any]:
    """Agentic episodes written by the agent loop: how many, their tool calls and rewards."""
    from ..agent.trajectory import Trajectory

    calls, rewards, stops = [], [], {}
    for f in sorted(traj_dir.rglob("trajectory.jsonl")) if traj_dir.is_dir() else []:
        for line in f.read_text().splitlines():
            if not line.strip():
                continue
            t = Trajectory.from_dict(json.loads(line))
            calls.append(sum(len(m.get("tool_calls") or []) for m in t.messages if m.get("role") == "assistant"))
            rewards.append(t.reward)
            stops[t.stop_reason] = stops.get(t.stop_reason, 0) + 1
    n = len(calls)
    return {"episodes": n, "with_tool_calls": sum(c > 0 for c in calls),
            "tool_calls_mean": round(sum(calls) / n, 2) if n else 0.0, "tool_calls_max": max(calls, default=0),
            "final_rewards": {str(r): rewards.count(r) for r in sorted(set(rewards), key=str)}, "stop_reasons": stops}


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, to the process group that ``proc`` leads (what is left of it)."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(1)  # the group may outlive its leader by a moment


def _tail(path: Path, n: int) -> list[str]:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()] if path.is_file() else []
    return lines[-n:]


class pool:
    """A ``cuda-agent pool serve`` process for the agentic stages (context manager -> its db path)."""

    def __init__(self, d: Path, device: str) -> None:
        self.d, self.device, self.proc = d, device, None

    def __enter__(self) -> Path:
        self.d.mkdir(parents=True, exist_ok=True)
        db, log = self.d / "pool.sqlite", self.d / "serve.log"
        # one GPU checks one job at a time; builds run beside it
        slots = ["--slots", "1"] if self.device == "cpu" else ["--build-workers", "8"]
        self.proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli",
                                      "pool", "serve", "--db", str(db), "--device", self.device, *slots],
                                     stdout=log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while "SIGINT or SIGTERM stops" not in log.read_text():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("the pool did not start: " + " | ".join(_tail(log, 5)))
            time.sleep(0.5)
        return db

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def copy_plots(out: Path, dest: Path) -> None:
    """The run's plots, summary, per-stage metrics and the PPO stages' samples (verl's dumps, text
    and score per sample) and agentic trajectories (small files) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for p in [out / "summary.json", *out.glob("plots/*.png"), *out.glob("*/metrics.jsonl"), *out.glob("*/log.txt"),
              *out.glob("*/selection.json"), *out.glob("warm_start/info.json"), *out.glob("*/samples/*.jsonl"),
              *out.glob("*/trajectories/*/trajectory.jsonl")]:
        rel = p.relative_to(out)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dest / rel)
