"""Stage 2: trajectories of real agent episodes (scripted policy, real CPU evaluator) ->
rejection-sampled SFT parquet -> verl's multi-turn SFT dataset (our RFTDataset subclass)
tokenizes it with the tiny tokenizer: only the assistant turns carry loss; verl's collator
and SFT loss train a tiny random model on it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'cuda-agent[train]')")

from omegaconf import OmegaConf  # noqa: E402

from cuda_agent.agent import Agent, AgentConfig, SandboxEvaluator  # noqa: E402
from cuda_agent.agent.llm import make_backend  # noqa: E402
from cuda_agent.sandbox.workspace import create_workspace  # noqa: E402
from cuda_agent.train.rft import build_rft  # noqa: E402

from .conftest import KERNEL, MODEL_NEW, binding, call  # noqa: E402

GOOD = [
    {"content": "Reading the reference.", **call("Read", file_path="model.py")},
    call("Write", file_path="kernels/relu6.cpp", content=KERNEL),
    call("Write", file_path="kernels/relu6_binding.cpp", content=binding()),
    call("Read", file_path="model_new.py"),
    call("Write", file_path="model_new.py", content=MODEL_NEW),
    call("Bash", command="cuda-agent verify"),
    "Done.",
]
LAZY = [call("Bash", command="cuda-agent verify"), "The starter is fine."]  # torch ops: rejected, -1


@pytest.fixture(scope="module")
def trajectories(task, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for name, steps, final_check in (("good", GOOD, True), ("lazy", LAZY, True), ("unjudged", ["hi"], False)):
        ws = create_workspace(task, root / name / "ws", device="cpu")
        agent = Agent(make_backend("scripted", steps=steps), SandboxEvaluator(device="cpu", timing=False),
                      AgentConfig(device="cpu", final_check=final_check))
        agent.run(task, ws, root / name / "out")
    with (root / "lazy" / "out" / "trajectory.jsonl").open("a") as f:
        f.write('{"not": "a trajectory"}\n')
    return root


def test_keeps_positive_reward_and_says_why_it_dropped_the_rest(trajectories, tmp_path):
    rows, rep = build_rft([trajectories], tmp_path / "rft.parquet")
    assert rep.read == 4 and rep.kept == 1 and len(rows) == 1
    assert rep.dropped == {"reward <= 0": 1, "no reward": 1, "unreadable line": 1}
    assert "kept 1" in rep.summary() and "1 no reward" in rep.summary()
    row = rows[0]
    assert row["reward"] == 1.0 and row["task_id"] == "test/relu6"
    roles = [m["role"] for m in row["messages"]]
    assert roles[:3] == ["system", "user", "assistant"] and roles[-1] == "assistant" and "tool" in roles
    assert {t["function"]["name"] for t in json.loads(row["tools"])} >= {"Bash", "Read", "Write"}
    # nothing kept -> nothing written, and the report says so
    _, rep2 = build_rft([trajectories], tmp_path / "none.parquet", min_reward=1.0)
    assert rep2.kept == 0 and rep2.out is None and not (tmp_path / "none.parquet").exists()
    with pytest.raises(ValueError):
        build_rft([trajectories], reward_field="score")


def test_verl_sft_dataset_loads_rows_and_masks_only_assistant_tokens(trajectories, tokenizer, tmp_path):
    from cuda_agent.train.sft_dataset import RFTDataset

    rows, rep = build_rft([trajectories], tmp_path / "rft.parquet")
    cfg = OmegaConf.create({"max_length": 16384, "truncation": "error", "pad_mode": "no_padding",
                            "messages_key": "messages", "tools_key": "tools"})
    ds = RFTDataset(rep.out, tokenizer, cfg)
    assert len(ds) == 1
    item = ds[0]
    ids, mask = item["input_ids"].tolist(), item["loss_mask"].tolist()
    assert len(ids) == len(mask) and 0 < sum(mask) < len(mask)
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    ignored = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    msgs = rows[0]["messages"]
    # every assistant turn (text and tool calls) is trained on ...
    assert "Reading the reference." in trained and '"name": "Write"' in trained and "relu6_cpu" in trained
    assert trained.count("<|im_end|>") == sum(m["role"] == "assistant" for m in msgs)
    # ... and nothing else: system prompt with the tools, task, tool results
    assert "# Tools" in ignored and "def get_init_inputs" in ignored and "<tool_response>" in ignored
    assert "<tool_response>" not in trained and "# Tools" not in trained
    # tools reach the chat template as real schemas, not a JSON string or null-filled structs
    assert '"file_path": null' not in ignored and '"name": "Bash"' in ignored


def test_sft_steps_through_verls_collator_and_loss_on_a_tiny_model(trajectories, tokenizer, tiny_model, tmp_path):
    """verl's SFT trainer needs a GPU (docs/train.md); its data path and loss do not: the RFT
    row through RFTDataset, verl's no-padding collator and verl's sft_loss, with the log-probs
    of a tiny random Qwen2. The loss is the mean NLL of the assistant tokens and goes down."""
    import torch
    from transformers import AutoModelForCausalLM
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.dataset_utils import DatasetPadMode, SFTTensorCollator
    from verl.workers.utils.losses import sft_loss

    from cuda_agent.train.sft_dataset import RFTDataset

    _, rep = build_rft([trajectories], tmp_path / "rft.parquet")
    ds = RFTDataset(rep.out, tokenizer, OmegaConf.create({"max_length": 16384, "pad_mode": "no_padding"}))
    batch = SFTTensorCollator(DatasetPadMode.NO_PADDING)([ds[0]])
    ids, loss_mask = batch["input_ids"].unbind()[0], batch["loss_mask"].unbind()[0]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="sdpa")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        logits = model(input_ids=ids.unsqueeze(0)).logits[0].float()
        lp = torch.log_softmax(logits[:-1], -1).gather(-1, ids[1:].unsqueeze(-1)).squeeze(-1)
        lp = torch.cat([lp, lp.new_zeros(1)])  # verl's layout: position t holds log p(token t+1)
        data = tu.get_tensordict({"loss_mask": batch["loss_mask"]},
                                 {"dp_size": 1, "batch_num_tokens": int(loss_mask.sum())})
        loss, _ = sft_loss(None, {"log_probs": torch.nested.as_nested_tensor([lp], layout=torch.jagged)}, data)
        if not losses:  # exactly the mean NLL of the assistant tokens
            want = -lp[:-1][loss_mask[1:].bool()].sum() / loss_mask.sum()
            assert torch.isclose(loss, want)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0], losses
