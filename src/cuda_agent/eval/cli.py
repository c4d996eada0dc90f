"""``cuda-agent eval SOLUTIONS --out DIR``: check a solutions tree (or agent runs) on KernelBench.

Selects the problems (suite.py), finds each one's solution (solutions.py), checks them
(run.py, resumable), computes the metrics (metrics.py) and writes the report (report.py).
Bad input ends in one ``Error:`` line; a solution that fails is a failed row.
"""

from __future__ import annotations

from pathlib import Path

import click

from .. import reward as rewards


def _device(device: str | None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.UsageError(f"--gpus takes GPU ids like 0,1 (got {text!r})") from None
    if not ids:
        raise click.UsageError("--gpus is empty")
    return ids


def _line(row, reused: bool) -> str:
    sp = ""
    if row.correct and row.speedup_compile:
        sp = f"  {row.speedup_eager or 0:.2f}x eager, {row.speedup_compile:.2f}x compile"
    elif row.correct and row.speedup_eager:
        sp = f"  {row.speedup_eager:.2f}x eager"
    err = f"  ({row.error[:100]})" if row.error and not row.correct else ""
    return f"{row.label:<8} {row.verdict:<12}{sp}{err}{'  [from an earlier run]' if reused else ''}"


@click.command("eval")
@click.argument("solutions", type=click.Path())
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="output directory: results.jsonl (resumable), metrics.json, report.md, plots.")
@click.option("--kernelbench", type=click.Path(), default=None, envvar="CUDA_AGENT_KERNELBENCH",
              help="KernelBench dataset (JSONL/parquet or a clone). Env: CUDA_AGENT_KERNELBENCH.")
@click.option("--levels", default="1,2,3", show_default=True, help="levels to evaluate, e.g. 1,2.")
@click.option("--ids", default=None, help="only these problems: 12,19 (every selected level) or L1/12,L2/5.")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None, help="default: cuda when available.")
@click.option("--rules", type=click.Choice(["strict", "kernelbench"]), default="strict", show_default=True,
              help="strict: no torch compute in forward; kernelbench: torch ops allowed.")
@click.option("--reward", "reward_name", default="paper", show_default=True,
              help=f"reward scheme recorded per row ({', '.join(rewards.names())}).")
@click.option("--workers", type=click.IntRange(1, 512), default=1, show_default=True,
              help="parallel checks through the pool (CPU slots, or GPUs on cuda); 1 checks one by one here.")
@click.option("--gpus", default=None, help="GPU ids for the pool, e.g. 0,1 (cuda).")
@click.option("--no-timing", is_flag=True, help="build and verify only: no speedups.")
@click.option("--n-sets", type=click.IntRange(1, 100), default=5, show_default=True,
              help="random input sets for verification.")
@click.option("--all-snapshots", is_flag=True,
              help="agent runs: re-check every snapshot of each trajectory, not only the one it kept as best.")
@click.option("--no-progress", is_flag=True, help="no progress bar (one line per problem).")
def eval_command(solutions, out_dir, kernelbench, levels, ids, device, rules, reward_name, workers, gpus,
                 no_timing, n_sets, all_snapshots, no_progress) -> None:
    """Evaluate SOLUTIONS on KernelBench with the paper's metrics and write a report to --out.

    SOLUTIONS holds L<level>/<problem_id>/ workspaces (model_new.py [+ kernels/]) or
    L<level>/<problem_id>.py files, and/or agent runs (cuda-agent solve --out directories):
    each trajectory's best snapshot is re-checked.  A problem without a solution counts as a
    failure.  Running the same command again resumes: finished problems are not re-checked.
    """
    from . import metrics as metrics_mod
    from . import report
    from .run import EvalOptions, run
    from .solutions import SolutionsError, find
    from ..tasks import kernelbench_path
    from .suite import SuiteError, parse_ids, parse_levels, select

    if not Path(solutions).is_dir():
        raise click.ClickException(f"solutions directory not found: {solutions}")
    if reward_name not in rewards.names():
        raise click.UsageError(f"unknown reward scheme {reward_name!r}; known: {', '.join(rewards.names())}")
    gpu_ids = _gpus(gpus)
    dev = _device(device)
    if dev == "cpu" and gpu_ids:
        raise click.UsageError("--gpus needs --device cuda")
    if dev == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise click.ClickException("--device cuda but no CUDA GPU is visible (use --device cpu)")
    try:
        lv = parse_levels(levels)
        tasks = select(kernelbench, lv, parse_ids(ids))
        found = find(solutions, tasks, all_snapshots=all_snapshots)
    except (SuiteError, SolutionsError) as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"cannot read the input: {e}") from None
    for w in found.warnings:
        click.echo(f"warning: {w}", err=True)
    opts = EvalOptions(device=dev, rules=rules, reward=reward_name, timing=not no_timing, workers=workers,
                       gpus=gpu_ids, n_sets=n_sets)
    have = sum(1 for t in tasks if found.candidates.get(f"L{t.meta['level']}/{t.meta['problem_id']}"))
    how = (f"pool, {len(gpu_ids) if gpu_ids else workers} {'GPU' if dev == 'cuda' else 'CPU slot'}(s)"
           if opts.uses_pool else "one by one")
    click.echo(f"eval: {len(tasks)} problems (levels {','.join(map(str, lv))}), {have} with a solution; "
               f"{dev}, rules {rules}, {'timed' if opts.timing else 'no timing'}, {how} -> {out_dir}")

    if no_progress:
        def on_row(row, reused):
            click.echo(_line(row, reused))

        rows = _run(run, tasks, found, out_dir, opts, solutions, on_row)
    else:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=False, highlight=False)
        with Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=console, transient=False) as bar:
            tid = bar.add_task("", total=len(tasks))

            def on_row(row, reused):
                bar.console.print(_line(row, reused), markup=False, soft_wrap=True)
                bar.update(tid, advance=1, description=f"last: {row.label}")

            rows = _run(run, tasks, found, out_dir, opts, solutions, on_row)

    levels_run = [x for x in lv if any(t.meta["level"] == x for t in tasks)]  # --ids may leave a level empty
    m = metrics_mod.compute(rows, levels_run)
    info = {"solutions": str(solutions), "kernelbench": str(kernelbench_path(kernelbench)), "device": dev,
            "rules": rules, "timing": opts.timing, "levels": ",".join(map(str, levels_run)), "tasks": len(tasks)}
    written = report.write(out_dir, m, rows, info, found.warnings)
    for w in written.warnings:
        click.echo(f"warning: {w}", err=True)
    widths = [8, 6, 7, 16, 18, 17, 19]
    click.echo("".join(h.ljust(w) for h, w in zip(report.HEADER, widths)).rstrip())
    for s in m.splits:
        click.echo("".join(c.ljust(w) for c, w in zip(report.table_row(s), widths)).rstrip())
    click.echo(f"wrote {written.report}, {written.metrics}, "
               + ", ".join(p.name for p in written.plots) + f" and {Path(out_dir) / 'results.jsonl'}")


def _run(run, tasks, found, out_dir, opts, solutions, on_row):
    from ..sandbox.pool.store import PoolError

    try:
        return run(tasks, found, out_dir, opts, solutions=solutions, on_row=on_row)
    except PoolError as e:
        raise click.ClickException(f"pool: {e}") from None
    except KeyboardInterrupt:
        raise click.ClickException("interrupted; finished problems are kept in "
                                   f"{Path(out_dir) / 'results.jsonl'} (run the same command to resume)") from None
