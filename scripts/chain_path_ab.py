"""A/B on the CPU: does fitting the chain's scripted episodes at several workspace paths let a small model
write a well-formed first tool call at a path it has never seen (the agent loop shows a new one every
episode)?

    python scripts/chain_path_ab.py VARIANTS STEPS OUT_DIR [old]

VARIANTS episodes a solution (``Preset.path_variants``), STEPS warm-start steps, on a 2-task,
96-wide, 2-layer model (a small stand-in for the tiny preset, ~5 min on 2 cores at 700 steps); ``old`` fits
the episodes at the fifth session's paths (``/tmp/ca-chain-ep-<rand>/ws``).  The model then writes its first
turn greedily, 3 times a task, each at a fresh path of the agent loop's form; one JSON line says how many
first calls were well formed and how many named the task's own kernel file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import cuda_agent.train.chain as chain_mod  # noqa: E402
from cuda_agent.train.chain import Chain, episode_messages  # noqa: E402
from cuda_agent.train.presets import PRESETS  # noqa: E402


@contextlib.contextmanager
def old_layout(on: bool):
    """The fifth session's episode directories (/tmp/ca-chain-ep-<rand>/ws) for the fit, when ``on``."""
    real = chain_mod.episode_dir
    if on:
        chain_mod.episode_dir = lambda root: ("x", Path(tempfile.mkdtemp(prefix="ca-chain-ep-", dir=root)))
    try:
        yield
    finally:
        chain_mod.episode_dir = real


def first_calls(chain: Chain) -> tuple[int, int, list[str]]:
    """(well-formed first Write calls, ones naming the task's own kernel file, texts) of greedy first turns,
    three a task, each at a fresh path of the agent loop's form."""
    import torch
    from transformers import AutoModelForCausalLM
    from verl.utils import hf_tokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    tok = hf_tokenizer(str(chain.model0))
    model = AutoModelForCausalLM.from_pretrained(chain.model0).eval()
    builder = create_continuous_token_builder(tok, hf_model_type="qwen2")
    ok, formed, texts = 0, 0, []
    for st in chain.scripted:
        for _ in range(3):
            msgs, tools = episode_messages(st, st.right, "cpu")  # a fresh path, never fitted
            path = json.loads(msgs[2]["tool_calls"][0]["function"]["arguments"])["file_path"]
            ids = list(builder.build_initial_tokens(msgs[:2], tools=tools))
            with torch.no_grad():
                gen = model.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False)[0][len(ids):]
            text = tok.decode(gen, skip_special_tokens=True)
            formed += '{"name": "Write", "arguments": {"file_path": "kernels/' in text
            ok += f'{{"name": "Write", "arguments": {{"file_path": "{path}"' in text
            texts.append(text[:100])
    return formed, ok, texts


def main() -> None:
    import torch

    variants, steps, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    layout = "old" if len(sys.argv) > 4 and sys.argv[4] == "old" else "agent-loop"
    preset = dataclasses.replace(PRESETS["cpu-smoke"], hidden=96, layers=2, heads=2, vocab=3000, n_tasks=2,
                                 warm_steps=steps, warm_lr=2e-3, path_variants=variants)
    torch.manual_seed(0)
    t0 = time.time()
    chain = Chain(out, preset, device="cpu", echo=lambda s: None)
    with old_layout(layout == "old"):
        info = chain.prepare()
    fit_s = time.time() - t0
    formed, ok, texts = first_calls(chain)
    n = 3 * len(chain.scripted)
    print(json.dumps({"layout": layout, "variants": variants, "steps": steps, "examples": info["examples"],
                      "loss_last": info["warm_loss_last"], "fit_s": round(fit_s, 1), "well_formed": f"{formed}/{n}",
                      "right_file": f"{ok}/{n}", "samples": texts[:2]}))


if __name__ == "__main__":
    main()
