"""Training-data synthesis (the paper's CUDA-Agent-Ops pipeline): seed operators crawled from
torch/transformers, composed into fused tasks, filtered (executable eager + torch.compile,
deterministic, non-trivial, runtime band), decontaminated against KernelBench by AST
similarity, written as a parquet/JSONL dataset with a stats report.

Entry points: :func:`run_synth` and the click command ``synth_command`` (``cli.py``).
"""

from __future__ import annotations

from .compose import PAPER_MIX, get_composer, register_composer
from .pipeline import SynthError, SynthResult, run_synth

__all__ = ["run_synth", "SynthResult", "SynthError", "register_composer", "get_composer", "PAPER_MIX"]
