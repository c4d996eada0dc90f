"""Tasks: the KernelBench problem format (``Model``, ``get_inputs``, ``get_init_inputs``).

A :class:`Task` is plain data (id, source, sha); nothing here executes task code
except :func:`validate_source`, which only parses it.  Loaders read a single file,
KernelBench (dataset rows, JSONL/parquet, or a directory of problem files) and
generic dataset rows.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator


class TaskError(ValueError):
    """A task (or a solution) is malformed; the message says what is missing or broken."""


@dataclass(frozen=True)
class Task:
    """One problem: a PyTorch reference module in the KernelBench format."""

    id: str
    """Stable name, e.g. ``kernelbench/L1/12`` or the file stem."""
    source: str
    """Python source defining ``Model``, ``get_inputs`` and ``get_init_inputs``."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Free-form metadata (level, problem_id, name, op count, composer, ...)."""

    @property
    def sha(self) -> str:
        """Content hash of the source: the key of every cache that depends on the task."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sha": self.sha}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Task":
        return cls(id=str(d["id"]), source=d["source"], meta=dict(d.get("meta") or {}))


REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def validate_source(source: str, *, required: Iterable[str] = REQUIRED, what: str = "task") -> ast.Module:
    """Parse ``source`` and check that it defines the names the format needs.

    Raises :class:`TaskError` with one clear sentence for a syntax error or for
    each missing definition.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise TaskError(f"{what} has a syntax error at line {e.lineno}: {e.msg}") from None
    defined: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            defined[node.name] = "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined[node.name] = "function"
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    defined[t.id] = "value"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                defined[(a.asname or a.name).split(".")[0]] = "import"
    missing = [n for n in required if n not in defined]
    if missing:
        raise TaskError(f"{what} does not define {', '.join(missing)} (the KernelBench format needs "
                        f"{', '.join(required)})")
    for name in required:
        if name[0].isupper() and defined[name] not in ("class", "import", "value"):
            raise TaskError(f"{what}: {name} must be a class")
        if name.startswith("get_") and defined[name] not in ("function", "value", "import"):
            raise TaskError(f"{what}: {name} must be a function")
    return tree


def task_from_source(source: str, id: str, **meta: Any) -> Task:
    validate_source(source, what=f"task {id}")
    return Task(id=id, source=source, meta=meta)


def load_file(path: str | Path) -> Task:
    """A single KernelBench-format ``.py`` file.  Its id is the file's name, or its directory's
    when the file has a generic name (``examples/cpu_scaled_swish/task.py`` -> ``cpu_scaled_swish``)."""
    p = Path(path)
    if not p.is_file():
        raise TaskError(f"task file not found: {p}")
    generic = p.stem in ("task", "model", "reference", "problem") and p.resolve().parent.name
    return task_from_source(p.read_text(), id=generic or p.stem, path=str(p.resolve()))


# --- KernelBench ---------------------------------------------------------------------

_KB_NAME = re.compile(r"^(?:kernelbench[/:])?(?:l|level)?(\d)[/:_-](\d+)$", re.I)


def parse_kernelbench_ref(ref: str) -> tuple[int, int] | None:
    """``kernelbench/L1/12``, ``L1/12``, ``level1/12``, ``1/12`` -> (1, 12); else None."""
    m = _KB_NAME.match(ref.strip().replace("level", "L").replace("Level", "L"))
    return (int(m.group(1)), int(m.group(2))) if m else None


def kernelbench_task(row: dict[str, Any]) -> Task:
    level, pid = int(row["level"]), int(row["problem_id"])
    return task_from_source(row["code"], id=f"kernelbench/L{level}/{pid}", level=level,
                            problem_id=pid, name=row.get("name", ""), source_set="kernelbench")


def read_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL, JSON (list) or parquet file."""
    p = Path(path)
    if not p.exists():
        raise TaskError(f"dataset file not found: {p}")
    if p.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:  # pragma: no cover - depends on the install
            raise TaskError("reading parquet needs pyarrow: pip install 'cuda-agent[data]'") from None
        yield from pq.read_table(p).to_pylist()
    elif p.suffix == ".json":
        yield from json.loads(p.read_text())
    else:
        with p.open() as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as e:
                        raise TaskError(f"{p}:{i}: not valid JSON ({e.msg})") from None


def load_kernelbench(source: str | Path, level: int | None = None,
                     problem_id: int | None = None) -> list[Task]:
    """KernelBench problems from a dataset file (JSONL/parquet with the Hugging Face
    columns ``level, problem_id, name, code``) or a directory laid out as in a clone
    (``level1/12_Name.py`` ... or ``KernelBench/level1/...``)."""
    p = Path(source)
    tasks: list[Task] = []
    if p.is_dir():
        root = p / "KernelBench" if (p / "KernelBench").is_dir() else p
        for lvl_dir in sorted(root.glob("level*")):
            lvl = int(re.sub(r"\D", "", lvl_dir.name) or 0)
            if level is not None and lvl != level:
                continue
            for f in sorted(lvl_dir.glob("*.py")):
                m = re.match(r"(\d+)_", f.name)
                if not m or (problem_id is not None and int(m.group(1)) != problem_id):
                    continue
                tasks.append(kernelbench_task({"level": lvl, "problem_id": int(m.group(1)),
                                               "name": f.name, "code": f.read_text()}))
    else:
        for row in read_rows(p):
            if level is not None and int(row["level"]) != level:
                continue
            if problem_id is not None and int(row["problem_id"]) != problem_id:
                continue
            tasks.append(kernelbench_task(row))
    tasks.sort(key=lambda t: (t.meta["level"], t.meta["problem_id"]))
    if not tasks:
        want = f"level {level}" + (f" problem {problem_id}" if problem_id is not None else "")
        raise TaskError(f"no KernelBench problem matches {want} in {p}")
    return tasks


def load_rows(path: str | Path, source_column: str = "code", id_column: str | None = None) -> list[Task]:
    """Generic dataset rows (JSONL/JSON/parquet) with the task source in ``source_column``."""
    out = []
    for i, row in enumerate(read_rows(path)):
        if source_column not in row:
            raise TaskError(f"{path}: row {i} has no column {source_column!r} "
                            f"(columns: {', '.join(row)})")
        tid = str(row[id_column]) if id_column else str(row.get("id", row.get("task_id", i)))
        meta = {k: v for k, v in row.items()
                if k not in (source_column, "id", id_column) and isinstance(v, (str, int, float, bool))}
        out.append(task_from_source(row[source_column], id=tid, **meta))
    return out


KERNELBENCH_ENV = "CUDA_AGENT_KERNELBENCH"
KERNELBENCH_HOWTO = ("get it from https://github.com/ScalingIntelligence/KernelBench (a clone) or the Hugging Face "
                     "dataset ScalingIntelligence/KernelBench (JSONL/parquet), then give --kernelbench PATH or set "
                     f"${KERNELBENCH_ENV}")


def kernelbench_path(kernelbench: str | Path | None = None) -> Path:
    """The KernelBench dataset: the explicit option, else ``$CUDA_AGENT_KERNELBENCH``, else a
    TaskError that says how to get it.  The one place that decides where KernelBench is."""
    import os

    src = kernelbench or os.environ.get(KERNELBENCH_ENV)
    if not src:
        raise TaskError(f"no KernelBench dataset: {KERNELBENCH_HOWTO}")
    p = Path(src)
    if not p.exists():
        raise TaskError(f"KernelBench dataset not found: {p} ({KERNELBENCH_HOWTO})")
    return p


def resolve(ref: str | Path, kernelbench: str | Path | None = None) -> Task:
    """Turn what a user types into a Task: a ``.py`` path, or ``L1/12``-style KernelBench
    reference (dataset from ``kernelbench`` or ``$CUDA_AGENT_KERNELBENCH``), or
    ``rows.jsonl#ID``."""
    import os

    s = str(ref)
    if Path(s).is_file() and s.endswith(".py"):
        return load_file(s)
    if "#" in s and Path(s.split("#", 1)[0]).is_file():
        path, tid = s.split("#", 1)
        for t in load_rows(path):
            if t.id == tid:
                return t
        raise TaskError(f"no row with id {tid!r} in {path}")
    kb = parse_kernelbench_ref(s)
    if kb:
        try:
            src = kernelbench_path(kernelbench)
        except TaskError as e:
            raise TaskError(f"{s} looks like a KernelBench reference; {e}") from None
        return load_kernelbench(src, *kb)[0]
    raise TaskError(f"task not found: {s} (a .py file, L<level>/<id> for KernelBench, or FILE.jsonl#ID)")
