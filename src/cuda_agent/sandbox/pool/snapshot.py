"""Freeze a solution at submit time: copy it into the pool's store, so later edits by the
agent (or anyone) do not change what is judged.

Only regular files are copied (a symlink to a regular file is copied as the file it points
to); FIFOs, devices, sockets and links to directories are skipped, ``__pycache__`` and
``.git`` too, and the whole copy is capped in size, so a hostile workspace cannot make the
submit hang or fill the disk.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

SKIP_DIRS = {"__pycache__", ".git"}
MAX_BYTES = 64 << 20
MAX_FILES = 2000


class SnapshotError(ValueError):
    """The solution cannot be snapshotted (missing, too large, not a directory or .py)."""


def _copy_file(src: Path, dst: Path, budget: list[int]) -> None:
    try:
        st = os.stat(src)  # follows a symlink
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        return
    budget[0] -= st.st_size
    budget[1] -= 1
    if budget[0] < 0 or budget[1] < 0:
        raise SnapshotError(f"solution is larger than the pool accepts ({MAX_BYTES >> 20} MiB, "
                            f"{MAX_FILES} files)")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    os.chmod(dst, stat.S_IMODE(st.st_mode) | stat.S_IRUSR)


def take(solution: str | Path, dest: Path) -> Path:
    """Copy ``solution`` (a workspace directory or a single ``.py``) under ``dest``; return the
    path to hand to ``check()`` (``dest`` itself, or ``dest/<file>.py``)."""
    src = Path(solution)
    budget = [MAX_BYTES, MAX_FILES]
    dest.mkdir(parents=True, exist_ok=False)
    try:
        if src.is_dir():
            for root, dirs, files in os.walk(src, followlinks=False):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not Path(root, d).is_symlink())
                rel = Path(root).relative_to(src)
                for f in sorted(files):
                    _copy_file(Path(root, f), dest / rel / f, budget)
            return dest
        if src.is_file() and src.suffix == ".py":
            _copy_file(src, dest / src.name, budget)
            return dest / src.name
    except BaseException:
        remove(dest)
        raise
    remove(dest)
    raise SnapshotError(f"solution not found: {src} (a workspace directory or a model_new.py)")


def remove(path: Path) -> None:
    """Delete a snapshot (files are copied into writable directories, so read-only files such
    as model.py go too)."""
    shutil.rmtree(path, ignore_errors=True)
