"""The rollout half of training on the CPU, as verl runs it with ``rollout.name=hf``: a local
Ray cluster, verl's LLMServerManager launching our HFReplica (found through the registry that
``VERL_USE_EXTERNAL_MODULES`` fills in every Ray process), verl's AgentLoopManager with its
Ray agent-loop worker running our CudaAgentLoop on the tiny Qwen2, the evaluator judging each
episode's workspace on the CPU; then the trainer's weight path (our HFServerAdapter, as a
trainer worker holds it) pushes changed weights, and the same prompts give other tokens whose
log-probs match the new weights."""

from __future__ import annotations

import asyncio
import importlib
import os

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'cuda-agent[train]')")
ray = pytest.importorskip("ray")

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from cuda_agent.train import CONFIG_DIR  # noqa: E402
from cuda_agent.train.data import JudgeSpec, agentic_rows, write_parquet  # noqa: E402
from cuda_agent.train.stages import LaunchSpec, overrides, rollout_env  # noqa: E402

RESPONSE = 24


def _logprobs(model, out):
    """Each response token's log-prob under ``model``, from one unpadded forward per row."""
    b, rows = out.batch, []
    prompt_w = b["prompts"].shape[1]
    for i in range(len(b)):
        keep = b["attention_mask"][i].bool()
        ids = b["input_ids"][i][keep].unsqueeze(0)
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        lp = lp.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
        n_prompt, n_resp = int(b["attention_mask"][i, :prompt_w].sum()), int(b["attention_mask"][i, prompt_w:].sum())
        rows.append(lp[n_prompt - 1:n_prompt - 1 + n_resp])
    return rows


@pytest.mark.slow  # ~40 s on 2 cores: a Ray cluster, a server actor, an agent-loop worker
def test_hf_rollout_agent_loop_manager_episodes_and_weight_update(task, tiny_model, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.workers.rollout.llm_server import LLMServerManager

    data = write_parquet(agentic_rows([task], JudgeSpec(device="cpu")), tmp_path / "agentic.parquet")
    spec = LaunchSpec(stage=4, model=str(tiny_model), data=[str(data)], gpus=1, rollout="hf",
                      resume_from=str(tmp_path / "global_step_1"))
    args = overrides(spec) + [
        "data.max_prompt_length=8192", f"data.max_response_length={RESPONSE}",
        "actor_rollout_ref.rollout.agent.num_workers=1", "actor_rollout_ref.rollout.temperature=0",
        "actor_rollout_ref.rollout.n_gpus_per_node=1", "actor_rollout_ref.rollout.nnodes=1"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose("stage4_agentic", overrides=args)
    assert cfg.actor_rollout_ref.rollout.name == "hf"
    env = rollout_env(spec)  # what `cuda-agent train stage 4 --rollout hf` exports to verl's processes
    assert env == {"VERL_USE_EXTERNAL_MODULES": "cuda_agent.train.hf_rollout"}
    # this process imported verl before: do what verl's import does with the variable
    importlib.import_module(env["VERL_USE_EXTERNAL_MODULES"])
    rows = RLHFDataset(str(data), tokenizer, cfg.data)

    def batch():  # the same prompt twice
        return DataProto.from_single_dict(collate_fn([rows[0], rows[0]]))

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                                       **env}})
    try:
        servers = LLMServerManager.create(config=cfg)  # standalone: our replica's server on the CPU
        (replica,) = servers.get_replicas()
        assert type(replica).__name__ == "HFReplica"
        loops = AgentLoopManager.create(config=cfg, llm_client=servers.get_client())
        first = loops.generate_sequences(batch())

        # the trainer's weight path: the adapter a trainer worker builds, fed changed weights
        from verl.workers.rollout.base import get_rollout_class

        adapter = get_rollout_class("hf", "async")(config=cfg.actor_rollout_ref.rollout,
                                                   model_config=cfg.actor_rollout_ref.model, device_mesh=None)
        changed = AutoModelForCausalLM.from_pretrained(tiny_model)
        torch.manual_seed(1)
        with torch.no_grad():
            for p in changed.parameters():
                p.add_(torch.randn_like(p) * 0.5)
        # the calls verl's trainer worker makes around an update (engine_workers.update_weights)
        asyncio.run(adapter.release())  # the trainer runs: the model waits in host memory
        asyncio.run(adapter.resume(tags=["weights"]))
        asyncio.run(adapter.update_weights(iter(changed.state_dict().items()), peft_config=None,
                                           base_sync_done=True, global_steps=1))
        asyncio.run(adapter.resume(tags=["kv_cache"]))
        stats = ray.get(replica.server_handle.stats.remote())
        second = loops.generate_sequences(batch())
    finally:
        ray.shutdown()

    original = AutoModelForCausalLM.from_pretrained(tiny_model)
    for out, model in ((first, original), (second, changed)):
        b = out.batch
        assert b["responses"].shape == (2, RESPONSE)
        mask = b["response_mask"]
        assert mask.sum() > 0
        # every episode was judged by the evaluator: the untouched starter uses torch ops -> rejected
        assert list(out.non_tensor_batch["correct"]) == [False, False]
        assert b["rm_scores"].sum(-1).tolist() == [-1.0, -1.0]
        # the server's log-probs are the model's own, token by token
        for i, ref in enumerate(_logprobs(model, out)):
            got = b["rollout_log_probs"][i, :len(ref)]
            assert torch.allclose(got, ref, atol=2e-3), (got - ref).abs().max()
    assert stats["requests"] >= 2 and stats["tokens"] >= 2  # both episodes went through our server
    # greedy on both sides: the same prompt gives the same tokens for one set of weights ...
    assert torch.equal(first.batch["responses"][0], first.batch["responses"][1])
    # ... and other tokens after the trainer's push
    assert not torch.equal(first.batch["responses"][0], second.batch["responses"][0])


def test_hf_server_batches_requests_and_returns_the_sampling_log_probs(tiny_model):
    """The server without Ray: concurrent requests of different lengths share one ``generate``
    call; sampled at temperature 0.7, each token's log-prob is the model's at that temperature
    (verl's processed_logprobs, what the trainer recomputes), or the model's own (raw_logprobs)."""
    from transformers import AutoModelForCausalLM

    from cuda_agent.train.hf_rollout import HFServer
    from verl.workers.config import HFModelConfig, RolloutConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    prompts = [[1, 5, 7, 9, 11], [3, 4], [8, 8, 8]]
    for mode, scale in (("processed_logprobs", 0.7), ("raw_logprobs", 1.0)):
        server = HFServer(RolloutConfig(name="hf", prompt_length=64, response_length=16, logprobs_mode=mode),
                          HFModelConfig(path=str(tiny_model)), device="cpu")

        async def main():
            params = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "logprobs": True, "max_tokens": 12}
            outs = await asyncio.gather(*[server.generate(f"r{i}", prompt_ids=p, sampling_params=params)
                                          for i, p in enumerate(prompts)])
            return outs, await server.stats()

        torch.manual_seed(0)
        outs, stats = asyncio.run(main())
        assert stats["requests"] == 3 and stats["batches"] == 1
        for p, o in zip(prompts, outs):
            assert 1 <= len(o.token_ids) <= 12 and len(o.log_probs) == len(o.token_ids)
            ids = torch.tensor([p + o.token_ids])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(p) - 1:-1].float()
            ref = torch.log_softmax(logits / scale, -1).gather(-1, torch.tensor(o.token_ids)[:, None]).squeeze(-1)
            assert torch.allclose(torch.tensor(o.log_probs), ref, atol=2e-3), (mode, o.log_probs, ref)


def test_the_critic_loads_without_flash_attn(tmp_path):
    """verl loads the critic with flash-attention hard-coded; without flash-attn (CPU here, the
    H200 image) our module makes it load with sdpa, a value head of one output per token."""
    import importlib.util

    import torch
    import verl.utils.model as vm
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config

    import cuda_agent.train.hf_rollout  # noqa: F401 - the patch is applied on import

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed: verl's own loader is kept")
    cfg = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    conf = AutoConfig.from_pretrained(tmp_path)
    conf.num_labels = 1
    critic = vm.load_valuehead_model(str(tmp_path), torch.float32, conf, False)
    values = critic(torch.tensor([[1, 2, 3]])).logits
    assert values.shape == (1, 3, 1)
