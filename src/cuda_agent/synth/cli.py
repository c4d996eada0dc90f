"""``cuda-agent synth``: the click command; it builds a :class:`~cuda_agent.synth.pipeline.SynthConfig`
and runs :func:`~cuda_agent.synth.pipeline.synthesize` on it."""

from __future__ import annotations

import json

import click

from ..cliopts import DEVICE, JSON, KERNELBENCH, NO_PROGRESS, OneLineCommand, progress_on
from .pipeline import SynthConfig, SynthError, synthesize


def _band(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        lo, hi = (float(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter("give the band as LO,HI in milliseconds, e.g. 1,100") from None
    if not 0 <= lo < hi:
        raise click.BadParameter("need 0 <= LO < HI")
    return lo, hi


@click.command("synth", cls=OneLineCommand)
@click.option("--count", "n", type=click.IntRange(1), required=True, help="number of tasks the dataset should hold.")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True,
              help="output dataset directory (reuse it to resume).")
@click.option("--composer", default="programmatic", show_default=True,
              help="composer: programmatic, llm, or a registered one.")
@DEVICE
@click.option("--workers", type=click.IntRange(1), default=None,
              help="evaluation processes (default: CPU cores, or GPUs on cuda).")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the composition (same seed, same tasks).")
@click.option("--mix", default=None, help="op-count mix, e.g. '1=0.034,2=0.8377,3=0.0762' (default: the paper's).")
@click.option("--sizes", type=click.Choice(["gpu", "cpu"]), default=None,
              help="input size profile (default: the device's).")
@click.option("--band-ms", callback=_band, default=None,
              help="eager runtime band LO,HI in ms (default 1,100 on cuda, 0.1,5000 on cpu).")
@click.option("--compile/--no-compile", "compile_", default=True, show_default=True,
              help="torch.compile filter (slow on the CPU; disable for quick runs only).")
@click.option("--compile-backend", default="inductor", show_default=True, help="torch.compile back-end of the filter.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="seconds per task (eager phases).")
@click.option("--compile-timeout", "compile_timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="seconds per task compile.")
@KERNELBENCH
@click.option("--decontaminate/--no-decontaminate", default=True, show_default=True,
              help="drop tasks too similar (AST) to a KernelBench problem.")
@click.option("--max-similarity", type=click.FloatRange(0, 1, min_open=True), default=0.9, show_default=True,
              help="decontamination threshold: the largest AST similarity to KernelBench kept.")
@click.option("--max-candidates", type=click.IntRange(1), default=None, help="stop after this many new candidates.")
@click.option("--no-transformers", is_flag=True, help="do not use transformers building blocks.")
@click.option("--base-url", default=None, help="LLM composer: OpenAI-compatible server URL.")
@click.option("--api-key", default=None, envvar="OPENAI_API_KEY", help="LLM composer: API key. Env: OPENAI_API_KEY.")
@click.option("--model", default=None, help="LLM composer: model name.")
@click.option("--fork-server/--no-fork-server", default=None,
              help="fork evaluation processes from one warm server (torch imported and compile warmed once); "
                   "default: on for cpu, off for cuda.")
@click.option("--minutes", "max_minutes", type=click.FloatRange(min=0, min_open=True), default=None,
              help="wall-time budget: stop submitting after it, drain for up to --drain seconds, keep what finished.")
@click.option("--drain", "drain_s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="seconds in-flight evaluations get after --minutes before they are abandoned (undecided).")
@JSON
@NO_PROGRESS
def synth_command(n: int, out: str, composer: str, device: str, workers: int | None, seed: int, mix: str | None,
                  sizes: str | None, band_ms: tuple[float, float] | None, compile_: bool, compile_backend: str,
                  timeout_s: float | None, compile_timeout_s: float | None, kernelbench: str | None,
                  decontaminate: bool, max_similarity: float, max_candidates: int | None, no_transformers: bool,
                  base_url: str | None, api_key: str | None, model: str | None, fork_server: bool | None,
                  max_minutes: float | None, drain_s: float, as_json: bool, no_progress: bool) -> None:
    """Synthesize COUNT filtered, decontaminated KernelBench-format tasks into OUT (resumable)."""
    opts = {}
    if composer == "llm":
        opts = {k: v for k, v in (("base_url", base_url), ("api_key", api_key), ("model", model)) if v}
    config = SynthConfig(n, out, composer=composer, device=device, workers=workers, seed=seed, mix=mix, sizes=sizes,
                         band_ms=band_ms, compile=compile_, compile_backend=compile_backend, timeout_s=timeout_s,
                         compile_timeout_s=compile_timeout_s, kernelbench=kernelbench, decontaminate=decontaminate,
                         max_similarity=max_similarity, max_candidates=max_candidates, composer_options=opts,
                         include_transformers=not no_transformers, fork_server=fork_server,
                         max_minutes=max_minutes, drain_s=drain_s, progress=progress_on(no_progress, as_json))
    try:
        res = synthesize(config)
    except SynthError as e:
        raise click.UsageError(str(e)) from None
    st = res.stats
    if as_json:
        click.echo(json.dumps({"tasks": res.accepted, "count": n, "candidates": st["candidates"],
                               "accepted": st["accepted_decisions"], "rejected": st["rejected"],
                               "rejections_by_code": st["rejections_by_code"], "elapsed_s": round(res.elapsed_s, 1),
                               "device": device, "files": res.files}))
    else:
        over = st["accepted_decisions"] - res.accepted
        click.echo(f"dataset: {res.accepted}/{n} tasks in {res.out_dir} ({res.elapsed_s:.0f} s, filters on {device})")
        click.echo(f"candidates decided: {st['candidates']} = {st['accepted_decisions']} accepted + "
                   f"{st['rejected']} rejected" + (" (" + ", ".join(f"{k} {v}" for k, v in st["rejections_by_code"]
                                                                   .items()) + ")" if st["rejected"] else "")
                   + (f"; {over} accepted over a full op-count quota left out" if over > 0 else ""))
        for k in ("jsonl", "parquet", "stats"):
            click.echo(f"{k + ':':<9}{res.files[k]}")
    if res.accepted < n and not max_minutes:
        raise click.ClickException(f"only {res.accepted} of {n} tasks accepted "
                                   f"({st.get('settings', {}).get('stopped') or 'see stats.md'})")
