"""Stage 2 for real on one GPU: the exact `cuda-agent train stage 2` command (verl's SFT
trainer under torchrun, our stage2_rft config and RFTDataset) fine-tunes a tiny random
Qwen2 for two steps on RFT rows and writes a checkpoint with Hugging Face weights.

verl 0.9.1 cannot run this on a CPU: it registers only CUDA/NPU/ROCm platforms, falls back
to CUDA and initialises ``cpu:gloo,cuda:nccl`` process groups (docs/train.md)."""

from __future__ import annotations

import json
import subprocess

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'cuda-agent[train]')")

from cuda_agent.agent.tools import ToolSet  # noqa: E402
from cuda_agent.agent.trajectory import Trajectory, append_jsonl  # noqa: E402
from cuda_agent.train.rft import build_rft  # noqa: E402
from cuda_agent.train.stages import LaunchSpec, command  # noqa: E402

from .conftest import KERNEL  # noqa: E402


@pytest.mark.gpu
def test_sft_stage_two_steps_on_a_tiny_model(tiny_model, tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    tools = ToolSet(tmp_path).schemas()
    for i in range(4):
        append_jsonl(tmp_path / "runs" / "trajectory.jsonl", Trajectory(
            id=f"t{i}", task_id="test/relu6", task_sha="s", model="m", backend="b", reward=1.0, tools=tools,
            messages=[{"role": "system", "content": "Write kernels."}, {"role": "user", "content": "ReLU6"},
                      {"role": "assistant", "content": "Writing it.", "tool_calls": [
                          {"id": "c1", "type": "function", "function": {
                              "name": "Write", "arguments": json.dumps({"file_path": "kernels/r.cpp", "content": KERNEL})}}]},
                      {"role": "tool", "tool_call_id": "c1", "name": "Write", "content": "Wrote kernels/r.cpp"},
                      {"role": "assistant", "content": "Done."}]))
    _, rep = build_rft([tmp_path / "runs"], tmp_path / "rft.parquet")
    argv = command(LaunchSpec(stage=2, model=str(tiny_model), data=[rep.out], gpus=1, out_dir=str(tmp_path / "ckpt"),
                              overrides=["data.train_batch_size=2", "data.micro_batch_size_per_gpu=1",
                                         "data.max_length=4096", "data.num_workers=0",
                                         "trainer.total_training_steps=2", "trainer.save_freq=2",
                                         "+model.override_config.attn_implementation=sdpa"]))
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    step = tmp_path / "ckpt" / "global_step_2"
    assert step.is_dir(), sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert list(step.rglob("huggingface/config.json")), sorted(str(p) for p in step.rglob("*"))[:40]
