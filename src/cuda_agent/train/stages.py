"""The four stages and the exact verl command that launches each one.

A stage is a YAML file in ``configs/`` (composed over verl's own ``ppo_trainer`` or
``sft_trainer_engine``) plus the command-line values it leaves open (``???``): the model,
the data, the GPUs, and for stages 3-4 the agent-loop registration and the checkpoint
hand-over (stage 3 saves at step N; stage 4 resumes from ``.../global_step_N`` and runs
``steps`` more).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import CONFIG_DIR


@dataclass(frozen=True)
class Stage:
    number: int
    config: str
    """Config name in configs/ (without .yaml)."""
    trainer: str
    """``ppo`` (verl.trainer.main_ppo) or ``sft`` (verl.trainer.sft_trainer under torchrun)."""
    what: str


STAGES = {
    1: Stage(1, "stage1_single_turn", "ppo", "single-turn PPO warm-up (32K context)"),
    2: Stage(2, "stage2_rft", "sft", "rejection fine-tuning on trajectories with reward > 0"),
    3: Stage(3, "stage3_value_pretrain", "ppo", "value pretraining: critic only, actor frozen"),
    4: Stage(4, "stage4_agentic", "ppo", "agentic PPO (128K context), resumed from stage 3"),
}
STEP_DIR = re.compile(r"global_step_(\d+)/?$")
ROLLOUTS = ("vllm", "sglang", "hf")
"""Rollout backends of the PPO stages: vLLM/SGLang (verl's own, the cluster path) or ``hf``
(ours, transformers ``generate``: one GPU, CI; :mod:`.hf_rollout`)."""
HF_ROLLOUT_MODULE = "cuda_agent.train.hf_rollout"


class StageError(ValueError):
    """A stage cannot be launched with these arguments; the message says what is missing."""


@dataclass
class LaunchSpec:
    """What the user gives for one stage."""

    stage: int
    model: str
    data: list[str]
    gpus: int = 8
    nnodes: int = 1
    out_dir: str | None = None
    """Checkpoint directory (trainer.default_local_dir)."""
    resume_from: str | None = None
    """Stage 4: the stage-3 checkpoint directory (``.../global_step_N``)."""
    warmup_steps: int | None = None
    """Stage 3: value-pretraining steps (critic only)."""
    steps: int | None = None
    """Stage 4: agentic steps after the resumed ones."""
    agent_loop: str | None = None
    """Stages 3-4: the agent-loop registration YAML (default: configs/agent_loop.yaml)."""
    rollout: str = "vllm"
    """PPO stages: the rollout backend, one of :data:`ROLLOUTS`."""
    overrides: list[str] = field(default_factory=list)
    """Further verl ``key=value`` overrides, appended last."""
    python: str = sys.executable


def _files(paths: list[str]) -> str:
    return "[" + ",".join(str(Path(p).resolve()) for p in paths) + "]" if len(paths) > 1 else str(Path(paths[0]).resolve())


def overrides(spec: LaunchSpec) -> list[str]:
    """The ``key=value`` arguments of the stage's command (without the extra overrides)."""
    st = STAGES.get(spec.stage)
    if st is None:
        raise StageError(f"no stage {spec.stage}; stages: 1-4")
    if not spec.data:
        raise StageError(f"stage {spec.stage} needs --data (a parquet file)")
    model = str(Path(spec.model).resolve()) if Path(spec.model).exists() else spec.model  # a dir, or a hub id
    out = [f"data.train_files={_files(spec.data)}"]
    if st.trainer == "sft":
        out += [f"model.path={model}", f"trainer.n_gpus_per_node={spec.gpus}", f"trainer.nnodes={spec.nnodes}"]
    else:
        if spec.rollout not in ROLLOUTS:
            raise StageError(f"no rollout backend {spec.rollout!r}; backends: {', '.join(ROLLOUTS)}")
        out += [f"actor_rollout_ref.model.path={model}", f"actor_rollout_ref.rollout.name={spec.rollout}",
                f"trainer.n_gpus_per_node={spec.gpus}", f"trainer.nnodes={spec.nnodes}"]
        if spec.rollout == "hf":  # one whole model per GPU (verl's default tensor parallelism is 2)
            out.append("actor_rollout_ref.rollout.tensor_model_parallel_size=1")
    if spec.stage in (3, 4):
        reg = Path(spec.agent_loop).resolve() if spec.agent_loop else CONFIG_DIR / "agent_loop.yaml"
        out.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={reg}")
    if spec.stage == 3 and spec.warmup_steps is not None:
        if spec.warmup_steps < 1:
            raise StageError("--warmup-steps must be at least 1")
        # the last step is the one "actor update" (at lr 0, configs/stage3_value_pretrain.yaml):
        # verl's V0 trainer saves checkpoints on actor-update steps only
        out += [f"trainer.total_training_steps={spec.warmup_steps}", f"trainer.critic_warmup={spec.warmup_steps}"]
    if spec.stage == 4:
        if not spec.resume_from:
            raise StageError("stage 4 resumes the stage-3 checkpoint: give --resume-from CKPT/global_step_N")
        m = STEP_DIR.search(spec.resume_from)
        if not m:
            raise StageError(f"--resume-from must be a checkpoint directory named global_step_N, not {spec.resume_from}")
        out.append(f"trainer.resume_from_path={Path(spec.resume_from).resolve()}")
        if spec.steps is not None:
            out.append(f"trainer.total_training_steps={int(m.group(1)) + spec.steps}")
    if spec.out_dir:
        out.append(f"trainer.default_local_dir={Path(spec.out_dir).resolve()}")
    return out + list(spec.overrides)


def command(spec: LaunchSpec) -> list[str]:
    """The full command line (argv) that launches the stage."""
    st = STAGES.get(spec.stage)
    if st is None:
        raise StageError(f"no stage {spec.stage}; stages: 1-4")
    args = overrides(spec)
    cfg = ["--config-path", str(CONFIG_DIR), "--config-name", st.config]
    if st.trainer == "sft":
        if spec.nnodes != 1:
            raise StageError("stage 2 launches torchrun on one node; for several nodes run torchrun "
                             "with your rendezvous and the printed module, config and overrides")
        return [spec.python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                "--nproc_per_node", str(spec.gpus), "-m", "verl.trainer.sft_trainer", *cfg, *args]
    return [spec.python, "-m", "verl.trainer.main_ppo", *cfg, *args]


def rollout_env(spec: LaunchSpec) -> dict[str, str]:
    """Environment the stage's processes need: with ``--rollout hf`` every Ray process (the
    trainer's workers, the agent-loop workers, the rollout servers) must import
    :mod:`.hf_rollout` to know the name ``hf``; verl imports what ``VERL_USE_EXTERNAL_MODULES``
    lists when it is imported, and Ray workers inherit the driver's environment."""
    if STAGES[spec.stage].trainer != "ppo" or spec.rollout != "hf":
        return {}
    have = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    return {"VERL_USE_EXTERNAL_MODULES": ",".join(have + [HF_ROLLOUT_MODULE] if HF_ROLLOUT_MODULE not in have else have)}
