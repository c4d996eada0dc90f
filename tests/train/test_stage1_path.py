"""The stage-1 reward as verl computes it: verl's AgentLoopWorker runs its single-turn agent loop
on our parquet rows (the prompt tokenized by verl's own builder with the tokenizer verl loads from
the model directory), a token server answers, and verl's RewardLoopWorker decodes the response and
calls our compute_score, which really checks the answer on the CPU: a right answer scores +1, a
wrong one -1, and the response verl scores is the text the server produced."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'cuda-agent[train]')")

from hydra import compose, initialize_config_dir  # noqa: E402

from cuda_agent.train import CONFIG_DIR  # noqa: E402
from cuda_agent.train.chain import _ids  # noqa: E402
from cuda_agent.train.data import JudgeSpec, single_turn_rows, write_parquet  # noqa: E402
from cuda_agent.train.stages import LaunchSpec, overrides  # noqa: E402

from .conftest import answer  # noqa: E402


class AnswerServer:
    """``generate`` -> the next scripted answer (text tokenized, EOS appended); records the prompts.
    Answers go one per request in arrival order (conftest's ScriptedServer scripts the turns of one
    episode per request id, so every single-turn request would get its first turn)."""

    def __init__(self, tokenizer, answers: list[str]) -> None:
        self.tokenizer, self.answers, self.prompts = tokenizer, list(answers), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        ids = self.tokenizer.encode(self.answers[len(self.prompts) - 1], add_special_tokens=False)
        ids.append(self.tokenizer.eos_token_id)
        return TokenOutput(token_ids=ids, log_probs=[-0.1] * len(ids), stop_reason="completed")


def test_single_turn_rewards_through_verls_workers(task, tiny_model, tmp_path):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    judge = JudgeSpec(device="cpu", rules="strict", reward="paper")
    rows = single_turn_rows([task, task], judge)
    for r in rows:
        r["extra_info"]["timing"] = False  # correctness only, as the chain's rows
    data = write_parquet(rows, tmp_path / "single_turn.parquet")
    args = overrides(LaunchSpec(stage=1, model=str(tiny_model), data=[str(data)], gpus=1, rollout="hf"))
    args += ["data.max_prompt_length=8192", "data.max_response_length=2048",
             "actor_rollout_ref.rollout.agent.num_workers=1", "reward.num_workers=1"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose("stage1_single_turn", overrides=args)
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tiny_model)  # as verl loads it (another class than the fixture's)
    right, wrong = answer("6.0f"), answer("5.0f")
    server = AnswerServer(loaded, [right, wrong])
    ds = RLHFDataset(str(data), loaded, cfg.data)
    batch = DataProto.from_single_dict(collate_fn([ds[0], ds[1]]))

    async def main():
        out = await AgentLoopWorker(cfg, llm_client=server).generate_sequences(batch)
        rewards = RewardLoopWorker(cfg)
        return out, [await rewards.compute_score(out[i:i + 1]) for i in range(2)]

    out, scores = asyncio.run(main())
    # the prompt is the chat template's rendering with the tokenizer of the model directory
    assert server.prompts[0] == _ids(loaded.apply_chat_template(rows[0]["prompt"], tokenize=True,
                                                                add_generation_prompt=True))
    # the rows' requests reach the server in either order: each row is judged on its own response
    texts = loaded.batch_decode(out.batch["responses"], skip_special_tokens=True)
    assert sorted(texts) == sorted([right, wrong])
    for text, s in zip(texts, scores):
        got = s["reward_extra_info"]
        if text == right:
            assert s["reward_score"] == 1.0 and got["correct"] and got["n_files"] == 3, got
        else:
            assert s["reward_score"] == -1.0 and got["compiled"] and not got["correct"], got
