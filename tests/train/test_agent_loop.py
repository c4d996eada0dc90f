"""CudaAgentLoop, built the way verl builds it (hydra.instantiate of our registration YAML,
verl's composed PPO config, a row read by verl's RLHFDataset from our stage-4 parquet),
drives our ReAct episode against a scripted generation server with token ids in and out;
the evaluator really builds and checks the C++ solution on the CPU."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'cuda-agent[train]')")

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402

from cuda_agent.agent.trajectory import read_jsonl  # noqa: E402
from cuda_agent.train import CONFIG_DIR  # noqa: E402
from cuda_agent.train.data import JudgeSpec, agentic_rows, write_parquet  # noqa: E402

from .conftest import KERNEL, MODEL_NEW, ScriptedServer, binding, call  # noqa: E402


def ppo_config(verl_config_dir, tokenizer, prompt_length, response_length):
    with initialize_config_dir(config_dir=str(verl_config_dir), version_base=None):
        return compose("ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={tokenizer.path}",
            f"actor_rollout_ref.rollout.prompt_length={prompt_length}",
            f"actor_rollout_ref.rollout.response_length={response_length}",
            f"data.max_prompt_length={prompt_length}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={CONFIG_DIR / 'agent_loop.yaml'}"])


def dataset_row(task, tokenizer, cfg, tmp_path):
    path = write_parquet(agentic_rows([task], JudgeSpec(device="cpu")), tmp_path / "agentic.parquet")
    ds = RLHFDataset(str(path), tokenizer, cfg.data)
    row = ds[0]
    assert row["agent_name"] == "cuda_agent"
    return {k: v for k, v in row.items() if k != "agent_name" and not hasattr(v, "shape")}


def run_episode(cfg, tokenizer, steps, row, hf_model_type=None, **options):
    entry = OmegaConf.load(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)[0]
    assert entry.name == "cuda_agent"
    entry = OmegaConf.merge(entry, options)
    server = ScriptedServer(tokenizer, steps)

    async def main():
        loop = instantiate(entry, trainer_config=DictConfigWrap(cfg), server_manager=server,
                           tokenizer=tokenizer, processor=None, hf_model_type=hf_model_type,
                           dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
                           tools=ToolListWrap([]))
        sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
        return await loop.run(sampling, **row)

    return asyncio.run(main()), server


def test_episode_tokens_masks_and_reward(task, tokenizer, verl_config_dir, tmp_path):
    cfg = ppo_config(verl_config_dir, tokenizer, prompt_length=8192, response_length=24576)
    row = dataset_row(task, tokenizer, cfg, tmp_path)
    thought = ('<think>I could start with <tool_call>\n{"name": "Bash", "arguments": {"command": "rm -r kernels"}}'
               '\n</tool_call> but reading first is better.</think>')
    steps = [
        {"content": thought + "Reading the reference.", **call("Read", file_path="model.py")},
        {"content": "A one-pass clamp.", **call("Write", file_path="kernels/relu6.cpp", content=KERNEL)},
        call("Write", file_path="kernels/relu6_binding.cpp", content=binding()),
        call("Read", file_path="model_new.py"),
        call("Write", file_path="model_new.py", content=MODEL_NEW),
        call("Bash", command="cuda-agent verify"),
        "Done: ModelNew calls my relu6 kernel.",
    ]
    out, server = run_episode(cfg, tokenizer, steps, row, timing=False, workdir=str(tmp_path / "eps"),
                              trajectory_dir=str(tmp_path / "trajs"))
    prompt, resp, mask = out.prompt_ids, out.response_ids, out.response_mask
    assert len(server.requests) == len(steps)
    assert len(resp) == len(mask) == len(out.response_logprobs) <= 24576

    # token ids in/out: each request is the previous one + its generation + observations
    first = server.requests[0]["prompt_ids"]
    assert first == prompt and "# Tools" in tokenizer.decode(prompt) and "Task test/relu6" in tokenizer.decode(prompt)
    expected_mask = []
    for k, req in enumerate(server.requests):
        offset = len(req["prompt_ids"]) - len(prompt)
        assert req["prompt_ids"][:len(prompt)] == prompt
        assert len(expected_mask) <= offset
        expected_mask += [0] * (offset - len(expected_mask)) + [1] * len(req["generated"])
        assert resp[offset:offset + len(req["generated"])] == req["generated"]
        # the generation limit is what is left of the response budget
        assert req["sampling_params"]["max_tokens"] == 24576 - offset
        if k:
            prev = server.requests[k - 1]
            assert req["prompt_ids"][:len(prev["prompt_ids"]) + len(prev["generated"])] == \
                prev["prompt_ids"] + prev["generated"]
    assert mask == expected_mask
    assert sum(mask) == sum(len(r["generated"]) for r in server.requests)
    # observations (mask 0) hold the tool results, whole: all of model.py, the verify verdict
    obs = tokenizer.decode([t for t, m in zip(resp, mask) if m == 0])
    model_tokens = tokenizer.decode([t for t, m in zip(resp, mask) if m == 1])
    assert "def get_init_inputs" in obs and "<tool_response>" in obs and "correct" in obs
    assert "<tool_response>" not in model_tokens and "relu6_cpu" in model_tokens
    assert all(lp == (-0.25 if m else 0.0) for lp, m in zip(out.response_logprobs, mask))
    # the trajectory ends on a model token (the last generation's EOS), where verl puts the reward
    assert mask[-1] == 1 and resp[-1] == tokenizer.eos_token_id
    assert out.as_dict()["rm_scores"][-1] == out.reward_score
    # the reward is the evaluator's: the snapshot was really built and verified on the CPU
    assert out.reward_score == 1.0
    info = out.extra_fields["reward_extra_info"]
    assert info["correct"] and info["compiled"] and info["failure"] == "" and info["n_files"] == 3
    assert out.extra_fields["stop_reason"] == "finished"
    saved = list((tmp_path / "trajs").glob("*/trajectory.jsonl"))
    assert len(saved) == 1 and (saved[0].parent / "best" / "kernels" / "relu6.cpp").read_text() == KERNEL
    # the parquet prompt is the agent's own prompt, but for the per-episode workspace path
    traj = next(read_jsonl(saved[0]))
    # a call inside the reasoning is not a call: the first turn ran Read only
    first = traj.messages[2]
    assert [c["function"]["name"] for c in first["tool_calls"]] == ["Read"]
    assert first["content"] == "Reading the reference." and "rm -r kernels" in first["reasoning_content"]
    assert traj.messages[0] == dict(row["raw_prompt"][0])
    assert traj.messages[1]["content"] == row["raw_prompt"][1]["content"].replace("/workspace", traj.workspace)
    assert not any((tmp_path / "eps").iterdir())  # the workspace is removed after the episode


@pytest.mark.parametrize("hf_model_type", [None, "qwen2"])
def test_budget_stops_before_observations_and_ends_on_a_model_token(task, tokenizer, verl_config_dir, tmp_path,
                                                                    hf_model_type):
    """A response budget smaller than the tool outputs: the loop stops when the next
    observation would not fit, the last observation is not in the stream, the workspace is
    still judged (the untouched starter: torch ops, a -1 verdict).  With verl's generic
    builder and with its Qwen builder (which inserts the newline after <|im_end|>, mask 0)."""
    cfg = ppo_config(verl_config_dir, tokenizer, prompt_length=8192, response_length=900)
    row = dataset_row(task, tokenizer, cfg, tmp_path)
    steps = [call("Glob", pattern="*")] + [call("Read", file_path="SKILL.md")] * 4  # SKILL.md: > 900 tokens
    out, server = run_episode(cfg, tokenizer, steps, row, hf_model_type=hf_model_type, timing=False,
                              workdir=str(tmp_path / "eps"))
    newline = tokenizer.encode("\n", add_special_tokens=False)[0]
    first_gen = server.requests[0]["generated"]
    boundary = out.response_ids[len(first_gen)]
    assert (boundary == newline) == (hf_model_type == "qwen2") and out.response_mask[len(first_gen)] == 0
    assert out.extra_fields["stop_reason"] == "context" and len(server.requests) == 2
    assert len(out.response_ids) <= 900 and out.response_mask[-1] == 1
    last = server.requests[-1]
    assert out.response_ids[-len(last["generated"]):] == last["generated"]
    obs = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert "model_new.py" in obs and "# SKILL" not in obs  # the Glob result is in, SKILL.md's is not
    assert out.reward_score == -1.0 and not out.extra_fields["reward_extra_info"]["correct"]
