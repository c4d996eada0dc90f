"""Training-data synthesis (the paper's CUDA-Agent-Ops pipeline): seed operators crawled from
torch/transformers, composed into fused tasks, filtered (executable eager + torch.compile,
deterministic, non-trivial, runtime band), decontaminated against KernelBench by AST
similarity, written as a parquet/JSONL dataset with a stats report.

Entry points: :func:`synthesize` on a :class:`SynthConfig` (or :func:`run_synth` with its fields as
keywords) and the click command ``synth_command`` (``cli.py``), which builds the config.
"""

from __future__ import annotations

from .compose import PAPER_MIX, get_composer, register_composer
from .pipeline import SynthConfig, SynthError, SynthResult, run_synth, synthesize

__all__ = ["run_synth", "synthesize", "SynthConfig", "SynthResult", "SynthError", "register_composer", "get_composer", "PAPER_MIX"]
