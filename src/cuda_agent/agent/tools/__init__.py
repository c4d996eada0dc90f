"""The agent's ten tools and :class:`ToolSet`, the per-trajectory object that runs them.

Tool families live in one module each (``shell``: Bash/BashOutput/KillBash, ``files``:
Read/Write/Edit/MultiEdit, ``search``: Glob/Grep, ``notebook``: NotebookEdit) and register
themselves; users add tools with :func:`register_tool`.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any, Iterable

from . import files, notebook, search, shell  # noqa: F401  (registration)
from .base import Tool, ToolContext, ToolFailure, register_tool, registered_tools, truncate
from .shell import ShellManager

TOOL_NAMES = ("Bash", "BashOutput", "KillBash", "Read", "Write", "Edit", "MultiEdit", "Glob",
              "Grep", "NotebookEdit")


class ToolSet:
    """The tools of one trajectory and their state (read-set, shells).

    ``call(name, args_json)`` never raises: bad JSON, unknown tools, bad arguments and
    failures inside a tool all come back as an ``Error: ...`` string for the model.
    """

    def __init__(self, root: str | Path, names: Iterable[str] | None = None, *,
                 env: dict[str, str] | None = None, max_output_chars: int = 30_000,
                 bash_timeout_s: float = 120.0) -> None:
        root = Path(root).resolve()
        if not root.is_dir():
            raise NotADirectoryError(f"workspace root {root} is not a directory")
        all_tools = registered_tools()
        names = list(names) if names is not None else list(TOOL_NAMES)
        unknown = [n for n in names if n not in all_tools]
        if unknown:
            raise KeyError(f"unknown tools {unknown}; known: {', '.join(sorted(all_tools))}")
        self.tools: dict[str, Tool] = {n: all_tools[n] for n in names}
        self.ctx = ToolContext(root=root, env=dict(env or {}), max_output_chars=max_output_chars,
                               bash_timeout_s=bash_timeout_s)

    @property
    def root(self) -> Path:
        return self.ctx.root

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI ``tools`` list."""
        return [t.schema() for t in self.tools.values()]

    def call(self, name: str, args: str | dict[str, Any] | None) -> str:
        """Run tool ``name`` with JSON-encoded (or already decoded) arguments."""
        tool = self.tools.get(name)
        if tool is None:
            return f"Error: unknown tool {name!r}; available tools: {', '.join(self.tools)}"
        if args is None or args == "":
            parsed: Any = {}
        elif isinstance(args, str):
            try:
                parsed = json.loads(args)
            except json.JSONDecodeError as e:
                return f"Error: the arguments of {name} are not valid JSON ({e.msg} at char {e.pos})"
        else:
            parsed = args
        if not isinstance(parsed, dict):
            return f"Error: the arguments of {name} must be a JSON object"
        props = tool.parameters.get("properties", {})
        extra = [k for k in parsed if k not in props]
        if extra:
            return (f"Error: {name} got unknown argument{'s' if len(extra) > 1 else ''} "
                    f"{', '.join(extra)}; it takes {', '.join(props)}")
        missing = [k for k in tool.parameters.get("required", []) if k not in parsed]
        if missing:
            return f"Error: {name} needs the argument{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
        try:
            return tool.fn(self.ctx, **parsed)
        except ToolFailure as e:
            return f"Error: {e}"
        except Exception as e:  # a bug or an OS error: report, never end the episode
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            return f"Error: {name} failed: {tb}"

    def close(self) -> None:
        """Kill every shell's process group."""
        if self.ctx.shells is not None:
            self.ctx.shells.close()
            self.ctx.shells = None

    def __enter__(self) -> "ToolSet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["Tool", "ToolContext", "ToolFailure", "ToolSet", "ShellManager", "TOOL_NAMES",
           "register_tool", "registered_tools", "truncate"]
