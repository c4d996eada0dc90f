"""Task rows -> verl RL parquet, for the single-turn stage (1) and the agentic stage (4).

Every row carries what verl reads (``prompt`` as chat messages, ``data_source``,
``agent_name``, ``reward_model.ground_truth``, ``extra_info``) and what our reward needs to
rebuild the :class:`~cuda_agent.tasks.Task` exactly: the reference source is the ground
truth, ``extra_info`` holds the task id, its sha (checked when the task is rebuilt), its
metadata as JSON, and how to judge it (device, rules, reward scheme).

Stage 1 rows ask for the whole solution in one answer, in the file-block format of
:data:`RESPONSE_FORMAT`; :mod:`.reward_fn` parses that format.  Stage 4 rows are run by
:class:`~cuda_agent.train.agent_loop.CudaAgentLoop`, which lays out a fresh workspace per
trajectory and rebuilds the prompt with the agent's own ``system_prompt``/``user_prompt``
(the prompt stored here is the same text with a placeholder workspace path, so verl's
prompt-length filter sees the real size).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..agent.loop import user_prompt
from ..sandbox.workspace import skill_text
from ..tasks import Task, TaskError

DATA_SOURCE = "cuda_agent"
SINGLE_TURN_AGENT = "single_turn_agent"
"""verl's own one-generation loop (stage 1)."""
AGENT_NAME = "cuda_agent"
"""Our loop's registered name (stage 4); see configs/agent_loop.yaml."""
PLACEHOLDER_WORKSPACE = "/workspace"

RESPONSE_FORMAT = """# Answer format (single turn)
You cannot run commands in this turn: answer with the complete solution. Write every file as
a block that starts with a line `<file path="PATH">` and ends with a line `</file>`:

<file path="model_new.py">
import torch.nn as nn
from cuda_agent.ext import ops
...
</file>
<file path="kernels/my_op.cu">
...
</file>
<file path="kernels/my_op_binding.cpp">
...
</file>

PATH is `model_new.py` or `kernels/<name>.<cu|cuh|cpp|h|hpp>`; `model_new.py` is required.
Text outside the blocks is ignored; if a path appears twice, the last block wins."""


@dataclass(frozen=True)
class JudgeSpec:
    """How rows of a data set are judged (stored in each row's ``extra_info``)."""

    device: str = "cuda"
    rules: str = "strict"
    reward: str = "paper"


def task_section(task: Task) -> str:
    """The task as the agent's system prompt shows it (the reference, read-only)."""
    return (f"# Task {task.id}\n\nThe reference PyTorch module (model.py, read-only):\n\n"
            f"```python\n{task.source.rstrip()}\n```")


def single_turn_messages(task: Task, device: str) -> list[dict[str, str]]:
    """Stage-1 prompt: the workspace SKILL + the answer format as system, the task as user."""
    system = skill_text(device).strip() + "\n\n" + RESPONSE_FORMAT
    kernels = ("CUDA kernels (kernels/*.cu with extern \"C\" launchers)" if device == "cuda"
               else "C++ CPU kernels (kernels/*.cpp with extern \"C\" functions)")
    user = (task_section(task) + f"\n\nWrite {kernels}, their bindings (kernels/*_binding.cpp) and "
            f"model_new.py (class ModelNew) so that ModelNew computes the same outputs as Model, "
            f"faster. Answer with the file blocks only.")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def episode_dir(root: Path) -> tuple[str, Path]:
    """A new trajectory id and a fresh directory for its episode under ``root``; the workspace is
    its ``ws``.  Its path is in the episode's prompt, so scripted episodes (the chain's warm start)
    are laid out the same way: a small model learns the shape of the path it will be shown."""
    traj_id = uuid.uuid4().hex[:12]
    root.mkdir(parents=True, exist_ok=True)
    return traj_id, Path(tempfile.mkdtemp(prefix=f"cuda-agent-{traj_id}-", dir=root))


def agentic_messages(task: Task, device: str, workspace: str = PLACEHOLDER_WORKSPACE) -> list[dict[str, str]]:
    """Stage-4 prompt, as :func:`cuda_agent.agent.loop.system_prompt` builds it in a workspace."""
    system = skill_text(device).strip() + "\n\n" + task_section(task)
    return [{"role": "system", "content": system},
            {"role": "user", "content": user_prompt(task, Path(workspace), device)}]


def _row(task: Task, index: int, split: str, prompt: list[dict[str, str]], agent_name: str,
         judge: JudgeSpec) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "agent_name": agent_name,
        "prompt": prompt,
        "reward_model": {"style": "rule", "ground_truth": task.source},
        "extra_info": {"index": index, "split": split, "task_id": task.id, "task_sha": task.sha,
                       "task_meta": json.dumps(task.meta, sort_keys=True, default=str),
                       "device": judge.device, "rules": judge.rules, "reward": judge.reward},
    }


def single_turn_rows(tasks: Iterable[Task], judge: JudgeSpec, split: str = "train") -> list[dict[str, Any]]:
    """Stage 1: one generation per task, rewarded by :func:`cuda_agent.train.reward_fn.compute_score`."""
    return [_row(t, i, split, single_turn_messages(t, judge.device), SINGLE_TURN_AGENT, judge)
            for i, t in enumerate(tasks)]


def agentic_rows(tasks: Iterable[Task], judge: JudgeSpec, split: str = "train") -> list[dict[str, Any]]:
    """Stage 4 (and the value pretraining of stage 3): one ReAct episode per task."""
    return [_row(t, i, split, agentic_messages(t, judge.device), AGENT_NAME, judge)
            for i, t in enumerate(tasks)]


def task_from_row(ground_truth: str, extra_info: dict[str, Any] | None) -> Task:
    """Rebuild the Task of a row; a sha that does not match the source is an error."""
    info = dict(extra_info or {})
    if not isinstance(ground_truth, str) or not ground_truth.strip():
        raise TaskError("the row has no task source in reward_model.ground_truth")
    meta = info.get("task_meta") or "{}"
    try:
        meta = json.loads(meta) if isinstance(meta, str) else dict(meta)
    except (json.JSONDecodeError, TypeError, ValueError):
        meta = {}
    task = Task(id=str(info.get("task_id") or "task"), source=ground_truth, meta=meta)
    want = info.get("task_sha")
    if want and want != task.sha:
        raise TaskError(f"task {task.id}: the row's sha {want} does not match its source ({task.sha})")
    return task


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """One parquet file of rows (pyarrow infers the nested columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"no rows to write to {path}")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), p)
    return p


@dataclass
class Prepared:
    """What :func:`prepare` wrote."""

    single_turn: Path
    agentic: Path
    n_tasks: int


def prepare(tasks: list[Task], out_dir: str | Path, judge: JudgeSpec, split: str = "train") -> Prepared:
    """Write ``<split>_single_turn.parquet`` (stage 1) and ``<split>_agentic.parquet`` (stages 3-4)."""
    if not tasks:
        raise TaskError("no tasks to prepare")
    out = Path(out_dir)
    st = write_parquet(single_turn_rows(tasks, judge, split), out / f"{split}_single_turn.parquet")
    ag = write_parquet(agentic_rows(tasks, judge, split), out / f"{split}_agentic.parquet")
    return Prepared(st, ag, len(tasks))
