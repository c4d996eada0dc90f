"""The tool contract: a :class:`Tool` (name, JSON schema, function), the per-trajectory
:class:`ToolContext` (workspace root, read-set, shells), path confinement and output truncation.

A tool function raises :class:`ToolFailure` for anything the model did wrong; the
:class:`~cuda_agent.agent.tools.ToolSet` turns that (and any unexpected exception) into an
``Error: ...`` tool result, so no tool call can end an episode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ...registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from .shell import ShellManager


class ToolFailure(Exception):
    """The call cannot be carried out; the message goes back to the model verbatim."""


@dataclass
class ToolContext:
    """State shared by the tools of one trajectory."""

    root: Path
    """Workspace root: every path argument must resolve inside it."""
    read_set: dict[Path, int] = field(default_factory=dict)
    """Files read (or written) in this trajectory -> their ``st_mtime_ns`` at that time."""
    shells: "ShellManager | None" = None
    max_output_chars: int = 30_000
    """Tool results longer than this are cut in the middle, with a note."""
    bash_timeout_s: float = 120.0
    """Default per-command timeout of Bash."""
    bash_max_timeout_s: float = 600.0
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for the shells (e.g. ``CUDA_AGENT_DEVICE``)."""

    def resolve(self, path: Any, *, must_exist: bool = False, what: str = "path") -> Path:
        """Resolve a path argument (absolute, or relative to the root) inside the root.

        Symlinks are followed; anything that ends up outside the root is refused.
        """
        if not isinstance(path, str) or not path.strip():
            raise ToolFailure(f"{what} must be a non-empty string")
        p = Path(os.path.expanduser(path.strip()))
        if not p.is_absolute():
            p = self.root / p
        real = Path(os.path.realpath(p))
        root = Path(os.path.realpath(self.root))
        if real != root and root not in real.parents:
            raise ToolFailure(f"{path} is outside the workspace ({self.root}); "
                              f"only files under the workspace can be used")
        if must_exist and not real.exists():
            raise ToolFailure(f"{path} does not exist")
        return real

    def rel(self, p: Path) -> str:
        """``p`` relative to the root, for messages and listings."""
        try:
            r = p.relative_to(Path(os.path.realpath(self.root)))
            return str(r) if str(r) != "." else "."
        except ValueError:
            return str(p)

    def note_read(self, p: Path) -> None:
        try:
            self.read_set[p] = p.stat().st_mtime_ns
        except OSError:
            pass

    def truncate(self, text: str, limit: int | None = None) -> str:
        return truncate(text, limit or self.max_output_chars)


def truncate(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` (2/3 : 1/3) with a note of what was cut."""
    if len(text) <= limit:
        return text
    head = (limit * 2) // 3
    tail = limit - head
    cut = len(text) - head - tail
    cut_lines = text[head:len(text) - tail].count("\n")
    return (text[:head] + f"\n\n[... output truncated: {cut} characters ({cut_lines} lines) "
            f"omitted ...]\n\n" + text[len(text) - tail:])


ToolFn = Callable[..., str]


@dataclass(frozen=True)
class Tool:
    """One tool the model can call."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema (type object) of the arguments."""
    fn: ToolFn
    """``fn(ctx, **args) -> str``; raises :class:`ToolFailure` for bad calls."""

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description,
                             "parameters": self.parameters}}


_TOOLS: Registry = Registry("tool")


def register_tool(tool: Tool) -> Tool:
    """Add a tool to the registry used by default tool sets; a name taken by another tool is refused."""
    return _TOOLS.add(tool.name, tool)


def registered_tools() -> dict[str, Tool]:
    return dict(_TOOLS)


def schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}
