"""The ReAct loop: model -> tool calls -> results -> model, until it answers without a tool
call or a budget (turns, context tokens, wall time) runs out.

System prompt = the workspace's SKILL.md + the task (the reference ``model.py``).  When the
history outgrows the context budget, the oldest tool outputs are shortened first (the
trajectory keeps them whole and lists which were shortened).  Whenever the agent runs
``cuda-agent verify|profile|check`` in Bash, the workspace's ``model_new.py`` + ``kernels/``
are snapshotted and the evaluator checks the snapshot itself (what the agent's shell
printed is never trusted); at the end the final workspace is checked too, the reward is
the final verdict's, and the best snapshot (correct, then fastest) is kept in ``best/``.

``Agent.run`` -> ``step`` (budgets, ``query`` the model, ``execute`` its tool calls); a step
that ends the episode raises an :class:`EpisodeEnd` (finished, a limit, a back-end failure),
turned into the trajectory's ``stop_reason`` in ``run`` alone.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..sandbox.evaluator import Evaluator
from ..sandbox.results import CheckResult, rank
from ..tasks import Task
from .llm.base import Backend, BackendError, Reply
from .tools import ToolSet
from .trajectory import ToolRecord, Trajectory, Turn, append_jsonl

TRAIN_MAX_TURNS = 150
EVAL_MAX_TURNS = 200
CHECK_COMMAND = re.compile(r"\bcuda-agent\s+(verify|profile|check)\b")


@dataclass
class Budget:
    """When an episode stops (besides the model finishing)."""

    max_turns: int = TRAIN_MAX_TURNS
    context_tokens: int = 128_000
    wall_time_s: float | None = None
    keep_recent_tool_outputs: int = 4
    """Tool outputs of the last N tool messages are never shortened."""
    shortened_chars: int = 600
    """What is left of a shortened tool output (head and tail)."""


@dataclass
class AgentConfig:
    budget: Budget = field(default_factory=Budget)
    tool_names: list[str] | None = None
    bash_timeout_s: float = 300.0
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of the agent's shells."""
    device: str = "cuda"
    final_check: bool = True
    recheck_identical_final: bool = False
    """Re-check the final workspace even when a snapshot with the same content was checked."""
    progress: Callable[[str], None] | None = field(default=None, repr=False)
    """Told one line per tool call and per check as the episode runs (the CLI's progress)."""


def _brief(arguments: str, width: int = 60) -> str:
    """A tool call's arguments on one short line (progress output only)."""
    try:
        d = json.loads(arguments)
        text = d.get("command") or d.get("path") or d.get("pattern") or arguments if isinstance(d, dict) else arguments
    except ValueError:
        text = arguments
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def verdict_words(r: CheckResult) -> str:
    """A check in a few words: compiled, correct, speedups (no reward before verification)."""
    if not r.compiled:
        return "build failed"
    if not r.correct:
        return "compiled, not correct"
    sp = f", {r.speedup_eager:.2f}x vs eager" if r.speedup_eager else ""
    return f"correct{sp}" + (f", {r.speedup_compile:.2f}x vs torch.compile" if r.speedup_compile else "")


@dataclass
class EpisodeResult:
    trajectory: Trajectory
    final: CheckResult | None
    best: CheckResult | None
    best_dir: Path | None
    out_dir: Path | None

    @property
    def reward(self) -> float | None:
        return self.trajectory.reward


def system_prompt(task: Task, workspace: Path) -> str:
    skill = workspace / "SKILL.md"
    parts = [skill.read_text().strip()] if skill.is_file() else []
    parts.append(f"# Task {task.id}\n\nThe reference PyTorch module (model.py, read-only):\n\n"
                 f"```python\n{task.source.rstrip()}\n```")
    return "\n\n".join(parts)


def user_prompt(task: Task, workspace: Path, device: str) -> str:
    kernels = ("CUDA kernels (kernels/*.cu with extern \"C\" launchers)" if device == "cuda"
               else "C++ CPU kernels (kernels/*.cpp with extern \"C\" functions)")
    return (f"Your workspace is {workspace}. Write {kernels}, their bindings "
            f"(kernels/*_binding.cpp) and model_new.py (class ModelNew) so that ModelNew computes "
            f"the same outputs as Model, faster. Build and test with `cuda-agent compile`, "
            f"`cuda-agent verify` and `cuda-agent profile` in the workspace. When you are done, "
            f"reply with a short summary and no tool call.")


def snapshot_digest(workspace: Path) -> str:
    """Content hash of model_new.py + kernels/ (what a snapshot holds)."""
    h = hashlib.sha256()
    for p in _snapshot_files(workspace):
        h.update(str(p.relative_to(workspace)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _snapshot_files(workspace: Path) -> list[Path]:
    files = [workspace / "model_new.py"] if (workspace / "model_new.py").is_file() else []
    k = workspace / "kernels"
    if k.is_dir():
        files += sorted(p for p in k.rglob("*") if p.is_file() and not p.is_symlink()
                        and "__pycache__" not in p.parts)
    return files


def take_snapshot(workspace: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for p in _snapshot_files(workspace):
        target = dest / p.relative_to(workspace)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, target)
    return dest


def _shorten(text: str, keep: int) -> str:
    if len(text) <= keep:
        return text
    head, tail = keep * 2 // 3, keep // 3
    return (text[:head] + f"\n[... earlier tool output shortened to fit the context: "
            f"{len(text) - head - tail} characters omitted ...]\n" + text[len(text) - tail:])


class Agent:
    """Runs episodes of one back-end against one evaluator."""

    def __init__(self, backend: Backend, evaluator: Evaluator | None,
                 config: AgentConfig | None = None) -> None:
        self.backend = backend
        self.evaluator = evaluator
        self.config = config or AgentConfig()

    # -- context -----------------------------------------------------------------------
    def _view(self, messages: list[dict[str, Any]], shortened: set[int]) -> list[dict[str, Any]]:
        if not shortened:
            return messages
        keep = self.config.budget.shortened_chars
        view = []
        for i, m in enumerate(messages):
            if i in shortened:
                m = dict(m)
                m["content"] = _shorten(m.get("content") or "", keep)
            view.append(m)
        return view

    def _fit(self, messages: list[dict[str, Any]], shortened: set[int]) -> tuple[list[dict[str, Any]], int]:
        """The model's view of the history within the context budget (oldest tool outputs
        shortened first); returns (view, estimated tokens)."""
        b = self.config.budget
        view = self._view(messages, shortened)
        tokens = self.backend.count_tokens(view)
        if tokens <= b.context_tokens:
            return view, tokens
        tool_idx = [i for i, m in enumerate(messages) if m["role"] == "tool"]
        candidates = [i for i in tool_idx[:max(0, len(tool_idx) - b.keep_recent_tool_outputs)]
                      if i not in shortened and len(messages[i].get("content") or "") > b.shortened_chars]
        # shorten in chunks, oldest first, re-estimating after each chunk
        step = max(1, len(candidates) // 8)
        while candidates and tokens > b.context_tokens:
            for i in candidates[:step]:
                shortened.add(i)
            candidates = candidates[step:]
            view = self._view(messages, shortened)
            tokens = self.backend.count_tokens(view)
        return view, tokens

    # -- evaluation --------------------------------------------------------------------
    def _check(self, task: Task, workspace: Path, snap_root: Path, label: str,
               cache: dict[str, tuple[CheckResult, Path]], force: bool = False) -> tuple[CheckResult, Path] | None:
        if self.evaluator is None:
            return None
        digest = snapshot_digest(workspace)
        if digest in cache and not force:
            return cache[digest]
        snap = take_snapshot(workspace, snap_root / f"{label}-{digest}")
        try:
            res = self.evaluator.check(task, snap)
        except Exception as e:  # the evaluator must not lose the episode
            res = CheckResult.failed(task, f"evaluator failed: {type(e).__name__}: {e}",
                                     device=self.config.device, rules="?")
        (snap / "check.json").write_text(json.dumps(res.to_dict(), indent=1))
        cache[digest] = (res, snap)
        return res, snap

    # -- the episode -------------------------------------------------------------------
    def run(self, task: Task, workspace: str | Path, out_dir: str | Path | None = None,
            traj_id: str | None = None) -> EpisodeResult:
        """One episode: steps until one ends it (:class:`EpisodeEnd`, its reason written into
        the trajectory here), then the final check and the best snapshot."""
        ep = _Episode.open(self, task, workspace, out_dir, traj_id)
        try:
            while True:
                self.step(ep)
        except EpisodeEnd as end:
            ep.traj.stop_reason = end.reason
        finally:
            ep.tools.close()
        return self._conclude(ep)

    def step(self, ep: "_Episode") -> None:
        """One turn: the budgets, the model's reply, its tool calls (raises EpisodeEnd)."""
        b = self.config.budget
        if ep.turn_i >= b.max_turns:
            raise LimitReached("max_turns")
        if b.wall_time_s is not None and ep.elapsed() >= b.wall_time_s:
            raise LimitReached("wall_time")
        view, ctx_tokens = self._fit(ep.traj.messages, ep.shortened)
        if ctx_tokens > b.context_tokens:
            raise LimitReached("context")
        t0 = time.monotonic()
        reply = self.query(view, ep.traj.tools)
        t_llm = time.monotonic() - t0
        ep.traj.messages.append(reply.message())
        turn = Turn(index=ep.turn_i, llm_seconds=round(t_llm, 4), tool_seconds=0.0,
                    prompt_tokens=reply.usage.prompt_tokens,
                    completion_tokens=reply.usage.completion_tokens,
                    context_tokens=ctx_tokens, finish_reason=reply.finish_reason)
        ep.traj.turns.append(turn)
        ep.traj.prompt_tokens += reply.usage.prompt_tokens
        ep.traj.completion_tokens += reply.usage.completion_tokens
        ep.turn_i += 1
        if not reply.tool_calls:
            raise Finished("finished")
        self.execute(ep, turn, reply)

    def query(self, view: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        """The model's reply to ``view``; a back-end failure ends the episode."""
        try:
            return self.backend.complete(view, tools)
        except BackendError as e:
            raise BackendFailed(f"llm_error: {e}") from None
        except Exception as e:  # a back-end bug: keep the trajectory
            raise BackendFailed(f"llm_error: {type(e).__name__}: {e}") from None

    def execute(self, ep: "_Episode", turn: Turn, reply: Reply) -> None:
        """Run the reply's tool calls in order; a check command checks a snapshot afterwards."""
        cfg, b = self.config, self.config.budget
        wants_check = False
        for call in reply.tool_calls:
            if b.wall_time_s is not None:
                left = b.wall_time_s - ep.elapsed()
                ep.tools.ctx.bash_max_timeout_s = max(1.0, min(600.0, left))
            t1 = time.monotonic()
            result = ep.tools.call(call.name, call.arguments)
            dt = time.monotonic() - t1
            turn.tools.append(ToolRecord(id=call.id, name=call.name, arguments=call.arguments,
                                         seconds=round(dt, 4), result_chars=len(result),
                                         error=result.startswith("Error:")))
            turn.tool_seconds += dt
            if cfg.progress is not None:
                cfg.progress(f"turn {turn.index + 1}: {call.name} {_brief(call.arguments)} ({dt:.1f} s)")
            ep.traj.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name,
                                     "content": result})
            if call.name == "Bash" and CHECK_COMMAND.search(call.arguments):
                wants_check = True
        turn.tool_seconds = round(turn.tool_seconds, 4)
        if wants_check:
            got = self._check(ep.task, ep.ws, ep.snap_root, f"turn{turn.index:03d}", ep.cache)
            if got:
                turn.check, turn.snapshot = got[0].to_dict(), str(got[1])
                ep.checked.append(got)
                if cfg.progress is not None:
                    cfg.progress(f"turn {turn.index + 1}: snapshot checked: {verdict_words(got[0])}")

    def _conclude(self, ep: "_Episode") -> EpisodeResult:
        """The final check, the best snapshot (kept in ``best/``), the trajectory written."""
        cfg, traj, out = self.config, ep.traj, ep.out
        final: CheckResult | None = None
        if cfg.final_check and self.evaluator is not None:
            got = self._check(ep.task, ep.ws, ep.snap_root, "final", ep.cache, force=cfg.recheck_identical_final)
            if got:
                final = got[0]
                ep.checked.append(got)
                if cfg.progress is not None:
                    cfg.progress(f"final check: {verdict_words(final)}")
        best, best_dir = None, None
        if ep.checked:
            best, snap = max(ep.checked, key=lambda rs: rank(rs[0]))
            if out is not None:
                best_dir = out / "best"
                if best_dir.exists():
                    shutil.rmtree(best_dir)
                shutil.copytree(snap, best_dir)
            else:
                best_dir = snap
        traj.final = final.to_dict() if final else None
        traj.reward = final.reward if final else None
        traj.best = best.to_dict() if best else None
        traj.best_reward = best.reward if best else None
        traj.best_path = str(best_dir) if best_dir else None
        traj.shortened = sorted(ep.shortened)
        traj.wall_seconds = round(ep.elapsed(), 3)
        if out is not None:
            append_jsonl(out / "trajectory.jsonl", traj)
        return EpisodeResult(traj, final, best, best_dir, out)


class EpisodeEnd(Exception):
    """A step ended the episode; ``reason`` becomes the trajectory's ``stop_reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Finished(EpisodeEnd):
    """The model answered without a tool call."""


class LimitReached(EpisodeEnd):
    """A budget ran out: ``max_turns``, ``wall_time`` or ``context``."""


class BackendFailed(EpisodeEnd):
    """The LLM back-end failed (``llm_error: ...``)."""


@dataclass
class _Episode:
    """What one episode works on and collects."""

    task: Task
    ws: Path
    out: Path | None
    snap_root: Path
    tools: ToolSet
    traj: Trajectory
    t_start: float
    turn_i: int = 0
    shortened: set[int] = field(default_factory=set)
    cache: dict[str, tuple[CheckResult, Path]] = field(default_factory=dict)
    checked: list[tuple[CheckResult, Path]] = field(default_factory=list)

    @classmethod
    def open(cls, agent: Agent, task: Task, workspace: str | Path, out_dir: str | Path | None,
             traj_id: str | None) -> "_Episode":
        """The workspace's tools and a trajectory opened with the system and user prompts."""
        ws = Path(workspace).resolve()
        out = Path(out_dir).resolve() if out_dir else None
        snap_root = (out / "snapshots") if out else ws.parent / f".{ws.name}-snapshots"
        cfg = agent.config
        tools = ToolSet(ws, cfg.tool_names, env=cfg.env, bash_timeout_s=cfg.bash_timeout_s)
        traj = Trajectory(id=traj_id or secrets.token_hex(6), task_id=task.id, task_sha=task.sha,
                          model=str(getattr(agent.backend, "model", "")),
                          backend=str(getattr(agent.backend, "name", type(agent.backend).__name__)),
                          tools=tools.schemas(), workspace=str(ws),
                          config={"budget": asdict(cfg.budget), "device": cfg.device,
                                  "bash_timeout_s": cfg.bash_timeout_s})
        traj.messages = [{"role": "system", "content": system_prompt(task, ws)},
                         {"role": "user", "content": user_prompt(task, ws, cfg.device)}]
        return cls(task, ws, out, snap_root, tools, traj, time.monotonic())

    def elapsed(self) -> float:
        return time.monotonic() - self.t_start
