"""``cuda-agent``: one thin entry point; each verb parses, calls one function, prints."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from .cliopts import (DEVICE, EXISTING, JSON, KERNELBENCH, N_SETS, NO_COMPILE_BASELINE, NO_PROGRESS, NO_TIMING, REWARD,
                      RULES, OneLineGroup, StageLines, device_option, options, progress_on)
from .tasks import TaskError, resolve

NCU = click.option("--ncu", is_flag=True,
                   help="also read Nsight Compute counters of each kernel of one forward (GPU only).")
GPU_ONLY = "is GPU-only (NVIDIA's {tool} reads the GPU); on the CPU backend use `cuda-agent profile` for times and the roofline"


def _fmt_ms(x: float | None) -> str:
    return "-" if x is None else (f"{x * 1e3:.1f} us" if x < 1 else f"{x:.3f} ms")


def _first_error(log: str | None) -> str:
    """The compiler's first error line of a build log (after the "Error building" header)."""
    lines = [ln.strip() for ln in str(log or "").splitlines() if ln.strip()]
    return (lines[1] if len(lines) > 1 else lines[0] if lines else "")[:200]


def _built(x: dict) -> str:
    """How an extension came to be: from the cache, or built (against the shared precompiled
    torch/extension.h, and whether this build first had to make it)."""
    secs = x.get("seconds", 0)
    if x.get("cached"):
        return f"cached build, {secs:.1f} s"
    if x.get("pch_seconds"):
        return (f"built, {secs:.1f} s: {x['pch_seconds']:.1f} s precompiling torch/extension.h, once per compiler "
                f"and flag set; {secs - x['pch_seconds']:.1f} s the extension")
    return f"built, {secs:.1f} s" + {"used": " against the precompiled torch/extension.h",
                                     "not used": "; the precompiled torch/extension.h did not fit its flags"}.get(x.get("pch"), "")


def print_result(r, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(r.to_dict()))
        return
    click.echo(f"task      {r.task_id} ({r.device}, rules {r.rules})")
    click.echo(f"compiled  {'yes' if r.compiled else 'NO'}" + (
        f"  ({r.build.seconds:.1f} s; compiled {', '.join(r.build.compiled) or 'nothing'}; "
        f"cached {len(r.build.cached)})" if r.build and r.build.so_path else ""))
    for x in r.extensions:
        click.echo(f"extension {x['name']}: " + (f"loaded ({_built(x)})" if x.get("ok") else
                                                 "FAILED " + _first_error(x.get("error"))))
    if r.verdict or r.correct:
        click.echo(f"correct   {'yes' if r.correct else 'NO'}" + (
            f"  (max abs err {r.max_abs_err:.3g}, max rel err {r.max_rel_err:.3g}"
            + (f", rel L2 {r.rel_l2_err:.3g}" if r.rel_l2_err is not None else "") + ")"
            if r.max_abs_err is not None else ""))
        if r.ref_rel_l2_err is not None:
            click.echo(f"precision the reference itself vs float64: rel L2 {r.ref_rel_l2_err:.3g}, max abs "
                       f"{r.ref_max_abs_err:.3g} (errors above are against float64)")
    if r.custom_calls is not None:
        click.echo(f"ran       {r.custom_calls} call{'s' if r.custom_calls != 1 else ''} of the solution's own code"
                   + (f"; weights {r.weights}" if r.weights else ""))
    for v in r.violations:
        click.echo(f"violation {v.rule}: {v.message}" + (f" [{v.where}]" if v.where else ""))
    if r.error:
        click.echo("error     " + r.error.replace("\n", "\n          "))
    if r.exploit_classes:
        from .sandbox.exploits import label

        click.echo("rejected  " + "; ".join(label(c) for c in r.exploit_classes) + "  (docs/defences.md)")
    for w in r.warnings:
        click.echo(f"warning   {w}")
    if r.t_gen_ms is not None:
        click.echo(f"time      yours {_fmt_ms(r.t_gen_ms)} | eager {_fmt_ms(r.t_eager_ms)} | "
                   f"torch.compile {_fmt_ms(r.t_compile_ms)}  (on the {'GPU' if r.device == 'cuda' else 'CPU'})")
        if r.speedup_eager:
            click.echo(f"speedup   {r.speedup_eager:.2f}x vs eager" +
                       (f", {r.speedup_compile:.2f}x vs torch.compile" if r.speedup_compile else ""))
    if r.roofline is not None:
        from .sandbox.roofline import describe

        click.echo(f"roofline  {describe(r.roofline)}")
    if r.sanitizer:
        from .sandbox.sanitizer import describe as sanitized

        click.echo("sanitizer " + sanitized(r.sanitizer).replace("\n", "\n          "))
    if r.ncu is not None:
        from .sandbox.ncu import table

        click.echo(table(r.ncu, r.t_gen_ms))
    if r.reward is not None:  # none before verification (a `compile`)
        click.echo(f"reward    {r.reward:g} ({r.reward_scheme})")
    if r.phases:
        click.echo(f"seconds   {r.seconds:.1f} (" + ", ".join(f"{k} {v:.1f}" for k, v in r.phases.items()) + ")")


@click.group(cls=OneLineGroup)
@click.version_option(package_name="cuda-agent")
def main() -> None:
    """cuda-agent: train and evaluate LLM agents that write fast CUDA kernels."""


def _run_check(task, solution, device, rules, reward_name, as_json, no_progress, **kw) -> None:
    from .sandbox.check import CheckOptions
    from .sandbox.pool.evaluator import POOL_DB_ENV, evaluator_for

    opts = CheckOptions(device=device, rules=rules, reward=reward_name, **kw)
    # an agent whose checks go to a served pool: the commands in its shell go there too (no stage
    # lines then: the stages run in the pool's process)
    db = os.environ.get(POOL_DB_ENV)
    with StageLines(progress_on(no_progress, as_json) and not db, verify=opts.verify,
                    baselines=opts.baselines) as lines:
        ev = evaluator_for(db, device=device, rules=rules, reward=reward_name, progress=lines.lap, **kw)
        r = ev.check(task, Path(solution))
    print_result(r, as_json)


def _task(task: str, kernelbench: str | None):
    try:
        return resolve(task, kernelbench)
    except TaskError as e:
        raise click.UsageError(str(e)) from None


@main.command()
@click.argument("task")
@click.argument("solution", type=EXISTING)
@DEVICE
@RULES
@REWARD
@JSON
@NO_PROGRESS
@KERNELBENCH
@N_SETS
@NO_TIMING
@NO_COMPILE_BASELINE
@click.option("--seed", type=int, default=None, help="fix the verification seeds.")
@click.option("--tolerance", type=float, default=None,
              help="atol = rtol for the output comparison (default: by dtype; kernelbench's fp32 1e-4, "
                   "1e-2 as its v0/v0.1 results used).")
@click.option("--sanitize", is_flag=True, help="also run compute-sanitizer memcheck on one forward; a memory "
              "error fails the check (GPU only).")
def check(task, solution, device, rules, reward_name, as_json, no_progress, kernelbench, n_sets, no_timing,
          no_compile_baseline, seed, tolerance, sanitize):
    """Build, verify and time SOLUTION (a workspace dir or a model_new.py) against TASK.

    TASK is a KernelBench-format .py file, L<level>/<id> (with --kernelbench), or FILE.jsonl#ID.
    Exit 0 when the check ran, whatever the verdict.
    """
    if sanitize and device != "cuda":
        raise click.UsageError("--sanitize " + GPU_ONLY.format(tool="compute-sanitizer"))
    _run_check(_task(task, kernelbench), solution, device, rules, reward_name, as_json, no_progress,
               n_sets=n_sets, timing=not no_timing, baselines=not no_timing,
               compile_baseline=not no_compile_baseline, seed=seed, atol=tolerance, rtol=tolerance,
               sanitize=("memcheck",) if sanitize else ())


@main.command()
@click.argument("task")
@click.argument("directory", type=click.Path(file_okay=False))
@DEVICE
@KERNELBENCH
def workspace(task, directory, device, kernelbench):
    """Lay out a workspace for TASK in DIRECTORY (model.py, model_new.py, kernels/, SKILL.md).

    DIRECTORY must be new or empty: a workspace never mixes with files of yours.
    """
    from .sandbox.workspace import create_workspace

    t = _task(task, kernelbench)
    d = Path(directory)
    if d.is_dir() and any(d.iterdir()):
        raise click.UsageError(f"{d} is not empty; give a new or empty directory for the workspace")
    try:
        d = create_workspace(t, d, device)
    except TaskError as e:
        raise click.UsageError(str(e)) from None
    click.echo(f"workspace for {t.id} in {d}: read {d / 'SKILL.md'}, then edit model_new.py and kernels/")


def _in_workspace(directory: str, stage: str, as_json: bool, no_progress: bool, rules: str, reward_name: str,
                  device: str | None, **extra):
    from .cliopts import local_device
    from .sandbox.workspace import find_workspace, workspace_task

    try:
        ws = find_workspace(directory)
        t, ws_device = workspace_task(ws)
    except TaskError as e:
        raise click.UsageError(str(e)) from None
    kw = {"compile": dict(verify=False, timing=False, baselines=False),
          "verify": dict(timing=False, baselines=False),
          "sanitize": dict(timing=False, baselines=False, extra_round=False),
          "profile": {}}[stage]
    dev = local_device(device or ws_device)
    if extra.get("ncu") or stage == "sanitize":
        tool = "Nsight Compute" if stage == "profile" else "compute-sanitizer"
        if dev != "cuda":
            raise click.UsageError(f"{'profile --ncu' if stage == 'profile' else 'sanitize'} "
                                   + GPU_ONLY.format(tool=tool))
        from .sandbox.ncu import find_ncu
        from .sandbox.sanitizer import find_sanitizer

        if (find_ncu() if stage == "profile" else find_sanitizer()) is None:
            raise click.UsageError(f"{tool} is not installed here ({'ncu' if stage == 'profile' else 'compute-sanitizer'}"
                                   f" not on the PATH)")
    _run_check(t, ws, dev, rules, reward_name, as_json, no_progress, **kw, **extra)


# In a workspace, --device defaults to the workspace's own device (not the machine's).
_IN_WORKSPACE = options(click.argument("directory", default=".", type=click.Path(exists=True, file_okay=False)),
                       device_option(local=False, help="cuda or cpu; default: the device the workspace was made for."),
                       RULES, REWARD, JSON, NO_PROGRESS)
"""What every in-workspace command (compile, verify, profile, sanitize) takes."""

for _stage, _doc in (("compile", "Build the workspace's kernels/ (cached objects; first errors with file:line)."),
                     ("verify", "Build, then check ModelNew against the reference on fresh random inputs."),
                     ("profile", "Verify, then time ModelNew, eager and torch.compile with one recipe; --ncu adds "
                                 "Nsight Compute counters per kernel.")):
    def _make(stage: str):
        @_IN_WORKSPACE
        def cmd(directory, device, rules, reward_name, as_json, no_progress, **extra):
            _in_workspace(directory, stage, as_json, no_progress, rules, reward_name, device, **extra)
        cmd.__doc__ = _doc
        return NCU(cmd) if stage == "profile" else cmd
    main.command(name=_stage)(_make(_stage))


@main.command()
@_IN_WORKSPACE
@click.option("--tool", "tools", multiple=True, type=click.Choice(["memcheck", "racecheck", "initcheck", "synccheck"]),
              help="compute-sanitizer tool (repeatable; default: all four).")
def sanitize(directory, device, rules, reward_name, as_json, no_progress, tools):
    """Verify, then run compute-sanitizer tools on one forward (first input set): out-of-bounds
    and misaligned accesses, shared-memory races, uninitialised reads, barrier misuse, with
    file:line (GPU only). A memcheck error fails the check."""
    from .sandbox.sanitizer import TOOLS

    _in_workspace(directory, "sanitize", as_json, no_progress, rules, reward_name, device,
                  sanitize=tuple(tools or TOOLS))


def _register_parts() -> None:
    """The agent and synth parts own their verbs; they are imported here so that a broken
    optional dependency of one part does not take the evaluator's commands down."""
    import importlib

    for module, names in (("cuda_agent.agent.cli", ("solve_command", "show_command")),
                          ("cuda_agent.synth.cli", ("synth_command",)),
                          ("cuda_agent.sandbox.pool.cli", ("pool_group",)),
                          ("cuda_agent.eval.cli", ("eval_command",)),
                          ("cuda_agent.train.cli", ("train_group",))):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:  # pragma: no cover - depends on the install
            print(f"cuda-agent: {module} unavailable ({e})", file=sys.stderr)
            continue
        for n in names:
            main.add_command(getattr(mod, n))


_register_parts()


def entry() -> None:
    """The ``cuda-agent`` program: ``main``, then the exit handlers (spare runners, Ray, logging),
    then the process ends without the interpreter's teardown.  torch's C++ destructors run in that
    teardown and can abort a process whose work is done (``terminate called without an active
    exception``, exit 134: once in a CI run, after a check had printed its verdict; pytorch#38228),
    and the exit status is the one thing a script reads."""
    import atexit
    import threading

    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    # what the interpreter does at exit before its teardown: wait for non-daemon threads (an
    # executor's workers), then the exit handlers
    getattr(threading, "_shutdown", lambda: None)()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
