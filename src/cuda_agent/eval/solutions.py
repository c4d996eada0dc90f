"""Where each problem's solution is: a solutions tree or a directory of agent runs.

Two layouts, which may be mixed under one root:

* ``ROOT/L<level>/<problem_id>/`` (a workspace: ``model_new.py`` [+ ``kernels/``]) or
  ``ROOT/L<level>/<problem_id>.py`` (one ``model_new.py``); ``<problem_id>_<anything>``
  is accepted too, so KernelBench file names work.
* agent runs (``cuda-agent solve --out``): every ``trajectory.jsonl`` below ROOT.  Each
  trajectory contributes the snapshot the agent loop kept as its best (``best_path``, else
  ``best/`` beside the file, else its best-ranked checked snapshot, else its final
  workspace); with ``all_snapshots`` every snapshot it checked.  The recorded verdicts only
  pick a snapshot: the eval re-checks whatever it scores.

Several candidates for one problem (several attempts, ``all_snapshots``) are all checked and
the problem is scored on the best of them.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..tasks import Task, parse_kernelbench_ref
from .suite import label

_LEVEL_DIR = re.compile(r"^(?:l|level)(\d+)$", re.I)
_PROBLEM = re.compile(r"^(\d+)(?:_.*)?$")


class SolutionsError(ValueError):
    """The solutions directory is missing or cannot be read as one of the layouts."""


@dataclass(frozen=True)
class Candidate:
    """One solution to check for a problem."""

    path: Path
    """A workspace directory (``model_new.py`` [+ ``kernels/``]) or a ``model_new.py`` file."""
    origin: str
    """Where it came from: ``solutions`` or ``<trajectory.jsonl>#<trajectory id>:<which>``."""

    def digest(self) -> str:
        """Content hash of what is judged (model_new.py and kernels/, or the one file)."""
        h = hashlib.sha256()
        p = self.path
        if p.is_file():
            files = [p]
        else:
            files = [p / "model_new.py"] if (p / "model_new.py").is_file() else []
            if (p / "kernels").is_dir():
                files += sorted(f for f in (p / "kernels").rglob("*")
                                if f.is_file() and "__pycache__" not in f.parts)
        for f in files:
            rel = f.name if p.is_file() else str(f.relative_to(p))
            h.update(rel.encode() + b"\0")
            try:
                h.update(f.read_bytes())
            except OSError:
                h.update(b"<unreadable>")
            h.update(b"\0")
        return h.hexdigest()[:16]


@dataclass
class Found:
    """Candidates per problem label (``L1/12``) and what could not be used."""

    candidates: dict[str, list[Candidate]]
    warnings: list[str]


def find(root: str | Path, tasks: list[Task], all_snapshots: bool = False) -> Found:
    """The candidates for ``tasks`` under ``root``; problems without any are absent from the map."""
    root = Path(root)
    if not root.is_dir():
        raise SolutionsError(f"solutions directory not found: {root}")
    wanted = {label(t): t for t in tasks}
    by_sha = {t.sha: label(t) for t in tasks}
    out: dict[str, list[Candidate]] = {}
    warnings: list[str] = []
    level_dirs = [d for d in sorted(root.iterdir()) if d.is_dir() and _LEVEL_DIR.match(d.name)]
    trajectories = sorted(root.rglob("trajectory.jsonl"))
    if not level_dirs and not trajectories:
        raise SolutionsError(f"{root} holds no solutions: expected L<level>/<problem_id>[.py] entries "
                             f"or agent runs (trajectory.jsonl files)")
    for d in level_dirs:
        level = int(_LEVEL_DIR.match(d.name).group(1))  # type: ignore[union-attr]
        for entry in sorted(d.iterdir()):
            if entry.name.startswith((".", "__")) or (entry.is_file() and entry.suffix != ".py"):
                continue
            m = _PROBLEM.match(entry.stem if entry.is_file() else entry.name)
            if not m:
                raise SolutionsError(f"cannot tell the problem id of {entry} (name it <problem_id>[.py], "
                                     f"e.g. {d.name}/12 or {d.name}/12.py)")
            key = f"L{level}/{int(m.group(1))}"
            if key not in wanted:
                continue
            if key in out:
                raise SolutionsError(f"two solutions for {key}: {out[key][0].path} and {entry}")
            out[key] = [Candidate(entry, "solutions")]
    for f in trajectories:
        for key, cand in _from_trajectories(f, wanted, by_sha, all_snapshots, warnings):
            if out.get(key) and out[key][0].origin == "solutions":
                warnings.append(f"{key}: both a solutions entry and agent runs; scoring the solutions entry")
                continue
            out.setdefault(key, [])
            if cand.path not in {c.path for c in out[key]}:
                out[key].append(cand)
    return Found(out, warnings)


def _from_trajectories(f: Path, wanted: dict[str, Task], by_sha: dict[str, str], all_snapshots: bool,
                       warnings: list[str]):
    try:
        lines = f.read_text().splitlines()
    except OSError as e:
        warnings.append(f"{f}: unreadable ({e})")
        return
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            t = json.loads(line)
        except json.JSONDecodeError:
            warnings.append(f"{f}:{i}: not JSON; skipped")
            continue
        if not isinstance(t, dict):
            continue
        key = by_sha.get(str(t.get("task_sha")))
        if key is None:
            ref = parse_kernelbench_ref(str(t.get("task_id", "")))
            key = f"L{ref[0]}/{ref[1]}" if ref else None
            if key in wanted:
                warnings.append(f"{f}:{i}: {key} was solved for another version of the task (sha "
                                f"{t.get('task_sha')}); re-checked against the selected one")
        if key not in wanted:
            continue
        tid = f"{f}#{t.get('id', i)}"
        picks = _picks(f.parent, t, all_snapshots)
        if not picks:
            warnings.append(f"{f}:{i}: no solution of {key} survives on disk (best/, snapshots/, workspace/)")
        for which, p in picks:
            yield key, Candidate(p, f"{tid}:{which}")


def _existing(path: str | None, base: Path, sub: str) -> Path | None:
    """``path`` if it exists, else the same name under ``base/sub`` (a moved run directory)."""
    if not path:
        return None
    p = Path(path)
    if p.exists():
        return p
    alt = base / sub / p.name if sub else base / p.name
    return alt if alt.exists() else None


def _rank(check: dict | None) -> tuple:
    c = check or {}
    return (bool(c.get("correct") and c.get("compiled")), c.get("speedup_compile") or 0.0,
            c.get("speedup_eager") or 0.0)


def _picks(base: Path, t: dict, all_snapshots: bool) -> list[tuple[str, Path]]:
    snaps = []
    for turn in t.get("turns") or []:
        if isinstance(turn, dict) and turn.get("snapshot"):
            p = _existing(turn["snapshot"], base, "snapshots")
            if p is not None:
                snaps.append((_rank(turn.get("check")), f"turn {turn.get('index')}", p))
    final_ws = _existing(t.get("workspace"), base, "")
    final_snaps = sorted(base.glob("snapshots/final-*")) if (base / "snapshots").is_dir() else []
    if all_snapshots:
        out = [(which, p) for _, which, p in snaps]
        out += [("final", p) for p in final_snaps]
        if final_ws is not None and (final_ws / "model_new.py").is_file():
            out.append(("workspace", final_ws))
        best = _existing(t.get("best_path"), base, "")
        if best is not None:
            out.append(("best", best))
        seen, uniq = set(), []
        for which, p in out:
            d = Candidate(p, "").digest()
            if d not in seen:
                seen.add(d)
                uniq.append((which, p))
        return uniq
    best = _existing(t.get("best_path"), base, "")
    if best is None and (base / "best" / "model_new.py").is_file():
        best = base / "best"
    if best is not None:
        return [("best", best)]
    if snaps:
        return [max(snaps, key=lambda s: s[0])[1:]]
    if final_snaps:
        return [("final", final_snaps[-1])]
    if final_ws is not None and (final_ws / "model_new.py").is_file():
        return [("workspace", final_ws)]
    return []
