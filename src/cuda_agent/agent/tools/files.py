"""Read, Write, Edit and MultiEdit: file tools confined to the workspace.

Read numbers lines (``cat -n`` style), pages with offset/limit, refuses binary files and
remembers what was read; Write refuses to overwrite a file that was not read in this
trajectory (or that changed since); Edit replaces one exact, unique string (or every
occurrence with ``replace_all``); MultiEdit applies a list of edits to one file atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .base import Tool, ToolContext, ToolFailure, register_tool, schema

READ_DEFAULT_LINES = 2000
READ_MAX_LINE_CHARS = 2000
READ_MAX_BYTES = 10 * 1024 * 1024


def is_binary(data: bytes) -> bool:
    """NUL bytes, or not UTF-8, in the first 8 KiB."""
    head = data[:8192]
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start < len(head) - 4  # a multi-byte char cut at the boundary is fine
    return False


def _read_text(p: Path, ctx: ToolContext, path_arg: str) -> str:
    if p.is_dir():
        raise ToolFailure(f"{path_arg} is a directory; use Bash (ls) or Glob to list it")
    if not p.exists():
        raise ToolFailure(f"{path_arg} does not exist")
    size = p.stat().st_size
    if size > READ_MAX_BYTES:
        raise ToolFailure(f"{path_arg} is {size} bytes, too large to read; use Grep or Bash "
                          f"(head, sed -n) to look at parts of it")
    data = p.read_bytes()
    if is_binary(data):
        raise ToolFailure(f"{path_arg} is a binary file ({size} bytes); Read shows text files only")
    return data.decode("utf-8", errors="replace")


def _notebook_view(text: str, path_arg: str) -> str:
    try:
        nb = json.loads(text)
        cells = nb["cells"]
    except (ValueError, KeyError, TypeError):
        raise ToolFailure(f"{path_arg} is not a valid Jupyter notebook (JSON with 'cells')") from None
    parts = []
    for i, c in enumerate(cells):
        src = c.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        cid = c.get("id", "")
        parts.append(f"<cell index={i} id={cid!s} type={c.get('cell_type', '?')}>\n{src}\n</cell>")
    return "\n".join(parts) if parts else "(notebook has no cells)"


def read(ctx: ToolContext, file_path: str, offset: int | None = None, limit: int | None = None) -> str:
    p = ctx.resolve(file_path, what="file_path")
    text = _read_text(p, ctx, file_path)
    ctx.note_read(p)
    if p.suffix == ".ipynb":
        return ctx.truncate(_notebook_view(text, file_path))
    if text == "":
        return f"({file_path} is empty)"
    lines = text.splitlines()
    try:
        start = max(1, int(offset)) if offset is not None else 1
        n = int(limit) if limit is not None else READ_DEFAULT_LINES
    except (TypeError, ValueError):
        raise ToolFailure("offset and limit must be integers") from None
    if n <= 0:
        raise ToolFailure("limit must be positive")
    if start > len(lines):
        raise ToolFailure(f"offset {start} is past the end of {file_path} ({len(lines)} lines)")
    chunk = lines[start - 1:start - 1 + n]
    out = []
    long_lines = 0
    for i, line in enumerate(chunk, start):
        if len(line) > READ_MAX_LINE_CHARS:
            line = line[:READ_MAX_LINE_CHARS] + " [... line truncated]"
            long_lines += 1
        out.append(f"{i:6d}\t{line}")
    end = start - 1 + len(chunk)
    body = "\n".join(out)
    if end < len(lines) or start > 1:
        body += (f"\n[showing lines {start}-{end} of {len(lines)}; use offset/limit to read "
                 f"other parts]")
    return ctx.truncate(body)


def write(ctx: ToolContext, file_path: str, content: str) -> str:
    if not isinstance(content, str):
        raise ToolFailure("content must be a string")
    p = ctx.resolve(file_path, what="file_path")
    if p.is_dir():
        raise ToolFailure(f"{file_path} is a directory")
    existed = p.exists()
    if existed:
        seen = ctx.read_set.get(p)
        if seen is None:
            raise ToolFailure(f"{file_path} exists and was not read in this session; Read it "
                              f"before overwriting it (or use Edit)")
        if p.stat().st_mtime_ns != seen:
            raise ToolFailure(f"{file_path} changed since it was last read; Read it again before "
                              f"overwriting it")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(content)
    ctx.note_read(p)
    n = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return f"{'Overwrote' if existed else 'Created'} {ctx.rel(p)} ({n} lines, {len(content.encode())} bytes)."


def _apply(text: str, old: Any, new: Any, replace_all: bool, label: str) -> tuple[str, int, int]:
    """Apply one edit to ``text``; returns (new text, replacements, char offset of the first)."""
    if not isinstance(old, str) or not isinstance(new, str):
        raise ToolFailure(f"{label}old_string and new_string must be strings")
    if old == "":
        raise ToolFailure(f"{label}old_string is empty; give the exact text to replace "
                          f"(use Write to create a file)")
    if old == new:
        raise ToolFailure(f"{label}old_string and new_string are identical; nothing to change")
    count = text.count(old)
    if count == 0:
        hint = ""
        first = old.strip().splitlines()[0].strip() if old.strip() else ""
        if first:
            near = [i for i, line in enumerate(text.splitlines(), 1) if first in line]
            if near:
                hint = (f" (its first line appears at line{'s' if len(near) > 1 else ''} "
                        f"{', '.join(map(str, near[:5]))}: check whitespace and the following lines)")
        raise ToolFailure(f"{label}old_string was not found in the file{hint}; it must match exactly, "
                          f"including indentation")
    if count > 1 and not replace_all:
        lines = []
        pos = text.find(old)
        while pos != -1 and len(lines) < 10:
            lines.append(text.count("\n", 0, pos) + 1)
            pos = text.find(old, pos + 1)
        raise ToolFailure(f"{label}old_string occurs {count} times (lines {', '.join(map(str, lines))}); "
                          f"add surrounding context to make it unique, or set replace_all")
    first = text.find(old)
    return (text.replace(old, new) if replace_all else text.replace(old, new, 1)), count if replace_all else 1, first


def _snippet(text: str, offset: int, n_context: int = 3, max_lines: int = 20) -> str:
    lines = text.splitlines()
    line = text.count("\n", 0, offset)
    lo = max(0, line - n_context)
    hi = min(len(lines), line + max_lines)
    return "\n".join(f"{i + 1:6d}\t{lines[i]}" for i in range(lo, hi))


def _load_for_edit(ctx: ToolContext, file_path: str) -> tuple[Path, str]:
    p = ctx.resolve(file_path, what="file_path")
    if not p.exists():
        raise ToolFailure(f"{file_path} does not exist (use Write to create a file)")
    text = _read_text(p, ctx, file_path)
    if p.suffix == ".ipynb":
        raise ToolFailure(f"{file_path} is a notebook; use NotebookEdit")
    return p, text


def edit(ctx: ToolContext, file_path: str, old_string: str, new_string: str,
         replace_all: bool = False) -> str:
    p, text = _load_for_edit(ctx, file_path)
    new_text, n, at = _apply(text, old_string, new_string, bool(replace_all), "")
    p.write_text(new_text)
    ctx.note_read(p)
    return (f"Edited {ctx.rel(p)}: {n} replacement{'s' if n != 1 else ''}. Around the "
            f"{'first ' if n > 1 else ''}change:\n{_snippet(new_text, at)}")


def multi_edit(ctx: ToolContext, file_path: str, edits: list[dict[str, Any]]) -> str:
    if not isinstance(edits, list) or not edits:
        raise ToolFailure("edits must be a non-empty list of {old_string, new_string[, replace_all]}")
    p, text = _load_for_edit(ctx, file_path)
    total = 0
    for i, e in enumerate(edits, 1):
        if not isinstance(e, dict):
            raise ToolFailure(f"edit {i} must be an object with old_string and new_string; "
                              f"no edit was applied")
        try:
            text, n, _ = _apply(text, e.get("old_string"), e.get("new_string"),
                                bool(e.get("replace_all", False)), f"edit {i} of {len(edits)}: ")
        except ToolFailure as err:
            raise ToolFailure(f"{err}. No edit was applied (edits are all-or-nothing).") from None
        total += n
    p.write_text(text)
    ctx.note_read(p)
    return f"Applied {len(edits)} edits ({total} replacements) to {ctx.rel(p)}."


_EDIT_PROPS = {
    "old_string": {"type": "string", "description": "Exact text to replace (must be unique unless replace_all)."},
    "new_string": {"type": "string", "description": "Replacement text."},
    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
}

register_tool(Tool(
    "Read",
    "Read a text file of the workspace with line numbers (cat -n format). Reads up to 2000 "
    "lines from offset (1-based); long lines are cut. Notebooks are shown cell by cell.",
    schema({
        "file_path": {"type": "string", "description": "Path, absolute or relative to the workspace."},
        "offset": {"type": "integer", "description": "First line to read (1-based)."},
        "limit": {"type": "integer", "description": "Number of lines to read."},
    }, ["file_path"]),
    read))

register_tool(Tool(
    "Write",
    "Write a file (creating parent directories). An existing file must have been Read in this "
    "session before it can be overwritten.",
    schema({
        "file_path": {"type": "string", "description": "Path, absolute or relative to the workspace."},
        "content": {"type": "string", "description": "The full content of the file."},
    }, ["file_path", "content"]),
    write))

register_tool(Tool(
    "Edit",
    "Replace an exact string in a file. old_string must occur exactly once unless replace_all "
    "is set; the match is exact, including whitespace.",
    schema({"file_path": {"type": "string", "description": "Path of the file to edit."}, **_EDIT_PROPS},
           ["file_path", "old_string", "new_string"]),
    edit))

register_tool(Tool(
    "MultiEdit",
    "Apply several exact-string edits to one file, in order, atomically: if any edit fails, "
    "none is applied. Each edit sees the result of the previous ones.",
    schema({
        "file_path": {"type": "string", "description": "Path of the file to edit."},
        "edits": {"type": "array", "minItems": 1,
                  "items": {"type": "object", "properties": _EDIT_PROPS,
                            "required": ["old_string", "new_string"], "additionalProperties": False}},
    }, ["file_path", "edits"]),
    multi_edit))
