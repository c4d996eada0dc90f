"""The stage-4 rollout as verl runs it: verl's own AgentLoopWorker, built from our composed
stage-4 config (agent-loop registration, tiny model directory for the tokenizer), takes a
DataProto batch of our agentic parquet rows, runs one CudaAgentLoop episode per row against
the scripted token server, pads and batches them; the reward lands on the last model token,
verl's GAE (gamma 1, lambda 0.95) carries it back over every model token, and verl's clipped
policy loss on the tiny model's log-probs gives gradient to model tokens only."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'cuda-agent[train]')")

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from cuda_agent.tasks import Task  # noqa: E402
from cuda_agent.train import CONFIG_DIR  # noqa: E402
from cuda_agent.train.data import JudgeSpec, agentic_rows, write_parquet  # noqa: E402
from cuda_agent.train.stages import LaunchSpec, overrides  # noqa: E402

from .conftest import TASK_SRC, ScriptedServer, call  # noqa: E402


def test_agent_loop_worker_batch_rewards_gae_and_policy_loss(task, tokenizer, tiny_model, tmp_path):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    other = Task(id="test/relu6_long", source=TASK_SRC.replace('"""Clamp to [0, 6] (ReLU6)."""',
                                                              '"""Clamp to [0, 6].\n\n    ReLU6 of x."""'))
    data = write_parquet(agentic_rows([task, other], JudgeSpec(device="cpu")), tmp_path / "agentic.parquet")
    args = overrides(LaunchSpec(stage=4, model=str(tiny_model), data=[str(data)], gpus=1,
                                resume_from=str(tmp_path / "global_step_1")))
    args += ["data.max_prompt_length=8192", "data.max_response_length=4096", "actor_rollout_ref.rollout.agent.num_workers=1"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose("stage4_agentic", overrides=args)
    # the tokenizer the worker loads from the model directory is the fixture's, saved there
    server = ScriptedServer(tokenizer, [call("Read", file_path="model.py"), call("Glob", pattern="*"),
                                        "The starter stays."])
    rows = RLHFDataset(str(data), tokenizer, cfg.data)
    batch = DataProto.from_single_dict(collate_fn([rows[0], rows[1]]))

    async def main():
        worker = AgentLoopWorker(cfg, llm_client=server)
        assert worker.tokenizer.get_vocab() == tokenizer.get_vocab()
        return await worker.generate_sequences(batch)

    out = asyncio.run(main())
    b = out.batch
    n, width = b["responses"].shape
    assert n == 2 and width == 4096 and b["prompts"].shape[1] == 8192
    mask, attn, scores = b["response_mask"], b["attention_mask"][:, 8192:], b["rm_scores"]
    for i in range(2):
        last = int(attn[i].sum()) - 1  # verl's "last valid token"
        assert mask[i, last] == 1  # ... is a model token
        assert scores[i, last] == -1.0 and scores[i].count_nonzero() == 1  # the starter: torch ops, rejected
        assert (mask[i, last + 1:] == 0).all() and (mask[i, :last + 1] == 0).any()  # observations inside
        assert int(mask[i].sum()) == sum(len(r["generated"]) for r in server.requests
                                         if r["request_id"] == out.non_tensor_batch["trajectory_id"][i])
    assert list(out.non_tensor_batch["correct"]) == [False, False]
    assert list(out.non_tensor_batch["n_files"]) == [1, 1]  # the starter's model_new.py, judged before cleanup
    assert list(out.non_tensor_batch["stop_reason"]) == ["finished", "finished"]
    # GAE with a zero critic: the return of every model token is lambda^k * reward, none lost
    _, returns = compute_gae_advantage_return(scores, torch.zeros_like(scores), mask.float(), 1.0, 0.95)
    model_returns = returns[mask.bool()]
    assert (model_returns < 0).all() and torch.isclose(model_returns.min(), torch.tensor(-1.0))
    ppo_step(cfg, out, tiny_model)


def ppo_step(cfg, out, tiny_model):
    """One actor loss through verl's own functions: the trainer's compute_advantage (GAE with
    the config's gamma/lambda, values from a zero critic), the tiny model's log-probs of the
    batch's responses, verl's clipped policy loss with our clip ratios; observation tokens get
    no gradient, model tokens do."""
    from transformers import AutoModelForCausalLM
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.utils.config import omega_conf_to_dataclass

    b = out.batch
    b["token_level_rewards"] = b["rm_scores"]
    b["values"] = torch.zeros_like(b["rm_scores"])
    compute_advantage(out, cfg.algorithm.adv_estimator, gamma=cfg.algorithm.gamma, lam=cfg.algorithm.lam,
                      config=omega_conf_to_dataclass(cfg.algorithm))
    model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="sdpa")
    prompt_w = b["prompts"].shape[1]
    rows = []
    for i in range(len(b)):  # unpadded forward of each sequence
        keep = b["attention_mask"][i].bool()
        ids = b["input_ids"][i][keep].unsqueeze(0)
        logits = model(input_ids=ids).logits[0, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
        n_prompt = int(b["attention_mask"][i, :prompt_w].sum())
        n_resp = int(b["attention_mask"][i, prompt_w:].sum())
        rows.append(lp[n_prompt - 1:n_prompt - 1 + n_resp])
    log_probs = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
    log_probs = torch.nn.functional.pad(log_probs, (0, b["responses"].shape[1] - log_probs.shape[1]))
    log_probs.retain_grad()
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    mask = b["response_mask"].float()
    loss, metrics = compute_policy_loss_vanilla(old_log_prob=log_probs.detach(), log_prob=log_probs,
                                                advantages=b["advantages"], response_mask=mask,
                                                loss_agg_mode="token-mean", config=actor)
    loss.backward()
    assert torch.isfinite(loss) and metrics["actor/pg_clipfrac"] == 0.0  # ratio 1 on the first update
    g = log_probs.grad
    assert (g[mask == 0] == 0).all() and (g[mask == 1] != 0).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
