"""Sizes of a training chain (``cuda-agent train chain --preset``): a module of its own, with no
import beyond the standard library, because the CLI reads the names at every start."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    """Sizes of one chain."""

    name: str
    hidden: int
    layers: int
    heads: int
    vocab: int
    n_tasks: int
    warm_steps: int
    warm_lr: float
    ppo_steps: int
    batch: int
    """Stage-1 prompts per step."""
    agentic_batch: int
    """Stage-3/4 episodes per step."""
    single_response: int
    agentic_response: int
    max_turns: int
    actor_lr: float
    critic_lr: float
    path_variants: int = 1
    """Scripted episodes per solution, each in a workspace of another path: the agent loop's prompt
    names a new random path every episode, which a tiny model fitted on one path does not expect
    (measured: every stage-3/4 episode of such a model garbled its first tool call)."""


PRESETS = {
    # 4.6M parameters (vocab ~2550 after BPE training); prompts ~5.5K (single turn) / ~7.1K (agentic) tokens,
    # a scripted answer ~550, a scripted episode ~1.3K response tokens with its tool outputs.  A PPO step is
    # dominated by Ray/FSDP overheads and the CUDA checks
    "tiny": Preset("tiny", hidden=256, layers=4, heads=4, vocab=3000, n_tasks=4, warm_steps=3000, warm_lr=1e-3,
                   ppo_steps=3, batch=8, agentic_batch=4, single_response=640, agentic_response=2048, max_turns=8,
                   actor_lr=1e-5, critic_lr=1e-4, path_variants=3),
    # the tiny chain's tasks and data on a 0.6B model (hidden 1280, 24 layers: ~590M parameters, the
    # size of the smallest models people fine-tune for this), to measure what a step costs at that
    # size on one GPU; its short warm start need not make the rewards vary
    "small": Preset("small", hidden=1280, layers=24, heads=16, vocab=3000, n_tasks=4, warm_steps=300, warm_lr=3e-4,
                    ppo_steps=3, batch=8, agentic_batch=4, single_response=640, agentic_response=2048, max_turns=8,
                    actor_lr=1e-6, critic_lr=1e-5, path_variants=3),
    # a CPU smoke run of the pieces that run without verl's trainers (tests)
    "cpu-smoke": Preset("cpu-smoke", hidden=32, layers=1, heads=2, vocab=800, n_tasks=1, warm_steps=3,
                        warm_lr=1e-3, ppo_steps=1, batch=2, agentic_batch=2, single_response=256, agentic_response=1024,
                        max_turns=4, actor_lr=1e-5, critic_lr=1e-4, path_variants=2),
}
