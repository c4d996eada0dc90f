"""``cuda-agent eval SOLUTIONS --out DIR``: check a solutions tree (or agent runs) on KernelBench.

Selects the problems (suite.py), finds each one's solution (solutions.py), checks them
(run.py, resumable), computes the metrics (metrics.py) and writes the report (report.py).
Bad input ends in one ``Error:`` line; a solution that fails is a failed row.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..cliopts import (DEVICE, EXISTING_DIR, GPUS, JSON, KERNELBENCH, N_SETS, NO_PROGRESS, REWARD, RULES,
                       OneLineCommand, progress_on)


def _line(row, reused: bool) -> str:
    sp = ""
    if row.correct and row.speedup_compile:
        sp = f"  {row.speedup_eager or 0:.2f}x eager, {row.speedup_compile:.2f}x compile"
    elif row.correct and row.speedup_eager:
        sp = f"  {row.speedup_eager:.2f}x eager"
    err = f"  ({row.error[:100]})" if row.error and not row.correct else ""
    return f"{row.label:<8} {row.verdict:<12}{sp}{err}{'  [from an earlier run]' if reused else ''}"


@click.command("eval", cls=OneLineCommand)
@click.argument("solutions", type=EXISTING_DIR)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="output directory: results.jsonl (resumable), metrics.json, report.md, plots.")
@KERNELBENCH
@click.option("--suite", type=click.Path(exists=True), default=None,
              help="another problem set in KernelBench's layout (JSONL/parquet rows with level, problem_id, name, "
                   "code, or a level<N>/ tree), e.g. examples/cpu_suite/suite.jsonl; default: KernelBench.")
@click.option("--levels", default=None, help="levels to evaluate, e.g. 1,2 (default: 1,2,3 of KernelBench; "
                                              "every level of a --suite).")
@click.option("--ids", default=None, help="only these problems: 12,19 (every selected level) or L1/12,L2/5.")
@DEVICE
@RULES
@REWARD
@click.option("--workers", type=click.IntRange(1, 512), default=1, show_default=True,
              help="parallel checks through the pool (CPU slots, or GPUs on cuda); 1 checks one by one here.")
@GPUS
@click.option("--no-timing", is_flag=True, help="build and verify only: no speedups.")
@N_SETS
@click.option("--all-snapshots", is_flag=True,
              help="agent runs: re-check every snapshot of each trajectory, not only the one it kept as best.")
@JSON
@NO_PROGRESS
def eval_command(solutions, out_dir, kernelbench, suite, levels, ids, device, rules, reward_name, workers, gpus,
                 no_timing, n_sets, all_snapshots, as_json, no_progress) -> None:
    """Evaluate SOLUTIONS on KernelBench (or --suite) with the paper's metrics; write a report to --out.

    SOLUTIONS holds L<level>/<problem_id>/ workspaces (model_new.py [+ kernels/]) or
    L<level>/<problem_id>.py files, and/or agent runs (cuda-agent solve --out directories):
    each trajectory's best snapshot is re-checked.  A problem without a solution counts as a
    failure.  Running the same command again resumes: finished problems are not re-checked.
    """
    import json

    from . import metrics as metrics_mod
    from . import report
    from .run import EvalOptions, run
    from .solutions import SolutionsError, find
    from ..tasks import kernelbench_path
    from .suite import SuiteError, parse_ids, parse_levels, select

    if device == "cpu" and gpus:
        raise click.UsageError("--gpus needs --device cuda")
    try:
        lv = parse_levels(levels) if levels or not suite else ()
        tasks = select(suite or kernelbench, lv, parse_ids(ids))
        lv = lv or tuple(sorted({t.meta["level"] for t in tasks}))
        found = find(solutions, tasks, all_snapshots=all_snapshots)
    except (SuiteError, SolutionsError) as e:
        raise click.UsageError(str(e)) from None
    except OSError as e:
        raise click.UsageError(f"cannot read the input: {e}") from None
    for w in found.warnings:
        click.echo(f"warning: {w}", err=True)
    opts = EvalOptions(device=device, rules=rules, reward=reward_name, timing=not no_timing, workers=workers,
                       gpus=gpus, n_sets=n_sets)
    have = sum(1 for t in tasks if found.candidates.get(f"L{t.meta['level']}/{t.meta['problem_id']}"))
    how = (f"pool, {len(gpus) if gpus else workers} {'GPU' if device == 'cuda' else 'CPU slot'}(s)"
           if opts.uses_pool else "one by one")
    say = (lambda text: click.echo(text, err=True)) if as_json else click.echo
    say(f"eval: {len(tasks)} problems (levels {','.join(map(str, lv))}), {have} with a solution; "
        f"{device} (times on {report.where(device)}), rules {rules}, {'timed' if opts.timing else 'no timing'}, "
        f"{how} -> {out_dir}")

    if not progress_on(no_progress, as_json):
        def on_row(row, reused):
            if not as_json:
                click.echo(_line(row, reused))

        rows = _run(run, tasks, found, out_dir, opts, solutions, on_row)
    else:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=Console(stderr=True, highlight=False),
                      transient=True) as bar:
            tid = bar.add_task("", total=len(tasks))

            def on_row(row, reused):
                click.echo(_line(row, reused))
                bar.update(tid, advance=1, description=f"last: {row.label}")

            def on_stage(lab, stage, seconds):
                bar.update(tid, description=f"{lab}: {stage} done ({seconds:.1f} s)")

            opts.on_stage = on_stage
            rows = _run(run, tasks, found, out_dir, opts, solutions, on_row)

    levels_run = [x for x in lv if any(t.meta["level"] == x for t in tasks)]  # --ids may leave a level empty
    m = metrics_mod.compute(rows, levels_run)
    info = {"solutions": str(solutions), "device": device, "rules": rules, "timing": opts.timing,
            "levels": ",".join(map(str, levels_run)), "tasks": len(tasks)}
    if suite:
        info["suite"] = str(suite)
    else:
        info["kernelbench"] = str(kernelbench_path(kernelbench))
    written = report.write(out_dir, m, rows, info, found.warnings)
    for w in written.warnings:
        click.echo(f"warning: {w}", err=True)
    files = {"report": str(written.report), "metrics": str(written.metrics),
             "plots": [str(p) for p in written.plots], "results": str(Path(out_dir) / "results.jsonl")}
    if as_json:
        click.echo(json.dumps({"info": info, "metrics": m.to_dict(), "files": files}))
        return
    widths = [8, 6, 7, 16, 18, 17, 19]
    click.echo(f"on {report.where(device)} ({device}):")
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
