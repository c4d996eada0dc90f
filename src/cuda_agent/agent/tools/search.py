"""Glob and Grep: find files by pattern, search contents by regular expression.

Grep uses ripgrep (``rg --json``) when it is on the PATH and a pure-Python search
otherwise; both feed the same formatter, so the model sees the same output either way:
``content`` mode prints ``path:line:text`` for matches and ``path-line-text`` for context
lines (``--`` between separate groups when context is asked for), ``files_with_matches``
prints paths, ``count`` prints ``path:N``.  Paths are relative to the workspace, sorted
component by component; hidden files and symlinks are skipped during the walk.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import Tool, ToolContext, ToolFailure, register_tool, schema

GLOB_LIMIT = 500
SKIP_DIRS = {".git", "__pycache__"}


def glob_files(ctx: ToolContext, pattern: str, path: str | None = None) -> str:
    if not isinstance(pattern, str) or not pattern.strip():
        raise ToolFailure("pattern must be a non-empty glob such as '**/*.cu'")
    pattern = pattern.strip()
    if pattern.startswith("/") or ".." in Path(pattern).parts:
        raise ToolFailure("pattern must be relative to the search directory and must not contain '..'")
    base = ctx.resolve(path or ".", must_exist=True, what="path")
    if not base.is_dir():
        raise ToolFailure(f"{path} is not a directory")
    hits = []
    for pat in expand_braces(pattern):
        for p in base.glob(pat):
            if any(part in SKIP_DIRS for part in p.relative_to(base).parts):
                continue
            try:
                real = ctx.resolve(str(p))
            except ToolFailure:
                continue
            if real.is_file():
                hits.append(ctx.rel(real))
    hits = sorted(set(hits), key=lambda s: s.split("/"))
    if not hits:
        return f"No files match {pattern} under {ctx.rel(base)}."
    more = ""
    if len(hits) > GLOB_LIMIT:
        more = f"\n[... {len(hits) - GLOB_LIMIT} more files not shown; narrow the pattern]"
        hits = hits[:GLOB_LIMIT]
    return ctx.truncate("\n".join(hits) + more)


def expand_braces(pattern: str) -> list[str]:
    """``*.{cu,cpp}`` -> ``['*.cu', '*.cpp']`` (nested braces expand recursively)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(pattern[:m.start()] + alt + pattern[m.end():]))
    return out


# --- Grep --------------------------------------------------------------------------

@dataclass
class FileHits:
    """Matches (and context lines) in one file: line number -> (is_match, text)."""

    path: str
    lines: dict[int, tuple[bool, str]] = field(default_factory=dict)
    n_matches: int = 0


def _rel_sort_key(p: str) -> list[str]:
    return p.split("/")


def _glob_ok(rel_to_base: str, globs: list[str]) -> bool:
    if not globs:
        return True
    name = rel_to_base.rsplit("/", 1)[-1]
    for g in globs:
        target = rel_to_base if "/" in g else name
        if fnmatch.fnmatchcase(target, g.lstrip("/")):
            return True
    return False


def _python_search(ctx: ToolContext, base: Path, rx: re.Pattern, globs: list[str],
                   before: int, after: int) -> list[FileHits]:
    files: list[Path] = []
    if base.is_file():
        files = [base]
    else:
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS
                           and not os.path.islink(os.path.join(dirpath, d))]
            for f in filenames:
                fp = os.path.join(dirpath, f)
                if f.startswith(".") or os.path.islink(fp):
                    continue
                rel = os.path.relpath(fp, base).replace(os.sep, "/")
                if _glob_ok(rel, globs):
                    files.append(Path(fp))
    out = []
    for fp in files:
        try:
            data = fp.read_bytes()
        except OSError:
            continue
        if b"\0" in data:
            continue
        text = data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        hits = FileHits(ctx.rel(fp))
        for i, line in enumerate(lines, 1):
            if rx.search(line):
                hits.n_matches += 1
                hits.lines[i] = (True, line)
                for j in range(max(1, i - before), min(len(lines), i + after) + 1):
                    if j not in hits.lines:
                        hits.lines[j] = (False, lines[j - 1])
        if hits.n_matches:
            out.append(hits)
    out.sort(key=lambda h: _rel_sort_key(h.path))
    return out


def _rg_text(obj: dict[str, Any]) -> str:
    if "text" in obj:
        return obj["text"]
    return base64.b64decode(obj.get("bytes", "")).decode("utf-8", errors="replace")


def _rg_search(ctx: ToolContext, rg: str, base: Path, pattern: str, ignore_case: bool,
               globs: list[str], before: int, after: int) -> list[FileHits]:
    root = Path(os.path.realpath(ctx.root))
    cmd = [rg, "--json", "--no-ignore", "--no-config", "--sort", "path", "--no-follow"]
    if ignore_case:
        cmd.append("-i")
    if before:
        cmd += ["-B", str(before)]
    if after:
        cmd += ["-A", str(after)]
    for g in globs:
        cmd += ["--glob", g]
    for d in SKIP_DIRS:
        cmd += ["--glob", f"!{d}"]
    cmd += ["-e", pattern]
    cmd.append(str(base.relative_to(root)) if base != root else ".")
    proc = subprocess.run(cmd, cwd=root, capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    if proc.returncode not in (0, 1):
        msg = proc.stderr.decode("utf-8", errors="replace").strip()
        raise ToolFailure(f"grep failed: {msg.splitlines()[-1] if msg else 'ripgrep exit ' + str(proc.returncode)}"
                          if "regex" not in msg else f"invalid regular expression: {msg}")
    by_path: dict[str, FileHits] = {}
    for line in proc.stdout.splitlines():
        ev = json.loads(line)
        if ev["type"] not in ("match", "context"):
            continue
        d = ev["data"]
        path = os.path.normpath(_rg_text(d["path"]))
        hits = by_path.setdefault(path, FileHits(path))
        text = _rg_text(d["lines"])
        text = text[:-1] if text.endswith("\n") else text
        is_match = ev["type"] == "match"
        hits.lines[d["line_number"]] = (is_match, text)
        if is_match:
            hits.n_matches += 1
    out = [h for h in by_path.values() if h.n_matches]
    out.sort(key=lambda h: _rel_sort_key(h.path))
    return out


def _format(results: list[FileHits], mode: str, with_context: bool) -> list[str]:
    if mode == "files_with_matches":
        return [h.path for h in results]
    if mode == "count":
        return [f"{h.path}:{h.n_matches}" for h in results]
    rows: list[str] = []
    prev_file, prev_line = None, None
    for h in results:
        for n in sorted(h.lines):
            is_match, text = h.lines[n]
            if with_context and rows and (h.path != prev_file or n != (prev_line or 0) + 1):
                rows.append("--")
            rows.append(f"{h.path}{':' if is_match else '-'}{n}{':' if is_match else '-'}{text}")
            prev_file, prev_line = h.path, n
    return rows


def grep(ctx: ToolContext, pattern: str, path: str | None = None, glob: str | None = None,
         output_mode: str = "files_with_matches", case_insensitive: bool = False,
         context: int | None = None, before: int | None = None, after: int | None = None,
         head_limit: int | None = None, engine: str | None = None) -> str:
    if not isinstance(pattern, str) or pattern == "":
        raise ToolFailure("pattern must be a non-empty regular expression")
    if output_mode not in ("content", "files_with_matches", "count"):
        raise ToolFailure("output_mode must be one of content, files_with_matches, count")
    try:
        flags = re.IGNORECASE if case_insensitive else 0
        rx = re.compile(pattern, flags)
    except re.error as e:
        raise ToolFailure(f"invalid regular expression {pattern!r}: {e}") from None
    base = ctx.resolve(path or ".", must_exist=True, what="path")
    globs = expand_braces(glob) if glob else []
    try:
        b = int(before if before is not None else (context or 0))
        a = int(after if after is not None else (context or 0))
    except (TypeError, ValueError):
        raise ToolFailure("context, before and after must be integers") from None
    if output_mode != "content":
        a = b = 0
    rg = shutil.which("rg") if engine in (None, "rg") else None
    if engine == "rg" and rg is None:
        raise ToolFailure("ripgrep (rg) is not on the PATH")
    if rg:
        results = _rg_search(ctx, rg, base, pattern, bool(case_insensitive), globs, b, a)
    else:
        results = _python_search(ctx, base, rx, globs, b, a)
    rows = _format(results, output_mode, bool(a or b))
    if not rows:
        where = "the workspace" if ctx.rel(base) == "." else ctx.rel(base)
        return f"No matches for {pattern!r} in {where}" + (f" (glob {glob})" if glob else "") + "."
    more = ""
    if head_limit is not None:
        try:
            hl = int(head_limit)
        except (TypeError, ValueError):
            raise ToolFailure("head_limit must be an integer") from None
        if hl > 0 and len(rows) > hl:
            more = f"\n[... {len(rows) - hl} more lines not shown (head_limit={hl})]"
            rows = rows[:hl]
    return ctx.truncate("\n".join(rows) + more)


register_tool(Tool(
    "Glob",
    "Find files by glob pattern (e.g. '**/*.cu', 'kernels/*_binding.cpp', '*.{cu,cpp}'). "
    "Returns paths relative to the workspace, sorted.",
    schema({
        "pattern": {"type": "string", "description": "Glob pattern, relative to path."},
        "path": {"type": "string", "description": "Directory to search (default: the workspace)."},
    }, ["pattern"]),
    glob_files))

register_tool(Tool(
    "Grep",
    "Search file contents with a regular expression (ripgrep-like). output_mode: "
    "'files_with_matches' (default: paths), 'content' (path:line:text, with optional context "
    "lines), 'count' (path:N).",
    schema({
        "pattern": {"type": "string", "description": "Regular expression."},
        "path": {"type": "string", "description": "File or directory to search (default: the workspace)."},
        "glob": {"type": "string", "description": "Only files matching this glob, e.g. '*.cu' or '*.{cu,cpp}'."},
        "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
        "case_insensitive": {"type": "boolean"},
        "context": {"type": "integer", "description": "Lines of context before and after each match (content mode)."},
        "before": {"type": "integer", "description": "Lines of context before each match."},
        "after": {"type": "integer", "description": "Lines of context after each match."},
        "head_limit": {"type": "integer", "description": "Show only the first N output lines."},
    }, ["pattern"]),
    grep))
