"""``cuda-agent pool run|serve|status|results``: a job file through the pool, with a progress bar;
or a long-running server for the jobs other processes submit to the database.

JOBS.jsonl, one job a line: ``{"task": "examples/x/task.py" | "L1/12" | "rows.jsonl#ID",
"solution": "path/to/workspace-or-model_new.py", "priority": 0, "tag": "any label",
"timeout": seconds on a slot, "options": {CheckOptions fields}}`` (all but task and solution
optional).  Relative paths are taken from the current
directory, else from the job file's directory.  Every line is submitted with a key (file,
line number, content hash), so running the same file again on the same database resumes it
instead of duplicating it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import click

from ...cliopts import (GPUS, JSON, KERNELBENCH, N_SETS, NO_COMPILE_BASELINE, NO_PROGRESS, NO_TIMING, REWARD, RULES,
                        OneLineGroup, Registered, device_option, local_device, options, progress_on)
from .backend import SLOTS_PER_GPU


def _path(p: str, base: Path) -> str:
    q = Path(p)
    if q.is_absolute() or q.exists() or "#" in p:
        return p
    alt = base / q
    return str(alt) if alt.exists() or Path(str(alt).split("#", 1)[0]).exists() else p


def _backends() -> list[str]:
    from .backends import backend_names

    return backend_names()


def _device(device: str | None, backend: str, address: str | None) -> str:
    """The pool's device; with a remote Ray cluster the GPUs need not be on this machine."""
    if backend == "ray" and address:
        return device or "cuda"
    return local_device(device)


_workers = options(  # where and how the pool runs its jobs (run and serve)
    click.option("--backend", type=Registered(_backends, "pool back-end"), default="local", show_default=True,
                 help="pool back-end: local (processes here), ray (Ray actors), or a registered one."),
    device_option(local=False, help="cuda (default when a GPU is visible here) or cpu."),
    GPUS,
    click.option("--slots", type=click.IntRange(1), default=None, help="CPU slots (device cpu)."),
    click.option("--slots-per-gpu", type=click.IntRange(1), default=SLOTS_PER_GPU, show_default=True,
                 help="slot workers per GPU (device cuda): they verify side by side and time one at a time."),
    click.option("--build-workers", type=click.IntRange(1), default=None,
                 help="parallel CPU builders (default from cores and slots)."),
    click.option("--address", default=None, help="Ray cluster address (backend ray); default: start a local Ray."))
_limits = options(
    click.option("--job-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
                 help="kill a worker whose job runs longer (s)."),
    click.option("--retries", type=click.IntRange(0), default=0, show_default=True,
                 help="re-run a job whose worker died."))


@click.group("pool", cls=OneLineGroup)
def pool_group() -> None:
    """Evaluate many candidates at once: one job per GPU (or CPU slot), builds in parallel,
    jobs and results kept in sqlite (a restart loses nothing)."""


@pool_group.command("run")
@click.argument("jobs_file", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--db", default="pool.sqlite", show_default=True, type=click.Path(dir_okay=False),
              help="the pool's database (results, queue); reuse it to resume.")
@_workers
@RULES
@REWARD
@N_SETS
@NO_TIMING
@NO_COMPILE_BASELINE
@KERNELBENCH
@_limits
@JSON
@NO_PROGRESS
def run_command(jobs_file, db, backend, device, gpus, slots, slots_per_gpu, build_workers, address, rules, reward_name,
                n_sets, no_timing, no_compile_baseline, kernelbench, job_timeout, retries, as_json, no_progress):
    """Submit JOBS_FILE (JSONL) to the pool at --db and wait for every job; without JOBS_FILE,
    finish what the database still holds."""
    from ..check import CheckOptions
    from .jobs import options_from_dict, options_to_dict
    from .pool import Pool
    from .store import PoolError

    dev = _device(device, backend, address)
    lines: list[tuple[int, str]] = []
    if jobs_file:
        p = Path(jobs_file)
        lines = [(i, line) for i, line in enumerate(p.read_text().splitlines(), 1) if line.strip()]
    base = CheckOptions(device=dev, rules=rules, reward=reward_name, n_sets=n_sets, timing=not no_timing,
                        baselines=not no_timing, compile_baseline=not no_compile_baseline)
    opts = {"address": address} if address and backend == "ray" else {}
    t0 = time.time()
    try:
        pool = Pool(db, device=dev, backend=backend, gpus=gpus, slots=slots, slots_per_gpu=slots_per_gpu,
                    build_workers=build_workers, job_timeout=job_timeout, retries=retries, backend_options=opts)
    except PoolError as e:
        raise click.UsageError(str(e)) from None
    rejected: list[dict] = []
    ids: list[int] = []
    try:
        for n, line in lines:
            try:
                d = json.loads(line)
                if not isinstance(d, dict) or "task" not in d or "solution" not in d:
                    raise ValueError('each line needs "task" and "solution"')
                o = base
                if d.get("options"):
                    o = options_from_dict({**options_to_dict(base), **d["options"], "device": dev})
                key = f"{Path(jobs_file).resolve()}:{n}:{hashlib.sha1(line.encode()).hexdigest()[:12]}"
                ids.append(pool.submit(_path(str(d["task"]), Path(jobs_file).parent), _path(str(d["solution"]),
                                       Path(jobs_file).parent), o, priority=int(d.get("priority", 0)),
                                       tag=str(d.get("tag", "")), key=key, kernelbench=kernelbench,
                                       timeout=float(d["timeout"]) if d.get("timeout") else None))
            except (ValueError, TypeError, PoolError) as e:
                rejected.append({"line": n, "error": str(e)})
                click.echo(f"{jobs_file}:{n}: skipped: {e}", err=True)
        if not jobs_file:
            ids = [r.id for r in pool.jobs()]
        if pool.recovered[0] or pool.recovered[1]:
            click.echo(f"recovered from a previous pool: {len(pool.recovered[0])} re-queued, "
                       f"{len(pool.recovered[1])} given up", err=True)
        _wait(pool, ids, not progress_on(no_progress, as_json))
        records = pool.jobs(ids)
        aud = pool.audit(ids)
        replaced = pool.backend.replaced()
    finally:
        pool.close()
    wall = time.time() - t0
    summary = _summary(records, wall, aud, replaced, rejected, pool.backend.slots())
    if as_json:
        click.echo(json.dumps({"summary": summary, "jobs": [r.to_dict() for r in records], "rejected_lines": rejected}))
        return
    _print_summary(summary)


def _wait(pool, ids: list[int], quiet: bool) -> None:
    if quiet or not ids:
        pool.wait(ids)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]pool"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=False) as bar:
        t = bar.add_task("", total=len(ids))
        shown: set[int] = set()

        def show(c: dict[str, int]) -> None:
            bar.update(t, completed=c["done"], description=(
                f"queued {c['queued']}  building {c['building']}  ready {c['ready']}  running {c['running']}"))
            if c["done"] > len(shown):  # a line per finished job: its verdict and where its seconds went
                for jid, r in sorted(pool.results(ids).items()):
                    if jid not in shown:
                        shown.add(jid)
                        bar.console.print(job_line(jid, r), markup=False, highlight=False, soft_wrap=True)
        pool.wait(ids, on_progress=show)


def job_line(job_id: int, r) -> str:
    """``job 3  L1/12 (cuda): correct, reward 2  14.9 s (build 0.1, verify 2.0, timing 7.0, ...)``."""
    verdict = ("correct" if r.correct else "NOT correct" if r.compiled else "build failed") + \
        (f", reward {r.reward:g}" if r.reward is not None else "")
    stages = ", ".join(f"{k} {v:.1f}" for k, v in r.phases.items())
    return f"job {job_id}  {r.task_id} ({r.device}): {verdict}  {r.seconds:.1f} s" + (f" ({stages})" if stages else "")


def _summary(records, wall: float, aud, replaced: int, rejected: list, slots: list[str]) -> dict:
    by_tag: dict[str, dict] = defaultdict(lambda: {"n": 0, "correct": 0, "reward_sum": 0.0})
    outcomes: dict[str, int] = defaultdict(int)
    for r in records:
        t = by_tag[r.tag or "-"]
        t["n"] += 1
        res = r.result
        if res is not None:
            t["correct"] += int(bool(res.correct))
            t["reward_sum"] += res.reward or 0.0
        outcomes[r.outcome or r.status] += 1
    done = sum(1 for r in records if r.status == "done")
    return {"jobs": len(records), "done": done, "wall_s": round(wall, 2),
            "evals_per_min": round(60.0 * done / wall, 2) if wall > 0 else None, "slots": slots,
            "outcomes": dict(outcomes), "by_tag": {k: {**v, "mean_reward": round(v["reward_sum"] / v["n"], 3)}
                                                   for k, v in sorted(by_tag.items())},
            "workers_replaced": replaced, "audit": aud.to_dict(), "rejected_lines": len(rejected)}


def _print_summary(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    tab = Table(title=f"{s['done']}/{s['jobs']} jobs done in {s['wall_s']:.1f} s on {len(s['slots'])} slot(s) "
                      f"({', '.join(s['slots'])}): {s['evals_per_min']} evaluations/min")
    for c in ("tag", "jobs", "correct", "mean reward"):
        tab.add_column(c, justify="left" if c == "tag" else "right")
    for tag, v in s["by_tag"].items():
        tab.add_row(tag, str(v["n"]), str(v["correct"]), f"{v['mean_reward']:g}")
    con = Console()
    con.print(tab)
    a = s["audit"]
    con.print(f"outcomes: {', '.join(f'{k} {v}' for k, v in sorted(s['outcomes'].items()))}; "
              f"workers replaced: {s['workers_replaced']}")
    con.print(f"audit: {'ok' if a['ok'] else 'FAILED'} (unfinished {len(a['unfinished'])}, lost {len(a['lost'])}, "
              f"overlapping jobs on one slot {len(a['overlaps'])}, timings beside other jobs "
              f"{len(a['exclusive_overlaps'])}, wrong GPU visibility {len(a['wrong_visibility'])})")
    if s["rejected_lines"]:
        con.print(f"skipped lines: {s['rejected_lines']} (see above)")


@pool_group.command("serve")
@click.option("--db", default="pool.sqlite", show_default=True, type=click.Path(dir_okay=False),
              help="the database that clients (PoolEvaluator, Pool(db, backend=None)) submit to.")
@_workers
@_limits
def serve_command(db, backend, device, gpus, slots, slots_per_gpu, build_workers, address, job_timeout, retries):
    """Serve the queue at --db until SIGINT or SIGTERM: take its lock, run every job any
    process submits, print the counts when they change.  On a stop, jobs in flight go back to
    the queue for the next server."""
    import signal
    import threading

    from .pool import Pool
    from .store import PoolError

    dev = _device(device, backend, address)
    opts = {"address": address} if address and backend == "ray" else {}
    try:
        pool = Pool(db, device=dev, backend=backend, gpus=gpus, slots=slots, slots_per_gpu=slots_per_gpu,
                    build_workers=build_workers, job_timeout=job_timeout, retries=retries, backend_options=opts)
    except PoolError as e:
        raise click.UsageError(str(e)) from None
    stop = threading.Event()
    got: list[str] = []

    def on_signal(sig, _frame):
        got.append(signal.Signals(sig).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)

    def say(msg: str) -> None:
        click.echo(f"{time.strftime('%H:%M:%S')} {msg}")

    done_before = pool.counts()["done"]
    try:
        say(f"serving {pool.store.db} on {', '.join(pool.backend.slots())} ({backend} back-end, {dev}, "
            f"pid {os.getpid()}); SIGINT or SIGTERM stops")
        if pool.recovered[0] or pool.recovered[1]:
            say(f"recovered from a previous pool: {len(pool.recovered[0])} re-queued, "
                f"{len(pool.recovered[1])} given up")
        last = None
        while not stop.wait(1.0) and pool.error is None:
            c = pool.counts()
            if c != last:
                say("  ".join(f"{k} {v}" for k, v in c.items()))
                last = c
    finally:
        pool.close()
    c = pool.counts()
    if pool.error is not None:
        click.echo(f"the pool's scheduler stopped: {pool.error}", err=True)
        sys.exit(1)
    say(f"stopped ({got[0] if got else 'exit'}); finished while serving: {c['done'] - done_before}, "
        f"left in the queue for the next server: {c['queued']}; lock released")


@pool_group.command("status")
@click.option("--db", default="pool.sqlite", show_default=True, type=click.Path(dir_okay=False, exists=True),
              help="the pool's database.")
def status_command(db):
    """Counts by status and the pool processes that served the database."""
    from .store import Store

    st = Store(db)
    c = st.counts()
    click.echo("  ".join(f"{k} {v}" for k, v in c.items()))
    for r in st.runs():
        click.echo(f"run {r['id']}: pid {r['pid']} {r['backend']} {json.loads(r['slots'])} started "
                   f"{time.strftime('%H:%M:%S', time.localtime(r['started']))}"
                   + (f", recovered {r['recovered']}" if r["recovered"] else "")
                   + ("" if r["stopped"] else " (did not stop cleanly, or still serving)"))


@pool_group.command("results")
@click.option("--db", default="pool.sqlite", show_default=True, type=click.Path(dir_okay=False, exists=True),
              help="the pool's database.")
@JSON
def results_command(db, as_json):
    """One line per job: id, status, outcome, slot, verdict."""
    from .store import Store

    records = Store(db).jobs()
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in records]))
        return
    for r in records:
        res = r.result
        verdict = "-" if res is None else ("correct" if res.correct else " ".join((res.error or "incorrect").split())[:100])
        click.echo(f"{r.id:>5} {r.status:<8} {r.outcome or '-':<18} {r.slot or '-':<8} "
                   f"{'' if res is None or res.reward is None else f'{res.reward:+g}':>3}  {r.tag or ''}  {verdict}")
