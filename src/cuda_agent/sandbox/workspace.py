"""Lay out a workspace for a task: the CUDA-Agent layout an agent (or a person) works in.

    DIR/model.py          the reference (read-only)
    DIR/model_new.py      starter: the reference renamed to ModelNew (passes kernelbench rules,
                          fails strict ones until its torch ops are replaced by your kernels)
    DIR/kernels/          your *.cu / *.cpp kernels and *_binding.cpp registrations
    DIR/SKILL.md          workflow, rules, commands and verdicts
    DIR/.cuda_agent/task.json   which task this is (the evaluator keeps its own copy)

The compile / verify / profile commands come from the installed package, so nothing in
the workspace can change a verdict; the task's source is kept in the cache (by sha), and the
sha-256 of every file the workspace is given is kept in the cache too (``manifest``): a
provided file changed or deleted later is reported as a violation by the check.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path

from ..tasks import Task, TaskError
from .build import INFRA_DIR
from .cache import cache_root

TEMPLATES = Path(__file__).parent / "templates"
META = ".cuda_agent/task.json"


def _store(task: Task) -> Path:
    d = cache_root() / "tasks"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{task.sha}.json"
    if not p.exists():
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(task.to_dict()))
        os.replace(tmp, p)
    return p


def starter(task: Task) -> str:
    body = re.sub(r"\bModel\b", "ModelNew", task.source)
    return ("# Starter: the reference renamed to ModelNew. Replace its torch operators with your own\n"
            "# kernels: `from cuda_agent.ext import ops`, then call ops.<name>(...). See SKILL.md.\n" + body)


def skill_text(device: str, n_sets: int = 5) -> str:
    fields = {
        "device": "CUDA GPU" if device == "cuda" else "CPU (C++ kernels, no CUDA)",
        "kernel_files": "CUDA" if device == "cuda" else "for the CPU backend: `kernels/<name>.cpp`, plain C++ with OpenMP",
        "n_sets": str(n_sets),
        "binding_header": (INFRA_DIR / "cuda_agent_binding.h").read_text().strip(),
        "worked_example": (TEMPLATES / f"worked_{'cuda' if device == 'cuda' else 'cpu'}.md").read_text().strip(),
    }
    text = (TEMPLATES / "SKILL.md").read_text()
    for k, v in fields.items():
        text = text.replace("{" + k + "}", v)
    return text


def create_workspace(task: Task, directory: str | Path, device: str = "cuda", overwrite: bool = False) -> Path:
    """Create the workspace; refuses to clobber an existing model_new.py unless ``overwrite``."""
    d = Path(directory)
    if (d / "model_new.py").exists() and not overwrite:
        raise TaskError(f"{d} already holds a workspace (model_new.py exists); use another directory")
    (d / "kernels").mkdir(parents=True, exist_ok=True)
    (d / ".cuda_agent").mkdir(exist_ok=True)
    ref = d / "model.py"
    if ref.exists():
        ref.chmod(stat.S_IRUSR | stat.S_IWUSR)
    ref.write_text(task.source)
    ref.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    (d / "model_new.py").write_text(starter(task))
    (d / "SKILL.md").write_text(skill_text(device))
    _store(task)
    (d / META).write_text(json.dumps({"task_id": task.id, "task_sha": task.sha, "device": device}))
    provided = ("model.py", "SKILL.md", META)
    _manifest_path(d).write_text(json.dumps({rel: _digest(d / rel) for rel in provided}))
    return d


PROVIDED_NOTE = "files the workspace was given (hashed at creation)"


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _manifest_path(ws: Path) -> Path:
    d = cache_root() / "manifests"
    d.mkdir(parents=True, exist_ok=True)
    return d / (hashlib.sha256(str(ws.resolve()).encode()).hexdigest()[:32] + ".json")


def changed_provided_files(ws: Path) -> list[str]:
    """Provided files of workspace ``ws`` that were changed or deleted since it was created
    (empty when ``ws`` was not made by create_workspace on this cache)."""
    p = _manifest_path(ws)
    if not p.is_file():
        return []
    out = []
    for rel, digest in json.loads(p.read_text()).items():
        f = ws / rel
        if not f.is_file() or _digest(f) != digest:
            out.append(rel)
    return out


def find_workspace(start: str | Path = ".") -> Path:
    """The workspace containing ``start`` (walks up to the directory holding .cuda_agent/)."""
    p = Path(start).resolve()
    for q in (p, *p.parents):
        if (q / META).is_file():
            return q
    raise TaskError(f"{p} is not inside a cuda-agent workspace (no {META}); create one with "
                    f"`cuda-agent workspace TASK DIR`")


def workspace_task(ws: Path) -> tuple[Task, str]:
    """The task a workspace was made for (from the cache, not from model.py) and its device."""
    meta = json.loads((ws / META).read_text())
    stored = cache_root() / "tasks" / f"{meta['task_sha']}.json"
    if stored.is_file():
        return Task.from_dict(json.loads(stored.read_text())), meta.get("device", "cuda")
    raise TaskError(f"the task of this workspace ({meta['task_id']}, sha {meta['task_sha']}) is not in the "
                    f"cache {stored.parent}; recreate the workspace")
