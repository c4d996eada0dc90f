"""``scripted`` back-end: predetermined assistant turns, for tests, demos and replays.

Each step is a string (a final answer), a dict ``{"content": ..., "tool_calls": [{"name":
..., "arguments": {...}}]}``, or a callable ``(messages) -> step`` that can look at the
tool results so far.  When the script is exhausted the back-end answers
``(script finished)`` with no tool call, which ends the episode.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from .base import Reply, ToolCall, Usage, approx_tokens, register_backend

Step = str | dict[str, Any] | Callable[[list[dict[str, Any]]], Any]


def _to_reply(step: Any) -> Reply:
    if isinstance(step, Reply):
        return step
    if isinstance(step, str):
        return Reply(content=step)
    if not isinstance(step, dict):
        raise TypeError(f"a scripted step must be a str, dict or callable, not {type(step).__name__}")
    calls = []
    for c in step.get("tool_calls", []):
        args = c.get("arguments", {})
        calls.append(ToolCall(name=c["name"], arguments=args if isinstance(args, str) else json.dumps(args)))
    return Reply(content=step.get("content", ""), tool_calls=calls)


@register_backend("scripted")
class Scripted:
    """Replays ``steps`` one per turn."""

    name = "scripted"

    def __init__(self, steps: Sequence[Step] = (), model: str = "scripted", **_: Any) -> None:
        self.steps = list(steps)
        self.model = model
        self._i = 0
        self._lock = threading.Lock()

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        with self._lock:
            i = self._i
            self._i += 1
        step: Any = self.steps[i] if i < len(self.steps) else "(script finished)"
        if callable(step):
            step = step(messages)
        reply = _to_reply(step)
        prompt = approx_tokens(messages)
        reply.usage = Usage(prompt_tokens=prompt,
                            completion_tokens=approx_tokens([reply.message()]))
        return reply

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return approx_tokens(messages)


def script_from_solution(solution_dir: str | Path) -> list[Step]:
    """A script that writes a known solution into the workspace like an agent would:
    Read model.py, Write each ``kernels/`` file, Read + Write model_new.py, then
    ``cuda-agent compile``, ``verify`` and ``profile``, and finish (demos, device smoke runs)."""
    d = Path(solution_dir)
    if not (d / "model_new.py").is_file():
        raise FileNotFoundError(f"{d} has no model_new.py (a solution directory holds model_new.py and kernels/)")

    def call(name: str, **args: Any) -> dict[str, Any]:
        return {"tool_calls": [{"name": name, "arguments": args}]}

    steps: list[Step] = [{"content": "First the reference.", **call("Read", file_path="model.py")}]
    kernels = sorted(p for p in (d / "kernels").rglob("*") if p.is_file()) if (d / "kernels").is_dir() else []
    for p in kernels:
        steps.append(call("Write", file_path=str(p.relative_to(d)), content=p.read_text()))
    steps += [call("Read", file_path="model_new.py"),
              call("Write", file_path="model_new.py", content=(d / "model_new.py").read_text()),
              call("Bash", command="cuda-agent compile"),
              call("Bash", command="cuda-agent verify"),
              call("Bash", command="cuda-agent profile"),
              f"Done: model_new.py uses the kernels in {', '.join(p.name for p in kernels) or '(none)'}."]
    return steps
