"""``cuda-agent synth``: the click command over :func:`cuda_agent.synth.pipeline.run_synth`."""

from __future__ import annotations

import json

import click

from .pipeline import SynthError, run_synth


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


@click.command("synth")
@click.option("--n", "n", type=int, required=True, help="Number of accepted tasks to produce.")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Output dataset directory.")
@click.option("--composer", default="programmatic", show_default=True, help="Composer name (programmatic, llm, ...).")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda (filters and runtime band run there).")
@click.option("--workers", type=int, default=None, help="Evaluation processes (default: CPU cores, or GPUs on cuda).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--mix", default=None, help="Op-count mix, e.g. '1=0.034,2=0.8377,3=0.0762' (default: the paper's).")
@click.option("--sizes", type=click.Choice(["gpu", "cpu"]), default=None, help="Input size profile (default by device).")
@click.option("--band-ms", callback=_band, default=None, help="Eager runtime band LO,HI in ms (default 1,100 on cuda).")
@click.option("--compile/--no-compile", "compile_", default=True, show_default=True,
              help="torch.compile filter (slow on the CPU; disable for quick runs only).")
@click.option("--compile-backend", default="inductor", show_default=True)
@click.option("--timeout", "timeout_s", type=float, default=None, help="Seconds per task (eager phases).")
@click.option("--compile-timeout", "compile_timeout_s", type=float, default=None, help="Seconds per task compile.")
@click.option("--kernelbench", type=click.Path(), default=None, help="KernelBench dataset for decontamination.")
@click.option("--decontaminate/--no-decontaminate", default=True, show_default=True)
@click.option("--max-similarity", type=float, default=0.9, show_default=True)
@click.option("--max-candidates", type=int, default=None, help="Stop after this many new candidates.")
@click.option("--no-transformers", is_flag=True, help="Do not use transformers building blocks.")
@click.option("--base-url", default=None, help="LLM composer: OpenAI-compatible server URL.")
@click.option("--api-key", default=None, envvar="OPENAI_API_KEY", help="LLM composer: API key.")
@click.option("--model", default=None, help="LLM composer: model name.")
@click.option("--fork-server/--no-fork-server", default=None,
              help="Fork evaluation processes from one warm server (torch imported and compile warmed once); "
                   "default: on for cpu, off for cuda.")
@click.option("--minutes", "max_minutes", type=float, default=None,
              help="Wall-time budget: stop submitting after it, drain for up to --drain seconds, keep what finished.")
@click.option("--drain", "drain_s", type=float, default=60.0, show_default=True,
              help="Seconds in-flight evaluations get after --minutes before they are abandoned (undecided).")
@click.option("--progress/--no-progress", default=True)
def synth_command(n: int, out: str, composer: str, device: str, workers: int | None, seed: int, mix: str | None,
                  sizes: str | None, band_ms: tuple[float, float] | None, compile_: bool, compile_backend: str,
                  timeout_s: float | None, compile_timeout_s: float | None, kernelbench: str | None,
                  decontaminate: bool, max_similarity: float, max_candidates: int | None, no_transformers: bool,
                  base_url: str | None, api_key: str | None, model: str | None, fork_server: bool | None,
                  max_minutes: float | None, drain_s: float, progress: bool) -> None:
    """Synthesize N filtered, decontaminated KernelBench-format tasks into OUT (resumable)."""
    opts = {}
    if composer == "llm":
        opts = {k: v for k, v in (("base_url", base_url), ("api_key", api_key), ("model", model)) if v}
    try:
        res = run_synth(n, out, composer=composer, device=device, workers=workers, seed=seed, mix=mix, sizes=sizes,
                        band_ms=band_ms, compile=compile_, compile_backend=compile_backend, timeout_s=timeout_s,
                        compile_timeout_s=compile_timeout_s, kernelbench=kernelbench, decontaminate=decontaminate,
                        max_similarity=max_similarity, max_candidates=max_candidates, composer_options=opts,
                        include_transformers=not no_transformers, fork_server=fork_server,
                        max_minutes=max_minutes, drain_s=drain_s, progress=progress)
    except SynthError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"accepted {res.accepted}/{n} tasks from {res.candidates} candidates in {res.elapsed_s:.0f} s")
    click.echo(json.dumps(res.files, indent=2))
    if res.accepted < n and not max_minutes:
        raise click.ClickException(f"only {res.accepted} of {n} tasks accepted "
                                   f"({res.stats.get('settings', {}).get('stopped') or 'see stats.md'})")
