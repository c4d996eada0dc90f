"""``cuda-agent train``: prepare (tasks -> verl parquet), rft (trajectories -> SFT parquet),
stage N (print or run the exact verl command of a stage)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import click

from ..cliopts import JSON, REWARD, RULES, OneLineGroup, device_option
from .presets import PRESETS


def _rows(dataset: Path):
    """Rows of a JSONL/parquet file, a synth output directory, or a ``datasets`` directory
    written by ``save_to_disk``."""
    from ..tasks import read_rows

    if dataset.is_dir():
        if (dataset / "dataset_info.json").is_file() or (dataset / "dataset_dict.json").is_file():
            import datasets

            ds = datasets.load_from_disk(str(dataset))
            if isinstance(ds, datasets.DatasetDict):
                ds = ds["train"] if "train" in ds else next(iter(ds.values()))
            return iter(ds)
        found = [dataset / n for n in ("tasks.parquet", "tasks.jsonl") if (dataset / n).is_file()]
        if not found:
            raise click.UsageError(f"{dataset} holds no tasks.parquet or tasks.jsonl (a synth output directory "
                                   f"does) and is not a saved `datasets` data set")
        dataset = found[0]
    return read_rows(dataset)


def read_tasks(dataset: Path, source_column: str, id_column: str | None, limit: int | None):
    """Tasks of a data set (see :func:`_rows`); bad rows are skipped and counted, never fatal."""
    from ..tasks import TaskError, task_from_source

    tasks, skipped = [], []
    try:
        for i, row in enumerate(_rows(dataset)):
            if limit is not None and len(tasks) >= limit:
                break
            if source_column not in row:
                skipped.append(f"row {i}: no column {source_column!r}")
                continue
            tid = str(row.get(id_column) if id_column and row.get(id_column) is not None
                      else row.get("task_id", row.get("id", i)))
            meta = {k: v for k, v in row.items()
                    if k not in (source_column, id_column, "id", "task_id") and isinstance(v, (str, int, float, bool))}
            try:
                tasks.append(task_from_source(row[source_column], id=tid, **meta))
            except TaskError as e:
                skipped.append(f"row {i} ({tid}): {e}")
    except TaskError as e:
        raise click.UsageError(str(e)) from None
    return tasks, skipped


@click.group("train", cls=OneLineGroup)
def train_group() -> None:
    """Train on verl with the paper's four stages (docs/train.md)."""


@train_group.command("prepare")
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="output directory.")
@click.option("--source-column", default="code", show_default=True, help="column with the task source.")
@click.option("--id-column", default="task_id", show_default=True, help="column with the task id.")
@device_option(local=False, default="cuda", help="device the rewards will be measured on (the training nodes').")
@RULES
@REWARD
@click.option("--split", default="train", show_default=True, help="file name prefix.")
@click.option("--limit", type=click.IntRange(1), default=None, help="at most this many tasks.")
@JSON
def prepare_command(dataset, out_dir, source_column, id_column, device, rules, reward_name, split, limit, as_json):
    """Tasks (a synth dataset: JSONL/parquet, its directory, or a saved `datasets` directory)
    -> verl parquet for stage 1 (single turn) and stages 3-4 (agentic)."""
    from .data import JudgeSpec, prepare

    if not dataset.exists():
        raise click.UsageError(f"dataset not found: {dataset}")
    tasks, skipped = read_tasks(dataset, source_column, id_column, limit)
    if not tasks:
        raise click.UsageError(f"no valid task in {dataset}" + (f" ({skipped[0]})" if skipped else ""))
    p = prepare(tasks, out_dir, JudgeSpec(device=device, rules=rules, reward=reward_name), split)
    if as_json:
        click.echo(json.dumps({"tasks": p.n_tasks, "skipped": skipped, "single_turn": str(p.single_turn),
                               "agentic": str(p.agentic)}))
        return
    click.echo(f"{p.n_tasks} tasks ({device}, rules {rules}, reward {reward_name})")
    click.echo(f"stage 1     {p.single_turn}")
    click.echo(f"stages 3-4  {p.agentic}")
    if skipped:
        click.echo(f"skipped {len(skipped)} row(s): " + "; ".join(skipped[:3]) + (" ..." if len(skipped) > 3 else ""))


@train_group.command("rft")
@click.argument("trajectories", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="output parquet file.")
@click.option("--min-reward", type=float, default=0.0, show_default=True, help="keep reward > this.")
@click.option("--reward-field", type=click.Choice(["reward", "best_reward"]), default="reward", show_default=True,
              help="reward: the final workspace's verdict; best_reward: the best checked snapshot's.")
@JSON
def rft_command(trajectories, out, min_reward, reward_field, as_json):
    """Trajectory JSONL files (or directories of them) -> SFT parquet of the kept ones (stage 2)."""
    from .rft import build_rft

    try:
        _, rep = build_rft(trajectories, out, min_reward=min_reward, reward_field=reward_field)
    except FileNotFoundError as e:
        raise click.UsageError(str(e)) from None
    click.echo(json.dumps(asdict(rep)) if as_json else rep.summary())
    if rep.kept == 0:
        sys.exit(1)


@train_group.command("stage", context_settings={"ignore_unknown_options": True})
@click.argument("number", type=click.IntRange(1, 4))
@click.option("--model", required=True, help="model path: base (1), stage-1 actor (2), RFT model (3, 4).")
@click.option("--data", "data", multiple=True, required=True, type=click.Path(path_type=Path),
              help="training parquet (repeatable).")
@click.option("--gpus-per-node", "gpus", type=click.IntRange(1), default=8, show_default=True,
              help="GPUs per node (a count; --gpus elsewhere lists GPU ids).")
@click.option("--nnodes", type=click.IntRange(1), default=1, show_default=True, help="nodes.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None, help="checkpoint directory.")
@click.option("--resume-from", default=None, help="stage 4: the stage-3 checkpoint, .../global_step_N.")
@click.option("--warmup-steps", type=click.IntRange(1), default=None, help="stage 3: value-pretraining steps.")
@click.option("--steps", type=click.IntRange(1), default=None, help="stage 4: agentic steps after the resumed ones.")
@click.option("--rollout", type=click.Choice(["vllm", "sglang", "hf"]), default="vllm", show_default=True,
              help="PPO stages (1, 3, 4): rollout backend; hf = transformers generate (one GPU, no vLLM).")
@click.option("--agent-loop", "agent_loop", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="stages 3-4: agent-loop registration YAML (default: the package's configs/agent_loop.yaml).")
@click.option("--dry-run", is_flag=True, help="print the command, do not run it.")
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def stage_command(number, model, data, gpus, nnodes, out_dir, resume_from, warmup_steps, steps, rollout, agent_loop,
                  dry_run, overrides):
    """Print (--dry-run) or run the verl command of stage NUMBER; trailing key=value
    arguments are passed to verl as overrides."""
    from .stages import STAGES, LaunchSpec, StageError, command, rollout_env

    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise click.UsageError(f"extra arguments must be verl overrides key=value, not {' '.join(bad)}")
    missing = [str(d) for d in data if not d.is_file()] + ([str(agent_loop)] if agent_loop and not agent_loop.is_file() else [])
    if missing and not dry_run:
        raise click.UsageError(f"file not found: {', '.join(missing)}")
    spec = LaunchSpec(stage=number, model=model, data=[str(d) for d in data], gpus=gpus, nnodes=nnodes,
                      out_dir=str(out_dir) if out_dir else None, resume_from=resume_from,
                      warmup_steps=warmup_steps, steps=steps, rollout=rollout,
                      agent_loop=str(agent_loop) if agent_loop else None, overrides=list(overrides))
    try:
        argv = command(spec)
    except StageError as e:
        raise click.UsageError(str(e)) from None
    env = rollout_env(spec)
    click.echo(f"# stage {number}: {STAGES[number].what}")
    click.echo(shlex.join([f"{k}={v}" for k, v in env.items()] + argv))
    if dry_run:
        return
    if importlib.util.find_spec("verl") is None:
        raise click.UsageError("verl is not installed: pip install 'cuda-agent[train]'")
    sys.exit(subprocess.call(argv, env={**os.environ, **env}))


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@train_group.command("chain")
@click.option("--preset", type=click.Choice(list(PRESETS)), default="tiny", show_default=True,
              help="model and run sizes (train/presets.py).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="run directory.")
@device_option(local=False, default="cuda", help="device of the evaluator and the trainer.")
@click.option("--rollout", type=click.Choice(["hf", "vllm", "sglang"]), default="hf", show_default=True,
              help="rollout backend of the PPO stages.")
@click.option("--stages", default="1,2,3,4", show_default=True,
              help="which stages to run after the warm start (comma list; 0 = warm start only).")
@click.option("--stage-timeout", type=click.IntRange(30), default=600, show_default=True,
              help="seconds each stage may run.")
@click.option("--time-limit", type=click.IntRange(60), default=None,
              help="seconds for the whole chain: a stage that would not fit is not started (run again to continue).")
@click.option("--copy-to", type=click.Path(path_type=Path), default=None,
              help="also copy the summary, logs, metrics and plots (small files) here.")
def chain_command(preset, out_dir, device, rollout, stages, stage_timeout, time_limit, copy_to):
    """Warm start a tiny model on scripted right and wrong solutions, then run stages 1-4 on
    verl on one GPU (docs/training.md); summary.json and plots/ in the run directory."""
    from .chain import Chain, copy_plots

    try:
        picked = tuple(int(s) for s in stages.split(",") if s.strip())
    except ValueError:
        raise click.UsageError(f"--stages takes a comma list of 0-4, not {stages!r}") from None
    if any(s not in range(5) for s in picked):
        raise click.UsageError(f"--stages takes a comma list of 0-4, not {stages!r}")
    if rollout == "hf" and any(s in picked for s in (1, 3, 4)) and importlib.util.find_spec("verl") is None:
        raise click.UsageError("verl is not installed: pip install 'cuda-agent[train]'")
    chain = Chain(out_dir, PRESETS[preset], device=device, rollout=rollout, stage_timeout_s=stage_timeout,
                  time_limit_s=time_limit, echo=click.echo)
    # a SIGTERM (e.g. `timeout`) unwinds like Ctrl-C: the running stage's process group is ended
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        s = chain.run(tuple(x for x in picked if x))
    finally:
        if copy_to:
            copy_plots(chain.out, copy_to)
    failed = [r for r in s["stages"] if r["rc"] not in (0, None)]
    click.echo(f"summary: {chain.out / 'summary.json'}; plots: {chain.out / 'plots'}")
    sys.exit(1 if failed else 0)
