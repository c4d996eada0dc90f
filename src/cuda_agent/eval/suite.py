"""Which KernelBench problems an evaluation covers: levels (1, 2, 3 by default) and optional ids.

The dataset is a KernelBench JSONL/parquet file (or a clone) given by path or by
``$CUDA_AGENT_KERNELBENCH``; problems come out as :class:`~cuda_agent.tasks.Task` objects
whose ``meta`` carries ``level``, ``problem_id`` and ``name``.  Bad selections raise
:class:`SuiteError` with one sentence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from ..tasks import Task, TaskError, kernelbench_path, load_kernelbench, parse_kernelbench_ref

DEFAULT_LEVELS = (1, 2, 3)


class SuiteError(ValueError):
    """The selection cannot be made (no dataset, unknown level or id, unparsable list)."""


def parse_levels(text: str | Iterable[int] | None) -> tuple[int, ...]:
    """``"1,2,3"`` -> (1, 2, 3); None -> the default levels."""
    if text is None:
        return DEFAULT_LEVELS
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[int] = []
    for it in items:
        s = str(it).strip().upper().removeprefix("LEVEL").removeprefix("L")
        if not s:
            continue
        if not s.isdigit():
            raise SuiteError(f"not a level: {it!r} (give numbers like 1,2,3)")
        if int(s) not in out:
            out.append(int(s))
    if not out:
        raise SuiteError("no level given")
    return tuple(out)


def parse_ids(text: str | Sequence[str] | None) -> list[tuple[int | None, int]]:
    """``"12,L2/5"`` -> [(None, 12), (2, 5)]: a bare id applies to every selected level."""
    if text is None:
        return []
    items = text.split(",") if isinstance(text, str) else [x for t in text for x in str(t).split(",")]
    out: list[tuple[int | None, int]] = []
    for it in (s.strip() for s in items):
        if not it:
            continue
        if it.isdigit():
            out.append((None, int(it)))
            continue
        ref = parse_kernelbench_ref(it)
        if ref is None:
            raise SuiteError(f"not a problem id: {it!r} (give 12 or L1/12)")
        out.append(ref)
    return out


def select(kernelbench: str | Path | None, levels: Sequence[int] = DEFAULT_LEVELS,
           ids: Sequence[tuple[int | None, int]] = ()) -> list[Task]:
    """The problems of ``levels`` (every level when empty; restricted to ``ids`` when given),
    ordered by level and id."""
    try:
        path = kernelbench_path(kernelbench)
        every = load_kernelbench(path)
    except TaskError as e:
        raise SuiteError(str(e)) from None
    present = sorted({t.meta["level"] for t in every})
    levels = levels or present  # none given: every level of the set
    unknown = [lv for lv in levels if lv not in present]
    if unknown:
        raise SuiteError(f"unknown level {unknown[0]} (the dataset {path.name} has levels "
                         f"{', '.join(map(str, present))})")
    chosen = [t for t in every if t.meta["level"] in levels]
    if ids:
        for lv, pid in ids:
            if lv is not None and lv not in levels:
                raise SuiteError(f"L{lv}/{pid} is outside the selected levels ({','.join(map(str, levels))})")
            if not any(t.meta["problem_id"] == pid and (lv is None or t.meta["level"] == lv) for t in chosen):
                where = f"level {lv}" if lv is not None else "the selected levels"
                raise SuiteError(f"no problem {pid} in {where} of {path.name}")
        chosen = [t for t in chosen if any(t.meta["problem_id"] == pid and lv in (None, t.meta["level"])
                                           for lv, pid in ids)]
    return chosen


def label(task: Task) -> str:
    """``L1/12``: how the eval names a problem."""
    return f"L{task.meta['level']}/{task.meta['problem_id']}"
