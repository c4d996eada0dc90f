"""Trajectories: one agent episode as a JSON object, stored one per line (JSONL).

The ``messages`` (OpenAI format: system / user / assistant with ``tool_calls`` / tool) and
``tools`` (OpenAI tool schemas) fields are what SFT trainers read, so a file of kept
trajectories is directly a rejection-fine-tuning data set.  The rest records how the
episode went: per-turn timings and token counts, each tool call, the evaluator's verdicts
on the snapshots it checked, the final verdict and the reward.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator


@dataclass
class ToolRecord:
    """One tool call of a turn."""

    id: str
    name: str
    arguments: str
    seconds: float
    result_chars: int
    error: bool
    """The result starts with ``Error:``."""


@dataclass
class Turn:
    """One assistant turn and the tool calls it made."""

    index: int
    llm_seconds: float
    tool_seconds: float
    prompt_tokens: int
    completion_tokens: int
    context_tokens: int
    """Estimated tokens of the history the model saw this turn."""
    finish_reason: str
    tools: list[ToolRecord] = field(default_factory=list)
    check: dict[str, Any] | None = None
    """The evaluator's CheckResult on the snapshot taken after this turn, if any."""
    snapshot: str | None = None


@dataclass
class Trajectory:
    """A whole episode."""

    id: str
    task_id: str
    task_sha: str
    model: str
    backend: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    stop_reason: str = ""
    """``finished`` (answered without a tool call), ``max_turns``, ``context``, ``wall_time``,
    ``llm_error: ...``."""
    final: dict[str, Any] | None = None
    """CheckResult of the workspace at the end."""
    best: dict[str, Any] | None = None
    """CheckResult of the best snapshot (by correct, then speedup)."""
    best_path: str | None = None
    reward: float | None = None
    """The episode's reward: the final evaluation's."""
    best_reward: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_seconds: float = 0.0
    started_at: float = field(default_factory=time.time)
    shortened: list[int] = field(default_factory=list)
    """Indices of tool messages that were shortened in the model's context (budget)."""
    config: dict[str, Any] = field(default_factory=dict)
    workspace: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        d = dict(d)
        turns = []
        for t in d.get("turns", []):
            t = dict(t)
            t["tools"] = [ToolRecord(**r) for r in t.get("tools", [])]
            turns.append(Turn(**t))
        d["turns"] = turns
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})

    def sft_record(self) -> dict[str, Any]:
        """Just the columns an SFT trainer needs."""
        return {"messages": self.messages, "tools": self.tools, "reward": self.reward,
                "task_id": self.task_id}


def append_jsonl(path: str | Path, traj: Trajectory) -> None:
    """Append one trajectory as one line (creating the file)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a") as f:
        f.write(json.dumps(traj.to_dict(), ensure_ascii=False) + "\n")


def read_jsonl(path: str | Path) -> Iterator[Trajectory]:
    with Path(path).open() as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield Trajectory.from_dict(json.loads(line))
                except (json.JSONDecodeError, TypeError, KeyError) as e:
                    raise ValueError(f"{path}:{i}: not a trajectory ({e})") from None


def keep_for_rft(trajectories: list[Trajectory], min_reward: float = 0.0) -> list[dict[str, Any]]:
    """Rejection sampling: the SFT records of the trajectories with reward > ``min_reward``."""
    return [t.sft_record() for t in trajectories if t.reward is not None and t.reward > min_reward]
