"""``cuda-agent solve`` and ``cuda-agent show`` (click commands; the lead registers them).

``solve TASK`` lays out K workspaces, runs K episodes in parallel threads (evaluator checks
are serialized so timings do not overlap), prints each attempt's verdict and where the best
solution is.  Without an LLM configured it says in one line which flags / env vars to set.
"""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ..cliopts import DEVICE, EXISTING, JSON, KERNELBENCH, NO_PROGRESS, REWARD, RULES, OneLineCommand, progress_on
from ..tasks import Task, TaskError
from ..sandbox.pool.evaluator import POOL_DB_ENV, evaluator_for
from ..sandbox.results import rank
from .llm import BackendConfigError, backend_names, make_backend
from .loop import EVAL_MAX_TURNS, Agent, AgentConfig, Budget, EpisodeResult


def _backend_options(backend: str, model: str | None, base_url: str | None, api_key: str | None,
                     temperature: float | None, max_tokens: int | None, script: str | None) -> dict[str, Any]:
    if backend in ("openai", "text"):
        return {"model": model, "base_url": base_url, "api_key": api_key, "temperature": temperature,
                "max_tokens": max_tokens}
    if backend == "hf":
        opts: dict[str, Any] = {"model": model}
        if temperature is not None:
            opts["temperature"] = temperature
        if max_tokens is not None:
            opts["max_new_tokens"] = max_tokens
        return opts
    if backend == "scripted":
        if not script:
            raise BackendConfigError("the scripted back-end needs --script FILE (a JSON list of assistant "
                                     "turns) or --script DIR (a solution directory to replay)")
        if Path(script).is_dir():
            from .llm.scripted import script_from_solution

            try:
                return {"steps": script_from_solution(script), "model": model or f"replay:{script}"}
            except FileNotFoundError as e:
                raise BackendConfigError(str(e)) from None
        try:
            steps = json.loads(Path(script).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise BackendConfigError(f"cannot read the script {script}: {e}") from None
        return {"steps": steps, "model": model or "scripted"}
    return {"model": model} if model else {}


def _default_out(task: Task) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", task.id).strip("_") or "task"
    return Path("runs") / "solve" / f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}"


def _progress_lines(on: bool):
    """One stderr line per tool call and check, with the time since the start (None: off)."""
    if not on:
        return None
    t0 = time.monotonic()
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            click.echo(f"[{time.monotonic() - t0:6.1f} s] {line}", err=True)
    return say


def _fmt(x: float | None, suffix: str = "x") -> str:
    return "-" if x is None else f"{x:.2f}{suffix}"


@click.command("solve", cls=OneLineCommand)
@click.argument("task")
@click.option("--model", default=None,
              help="model name (openai/text: served model; hf: local path). Env: CUDA_AGENT_MODEL.")
@click.option("--backend", type=click.Choice(backend_names()), default="openai", show_default=True,
              help="LLM back-end: openai (tool calls), text (ReAct text), hf (local transformers), "
                   "scripted (replays a script or a solution directory, no LLM).")
@click.option("--base-url", default=None, help="OpenAI-compatible server URL. Env: OPENAI_BASE_URL.")
@click.option("--api-key", default=None, help="API key. Env: OPENAI_API_KEY.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="output directory (default runs/solve/<task>-<time>).")
@click.option("--n", "n_attempts", type=click.IntRange(1, 256), default=1, show_default=True,
              help="attempts, run in parallel.")
@DEVICE
@click.option("--max-turns", type=click.IntRange(1), default=EVAL_MAX_TURNS, show_default=True,
              help="turns per attempt (one LLM reply and its tool calls each).")
@click.option("--context-tokens", type=click.IntRange(1000), default=128_000, show_default=True,
              help="context budget; the oldest tool outputs are shortened to stay inside it.")
@click.option("--wall-time", type=click.FloatRange(min=1), default=None, help="seconds per attempt.")
@RULES
@REWARD
@click.option("--temperature", type=click.FloatRange(min=0), default=None, help="sampling temperature.")
@click.option("--max-tokens", type=click.IntRange(1), default=None, help="max tokens per reply.")
@click.option("--script", type=EXISTING, default=None,
              help="scripted back-end: JSON list of turns, or a solution directory to replay.")
@KERNELBENCH
@click.option("--pool-db", type=click.Path(dir_okay=False), default=None,
              help="check through the GPU pool that `cuda-agent pool serve --db` serves (default: in process).")
@JSON
@NO_PROGRESS
def solve_command(task, model, backend, base_url, api_key, out_dir, n_attempts, device, max_turns,
                  context_tokens, wall_time, rules, reward_name, temperature, max_tokens, script,
                  kernelbench, pool_db, as_json, no_progress) -> None:
    """Run the agent on TASK end to end (a .py file, L1/12-style KernelBench ref, or FILE.jsonl#ID)."""
    from ..tasks import resolve

    try:
        t = resolve(task, kernelbench)
    except TaskError as e:
        raise click.UsageError(str(e)) from None
    try:
        opts = _backend_options(backend, model, base_url, api_key, temperature, max_tokens, script)
        first = make_backend(backend, **opts)
    except BackendConfigError as e:
        raise click.UsageError(str(e)) from None
    dev = device
    say = _progress_lines(progress_on(no_progress, as_json))
    out = Path(out_dir) if out_dir else _default_out(t)
    out.mkdir(parents=True, exist_ok=True)
    from ..sandbox.workspace import create_workspace

    evaluator = evaluator_for(pool_db, serial=True, device=dev, rules=rules, reward=reward_name)
    config = AgentConfig(budget=Budget(max_turns=max_turns, context_tokens=context_tokens, wall_time_s=wall_time),
                         device=dev, env={POOL_DB_ENV: str(Path(pool_db).resolve())} if pool_db else {})

    def attempt(k: int) -> EpisodeResult:
        be = first if (k == 0 or backend == "hf") else make_backend(backend, **opts)
        adir = out / f"attempt_{k}"
        ws = create_workspace(t, adir / "workspace", device=dev, overwrite=True)
        cfg = replace(config, progress=(lambda line: say(f"attempt {k}: {line}")) if say else None)
        return Agent(be, evaluator, cfg).run(t, ws, adir, traj_id=f"{out.name}-{k}")

    click.echo(f"solving {t.id} on {dev} with {backend}:{getattr(first, 'model', '')}, {n_attempts} attempt(s) -> {out}",
               err=as_json)
    with ThreadPoolExecutor(max_workers=n_attempts) as pool:
        futures = [pool.submit(attempt, k) for k in range(n_attempts)]
        results: list[EpisodeResult | BaseException] = []
        for f in futures:
            try:
                results.append(f.result())
            except Exception as e:  # an attempt that broke is reported, the others kept
                results.append(e)
    rows = []
    for k, r in enumerate(results):
        if isinstance(r, BaseException):
            rows.append({"attempt": k, "error": f"{type(r).__name__}: {r}"})
            continue
        tr = r.trajectory
        b = r.best
        rows.append({"attempt": k, "stop": tr.stop_reason, "turns": len(tr.turns), "reward": tr.reward,
                     "best_correct": bool(b and b.correct), "best_reward": tr.best_reward,
                     "speedup_eager": b.speedup_eager if b else None,
                     "speedup_compile": b.speedup_compile if b else None,
                     "best": str(r.best_dir) if r.best_dir else None,
                     "trajectory": str(out / f"attempt_{k}" / "trajectory.jsonl")})
    ok = [(r, k) for k, r in enumerate(results) if not isinstance(r, BaseException) and r.best is not None]
    overall = max(ok, key=lambda rk: rank(rk[0].best))[1] if ok else None  # type: ignore[arg-type]
    summary = {"task": t.id, "device": dev, "out": str(out), "attempts": rows,
               "best_attempt": overall, "best": rows[overall]["best"] if overall is not None else None}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if as_json:
        click.echo(json.dumps(summary))
        return
    for row in rows:
        if "error" in row:
            click.echo(f"attempt {row['attempt']}: failed: {row['error']}")
            continue
        click.echo(f"attempt {row['attempt']}: {row['stop']} after {row['turns']} turns; final reward "
                   f"{row['reward'] if row['reward'] is not None else '-'} ({dev}); best: "
                   f"{'correct' if row['best_correct'] else 'not correct'}, "
                   f"{_fmt(row['speedup_eager'])} vs eager, {_fmt(row['speedup_compile'])} vs torch.compile")
    if overall is None:
        click.echo("no solution was evaluated")
    else:
        click.echo(f"best solution: {out / f'attempt_{overall}' / 'best'} (attempt {overall}); "
                   f"trajectories under {out}")


@click.command("show", cls=OneLineCommand)
@click.argument("traj", type=EXISTING)
@click.option("--index", type=int, default=0, show_default=True,
              help="which trajectory of the file (of a solve run: which attempt).")
@click.option("--id", "traj_id", default=None, help="trajectory id instead of --index.")
@click.option("--full", is_flag=True, help="do not cut long messages.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None, help="write a static HTML page.")
def show_command(traj, index, traj_id, full, html_out) -> None:
    """Render a trajectory (a trajectory.jsonl, the directory holding it, or a solve run)."""
    from rich.console import Console

    from .show import load, render, to_html

    try:
        t = load(traj, index=index, traj_id=traj_id)
    except (OSError, ValueError) as e:
        raise click.UsageError(str(e)) from None
    if html_out:
        Path(html_out).write_text(to_html(t, full=True))
        click.echo(f"wrote {html_out}")
        return
    render(t, Console(), full=full)
