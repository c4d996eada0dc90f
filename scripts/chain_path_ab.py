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
import dataclasses, json, sys, time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from cuda_agent.train.chain import PRESETS, Chain, episode_messages

variants, steps, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
preset = dataclasses.replace(PRESETS["cpu-smoke"], hidden=96, layers=2, heads=2, vocab=3000, n_tasks=2, warm_steps=steps,
                             warm_lr=2e-3, path_variants=variants)
torch.manual_seed(0)
t0 = time.time()
import cuda_agent.train.chain as chain_mod
real_dir = chain_mod.episode_dir
if len(sys.argv) > 4 and sys.argv[4] == "old":  # the fifth session's layout: /tmp/ca-chain-ep-<rand>/ws
    import tempfile
    chain_mod.episode_dir = lambda root: ("x", Path(tempfile.mkdtemp(prefix="ca-chain-ep-", dir=root)))
chain = Chain(out, preset, device="cpu", echo=lambda s: None)
info = chain.prepare()
chain_mod.episode_dir = real_dir
fit_s = time.time() - t0
from transformers import AutoModelForCausalLM
from verl.utils import hf_tokenizer
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

tok = hf_tokenizer(str(chain.model0))
model = AutoModelForCausalLM.from_pretrained(chain.model0).eval()
builder = create_continuous_token_builder(tok, hf_model_type="qwen2")
ok, formed, firsts = 0, 0, []
for st in chain.scripted:
    for trial in range(3):
        msgs, tools = episode_messages(st, st.right, "cpu")  # a fresh path, never fitted
        want_call = msgs[2]["tool_calls"][0]["function"]
        ids = list(builder.build_initial_tokens(msgs[:2], tools=tools))
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False)[0][len(ids):]
        text = tok.decode(gen, skip_special_tokens=True)
        formed += '{"name": "Write", "arguments": {"file_path": "kernels/' in text
        ok += ('{"name": "Write", "arguments": {"file_path": "' + json.loads(want_call["arguments"])["file_path"] + '"') in text
        firsts.append(text[:100])
print(json.dumps({"layout": sys.argv[4] if len(sys.argv) > 4 else "agent-loop", "variants": variants, "steps": steps, "examples": info["examples"], "loss_last": info["warm_loss_last"],
                  "fit_s": round(fit_s, 1), "well_formed": f"{formed}/6", "right_file": f"{ok}/6", "samples": firsts[:2]}))
