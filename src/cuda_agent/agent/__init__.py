"""The agent: a ReAct loop over ten tools (``tools``), LLM back-ends (``llm``), trajectories
as SFT-ready JSONL (``trajectory``), a viewer (``show``) and ``cuda-agent solve`` (``cli``).
"""

from __future__ import annotations

from ..sandbox.evaluator import Evaluator, SandboxEvaluator
from .loop import EVAL_MAX_TURNS, TRAIN_MAX_TURNS, Agent, AgentConfig, Budget, EpisodeResult
from .tools import ToolSet
from .trajectory import Trajectory, read_jsonl

__all__ = ["Agent", "AgentConfig", "Budget", "EpisodeResult", "Evaluator", "SandboxEvaluator",
           "ToolSet", "Trajectory", "read_jsonl", "TRAIN_MAX_TURNS", "EVAL_MAX_TURNS"]
