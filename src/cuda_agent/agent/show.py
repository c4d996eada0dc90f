"""Render a trajectory readably: in the terminal with rich, or as a static HTML page.

Shows a header (task, model, stop reason, tokens, reward, best solution), then each turn:
the assistant's text, its tool calls (code arguments syntax-highlighted), the tool results
(cut to a few lines unless ``full``) and the evaluator's verdict on that turn's snapshot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .trajectory import Trajectory, read_jsonl

_LEXERS = {".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".h": "cpp", ".py": "python", ".md": "markdown"}


def load(path: str | Path, index: int = 0, traj_id: str | None = None) -> Trajectory:
    """One trajectory from a JSONL file, a directory holding trajectory.jsonl, or a
    ``cuda-agent solve`` run (its attempts' trajectories, in attempt order)."""
    p = Path(path)
    files = [p]
    if p.is_dir():
        files = [p / "trajectory.jsonl"] if (p / "trajectory.jsonl").is_file() else sorted(
            p.glob("attempt_*/trajectory.jsonl"), key=lambda f: int(f.parent.name.split("_")[1]))
        if not files:
            raise FileNotFoundError(f"no trajectory.jsonl in {p} (nor attempt_*/trajectory.jsonl of a solve run)")
    elif not p.is_file():
        raise FileNotFoundError(f"no trajectory file at {p}")
    trajs = [t for f in files for t in read_jsonl(f)]
    p = files[0] if len(files) == 1 else p
    if not trajs:
        raise ValueError(f"{p} holds no trajectory")
    if traj_id is not None:
        for t in trajs:
            if t.id == traj_id:
                return t
        raise ValueError(f"no trajectory with id {traj_id} in {p} (ids: {', '.join(t.id for t in trajs)})")
    if not -len(trajs) <= index < len(trajs):
        raise ValueError(f"{p} holds {len(trajs)} trajectories; index {index} is out of range")
    return trajs[index]


def _clip(text: str, max_lines: int | None) -> str:
    if max_lines is None:
        return text
    lines = text.splitlines()
    if len(lines) <= max_lines:
        return text
    keep = max(1, max_lines - 2)
    return "\n".join(lines[:keep] + [f"... ({len(lines) - keep - 1} more lines) ...", lines[-1]])


def _verdict_line(c: dict[str, Any] | None) -> str:
    if not c:
        return "no evaluation"
    parts = [f"compiled={'yes' if c.get('compiled') else 'no'}", f"correct={'yes' if c.get('correct') else 'no'}"]
    if c.get("speedup_eager") is not None:
        parts.append(f"speedup vs eager {c['speedup_eager']:.2f}x")
    if c.get("speedup_compile") is not None:
        parts.append(f"vs compile {c['speedup_compile']:.2f}x")
    if c.get("reward") is not None:
        parts.append(f"reward {c['reward']:g}")
    if c.get("error"):
        parts.append(f"error: {c['error'].splitlines()[0][:160]}")
    return ", ".join(parts)


def _call_renderable(call: dict[str, Any], max_lines: int | None):
    f = call["function"]
    try:
        args = json.loads(f.get("arguments") or "{}")
    except json.JSONDecodeError:
        return Text(f"{f['name']}({f.get('arguments')})  [invalid JSON]", style="red")
    if not isinstance(args, dict):
        return Text(f"{f['name']}({args!r})")
    code_key = next((k for k in ("content", "new_source", "new_string", "command") if k in args), None)
    head = {k: v for k, v in args.items() if k != code_key}
    title = Text.assemble((f["name"], "bold magenta"), " ", (json.dumps(head) if head else "", "dim"))
    if code_key is None:
        return title
    path = str(args.get("file_path") or args.get("notebook_path") or "")
    lexer = "bash" if code_key == "command" else _LEXERS.get(Path(path).suffix, "text")
    return Group(title, Syntax(_clip(str(args[code_key]), max_lines), lexer, theme="ansi_dark",
                               word_wrap=True))


def render(traj: Trajectory, console: Console, full: bool = False, max_lines: int = 12) -> None:
    ml = None if full else max_lines
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row("task", f"{traj.task_id} (sha {traj.task_sha})")
    t.add_row("model", f"{traj.model} via {traj.backend}")
    t.add_row("stopped", f"{traj.stop_reason} after {len(traj.turns)} turns, {traj.wall_seconds:.1f} s")
    t.add_row("tokens", f"{traj.prompt_tokens} prompt, {traj.completion_tokens} completion")
    t.add_row("final", escape(_verdict_line(traj.final)))
    t.add_row("best", escape(_verdict_line(traj.best)) + (f"\n{traj.best_path}" if traj.best_path else ""))
    t.add_row("reward", "-" if traj.reward is None else f"{traj.reward:g}")
    console.print(Panel(t, title=f"trajectory {traj.id}", border_style="cyan"))
    turns = {i: tr for i, tr in enumerate(traj.turns)}
    turn_i = -1
    for m in traj.messages:
        role = m["role"]
        if role == "system":
            console.print(Panel(escape(_clip(m.get("content") or "", 6 if not full else None)),
                                title="system", border_style="grey50"))
        elif role == "user":
            console.print(Panel(escape(_clip(m.get("content") or "", ml)), title="user", border_style="blue"))
        elif role == "assistant":
            turn_i += 1
            tr = turns.get(turn_i)
            sub = (f"{tr.llm_seconds:.1f} s, {tr.completion_tokens} tokens" if tr else "")
            items: list[Any] = []
            if m.get("reasoning_content"):
                items.append(Text(_clip(m["reasoning_content"], ml), style="italic dim"))
            if m.get("content"):
                items.append(Text(m["content"]))
            items += [_call_renderable(c, ml) for c in m.get("tool_calls") or []]
            console.print(Panel(Group(*items) if items else Text("(empty)"), title=f"assistant · turn {turn_i}",
                                subtitle=sub, border_style="green"))
        elif role == "tool":
            content = m.get("content") or ""
            style = "red" if content.startswith("Error:") else "yellow"
            console.print(Panel(escape(_clip(content, ml)), title=f"{m.get('name', 'tool')} result",
                                border_style=style))
            tr = turns.get(turn_i)
            # the verdict goes after the last tool result of its turn
            if tr and tr.check and m is _last_tool_message(traj.messages, turn_i):
                console.print(Panel(escape(_verdict_line(tr.check)), title="evaluator", border_style="magenta"))


def _last_tool_message(messages: list[dict[str, Any]], turn_i: int) -> dict[str, Any] | None:
    n, last = -1, None
    for m in messages:
        if m["role"] == "assistant":
            n += 1
        elif m["role"] == "tool" and n == turn_i:
            last = m
    return last


def to_html(traj: Trajectory, full: bool = True) -> str:
    import io

    console = Console(record=True, width=120, file=io.StringIO(), force_terminal=True)
    render(traj, console, full=full)
    return console.export_html(inline_styles=True)
