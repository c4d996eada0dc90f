"""Stage 2, rejection fine-tuning data: agent trajectories -> SFT parquet for verl.

Reads trajectory JSONL files (``cuda-agent solve`` writes ``attempt_N/trajectory.jsonl``;
the training agent loop writes ``<trajectory_dir>/<id>/trajectory.jsonl``), keeps those
whose reward is above a threshold (the paper keeps reward > 0), and writes one row per kept
trajectory: ``messages`` (OpenAI format: system / user / assistant with ``tool_calls`` /
tool), ``tools`` (the OpenAI tool schemas, as a JSON string: pyarrow would merge the
different parameter schemas of the ten tools into one struct and fill the gaps with nulls),
and ``task_id``, ``reward``, ``trajectory_id``.  :class:`cuda_agent.train.sft_dataset.RFTDataset`
is verl's multi-turn SFT dataset reading that layout.

Every trajectory is accounted for: kept, or dropped with a reason (unreadable line, no
reward, reward at or below the threshold, no assistant turn).  Trailing tool results after
the last assistant turn are cut, as in RL, where an episode ends on a model token.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..agent.trajectory import Trajectory

MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")


@dataclass
class RFTReport:
    """What :func:`build_rft` read, kept and dropped."""

    files: list[str] = field(default_factory=list)
    read: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    """Reason -> count."""
    out: str | None = None
    min_reward: float = 0.0
    reward_field: str = "reward"

    def summary(self) -> str:
        why = ", ".join(f"{n} {r}" for r, n in sorted(self.dropped.items())) or "none"
        return (f"read {self.read} trajectories from {len(self.files)} file(s); kept {self.kept} "
                f"({self.reward_field} > {self.min_reward:g}); dropped: {why}" +
                (f"; wrote {self.out}" if self.out else ""))


def trajectory_files(paths: Iterable[str | Path]) -> list[Path]:
    """JSONL files given directly, or every ``trajectory.jsonl`` under a directory."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.rglob("trajectory.jsonl"))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"no trajectory file or directory at {p}")
    return out


def _records(path: Path) -> Iterator[Trajectory | str]:
    """Trajectories of one file; a line that is not one yields the reason instead."""
    with path.open() as f:
        for line in f:
            if not line.strip():
                continue
            try:
                yield Trajectory.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError, KeyError, AttributeError):
                yield "unreadable line"


def _message(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: m.get(k) for k in MESSAGE_KEYS}
    out["content"] = out["content"] or ""
    if out["tool_calls"]:
        out["tool_calls"] = [{"id": c.get("id"), "type": "function",
                              "function": {"name": c["function"]["name"],
                                           "arguments": c["function"].get("arguments") or "{}"}}
                             for c in out["tool_calls"]]
    else:
        out["tool_calls"] = None
    return out


def sft_row(t: Trajectory) -> dict[str, Any] | None:
    """One SFT row, or None when the trajectory has no assistant turn."""
    msgs = list(t.messages)
    while msgs and msgs[-1].get("role") != "assistant":
        msgs.pop()
    if not msgs:
        return None
    return {"messages": [_message(m) for m in msgs], "tools": json.dumps(t.tools),
            "task_id": t.task_id, "reward": float(t.reward if t.reward is not None else 0.0),
            "trajectory_id": t.id}


def build_rft(paths: Iterable[str | Path], out: str | Path | None = None, min_reward: float = 0.0,
              reward_field: str = "reward") -> tuple[list[dict[str, Any]], RFTReport]:
    """Select and convert; writes ``out`` (parquet) when given and something was kept.

    ``reward_field``: ``reward`` (the final workspace's verdict, as the loop reports it) or
    ``best_reward`` (the best checked snapshot's)."""
    if reward_field not in ("reward", "best_reward"):
        raise ValueError(f"reward_field must be reward or best_reward, not {reward_field!r}")
    files = trajectory_files(paths)
    rep = RFTReport(files=[str(f) for f in files], min_reward=min_reward, reward_field=reward_field)
    dropped: Counter[str] = Counter()
    rows: list[dict[str, Any]] = []
    for f in files:
        for t in _records(f):
            rep.read += 1
            if isinstance(t, str):
                dropped[t] += 1
                continue
            r = getattr(t, reward_field)
            if r is None:
                dropped["no reward"] += 1
            elif r <= min_reward:
                dropped[f"{reward_field} <= {min_reward:g}"] += 1
            elif (row := sft_row(t)) is None:
                dropped["no assistant turn"] += 1
            else:
                row["reward"] = float(r)
                rows.append(row)
    rep.kept, rep.dropped = len(rows), dict(dropped)
    if out is not None and rows:
        from .data import write_parquet

        rep.out = str(write_parquet(rows, out))
    return rows, rep
