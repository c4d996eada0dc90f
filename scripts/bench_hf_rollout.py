"""Where the hf rollout's generation time goes, without verl's trainer around it.

The tiny preset's stage 1 spent 30-47 s generating ~150 tokens for 8 prompts of ~5,400 tokens
on an H100, and a batch of 1 took 2.9 s: time that grows with the batch, as on a CPU. This runs
our ``HFServer`` on a random model of the tiny preset's shape, batch 8 and batch 1, before and
after a sleep/wake cycle (what the trainer does around every step), beside transformers'
``generate`` alone, and prints one JSON line per case.

Usage: python scripts/bench_hf_rollout.py [OUT.json] [--device cuda] [--prompt 5400] [--new 160]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prompt", type=int, default=5400)
    ap.add_argument("--new", type=int, default=160)
    ap.add_argument("--cudnn-sdp", action="store_true", help="turn cuDNN attention back on (the server turns it off)")
    a = ap.parse_args()

    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from verl.workers.config import HFModelConfig, RolloutConfig

    from cuda_agent.train.presets import PRESETS
    from cuda_agent.train.hf_rollout import HFServer

    p = PRESETS["tiny"]
    cfg = Qwen2Config(vocab_size=p.vocab, hidden_size=p.hidden, intermediate_size=4 * p.hidden,
                      num_hidden_layers=p.layers, num_attention_heads=p.heads,
                      num_key_value_heads=max(1, p.heads // 2), max_position_embeddings=2 * a.prompt + 4096,
                      tie_word_embeddings=True, eos_token_id=p.vocab - 1, pad_token_id=p.vocab - 2)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        torch.manual_seed(0)
        Qwen2ForCausalLM(cfg).save_pretrained(d)
        tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
                                      eos_token="<unk>", pad_token="<unk>")
        tok.save_pretrained(d)
        server = HFServer(RolloutConfig(name="hf", prompt_length=a.prompt + 64, response_length=a.new,
                                        dtype="bfloat16", max_num_seqs=8),
                          HFModelConfig(path=d), device=a.device)
        if a.cudnn_sdp:
            torch.backends.cuda.enable_cudnn_sdp(True)
        # a random model rarely draws the eos: every row runs to --new tokens
        params = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "logprobs": True, "max_tokens": a.new}

        async def wave(n: int) -> float:
            prompts = [torch.randint(0, p.vocab - 2, (a.prompt - 7 * i,)).tolist() for i in range(n)]
            t = time.perf_counter()
            await asyncio.gather(*[server.generate(f"r{i}", prompt_ids=q, sampling_params=params)
                                   for i, q in enumerate(prompts)])
            if a.device == "cuda":
                torch.cuda.synchronize()
            return time.perf_counter() - t

        async def run() -> None:
            await wave(1)  # warm-up: kernels, allocator
            for label in ("fresh", "after sleep/wake"):
                if label != "fresh":
                    await server.sleep()
                    await server.wake_up()
                for n in (1, 8):
                    s = await wave(n)
                    rows.append({"case": f"HFServer {label}", "cudnn_sdp": a.cudnn_sdp, "batch": n,
                                 "prompt": a.prompt, "new": a.new,
                                 "seconds": round(s, 2), "ms_per_step": round(1000 * s / a.new, 1),
                                 "model_device": await server.device_of_model(), **await server.stats()})
                    print(json.dumps(rows[-1]), flush=True)

        asyncio.run(run())
        model = server.model
        for n in (1, 8):
            ids = torch.randint(0, p.vocab - 2, (n, a.prompt), device=model.device)
            t = time.perf_counter()
            with torch.no_grad():
                model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=a.new,
                               min_new_tokens=a.new, do_sample=True, temperature=0.7, pad_token_id=p.vocab - 2)
            if a.device == "cuda":
                torch.cuda.synchronize()
            s = time.perf_counter() - t
            rows.append({"case": "transformers generate alone", "cudnn_sdp": a.cudnn_sdp, "batch": n,
                         "prompt": a.prompt, "new": a.new,
                         "seconds": round(s, 2), "ms_per_step": round(1000 * s / a.new, 1)})
            print(json.dumps(rows[-1]), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
