"""The CLI grammar, written once (``docs/cli.md``): the options every ``cuda-agent`` command
shares, the one-line usage error, and the stage lines a long check shows on a terminal.

Every command takes its ``--device``, ``--rules``, ``--reward``, ``--json``, ``--no-progress``,
``--gpus`` and ``--kernelbench`` from here, so a value means the same everywhere and a bad one
is refused while the arguments are parsed (exit 2, one ``Error:`` line), never late.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from .rules_profile import RulesProfile

DEVICES = ("cuda", "cpu")
RULE_SETS = tuple(p.value for p in RulesProfile)
NO_PROGRESS_ENV = "CUDA_AGENT_NO_PROGRESS"


def options(*opts: Callable) -> Callable:
    """Several click decorators as one, applied in the order written."""
    def apply(f: Callable) -> Callable:
        for o in reversed(opts):
            f = o(f)
        return f
    return apply


class Registered(click.Choice):
    """A ``Choice`` over a registry's names, read when a value is checked (a scheme or back-end
    registered after import is accepted too)."""

    def __init__(self, names: Callable[[], list[str]], what: str) -> None:
        self._names = names
        self.what = what
        super().__init__([])

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self._names())

    @choices.setter
    def choices(self, _value: Any) -> None:
        pass


class GpuList(click.ParamType):
    """``0,1,3`` -> [0, 1, 3]: the GPUs a command may use (ids as ``nvidia-smi`` numbers them)."""

    name = "ids"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            ids = [int(x) for x in str(value).split(",") if x.strip()]
        except ValueError:
            self.fail(f"give GPU ids like 0,1 (got {value!r})", param, ctx)
        if not ids or any(i < 0 for i in ids):
            self.fail(f"give GPU ids like 0,1 (got {value!r})", param, ctx)
        return ids


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def local_device(value: str | None, ctx: click.Context | None = None, param: click.Parameter | None = None) -> str:
    """``--device`` for work that runs on this machine: the default follows the hardware, and
    ``cuda`` with no GPU visible is a usage error rather than a run that fails every check."""
    if value is None:
        return default_device()
    if value == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise click.BadParameter("cuda, but no CUDA GPU is visible here (use --device cpu)", ctx,
                                     param or click.Option(["--device"]))
    return value


def _local_device(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    return local_device(value, ctx, param)


def device_option(*, local: bool = True, default: str | None = None, help: str | None = None) -> Callable:
    """``--device cuda|cpu``.  ``local``: the work runs here (default from the hardware, cuda
    needs a GPU); otherwise the value only names where it will run (train data, a Ray cluster)."""
    return click.option("--device", type=click.Choice(DEVICES), default=default,
                        show_default=default is not None, callback=_local_device if local else None,
                        help=help or "cuda (default when a GPU is visible) or cpu (C++ kernels, no GPU).")


DEVICE = device_option()
RULES = click.option("--rules", type=click.Choice(RULE_SETS), default=RulesProfile.STRICT.value, show_default=True,
                     help="strict: no torch compute in forward; kernelbench: torch ops allowed.")


def _reward_names() -> list[str]:
    from . import reward

    return reward.names()


REWARD = click.option("--reward", "reward_name", type=Registered(_reward_names, "reward scheme"), default="paper",
                      show_default=True, help="reward scheme (paper, milestones, speedup, or a registered one).")
JSON = click.option("--json", "as_json", is_flag=True,
                    help="print one JSON object on stdout instead of the summary (no progress lines).")
NO_PROGRESS = click.option("--no-progress", is_flag=True, envvar=NO_PROGRESS_ENV,
                           help=f"no stage lines or progress bars (shown only on a terminal anyway). "
                                f"Env: {NO_PROGRESS_ENV}=1.")
N_SETS = click.option("--n-sets", type=click.IntRange(1, 100), default=5, show_default=True,
                      help="random input sets for verification.")
NO_TIMING = click.option("--no-timing", is_flag=True, help="build and verify only.")
NO_COMPILE_BASELINE = click.option("--no-compile-baseline", is_flag=True, help="skip the torch.compile baseline.")
GPUS = click.option("--gpus", type=GpuList(), default=None,
                    help="GPU ids to use, e.g. 0,1 (default: every visible GPU); cuda only.")
KERNELBENCH = click.option("--kernelbench", type=click.Path(), default=None, envvar="CUDA_AGENT_KERNELBENCH",
                           help="KernelBench dataset (JSONL/parquet or a clone) for L<level>/<id> references. "
                                "Env: CUDA_AGENT_KERNELBENCH.")
EXISTING = click.Path(exists=True)
EXISTING_FILE = click.Path(exists=True, dir_okay=False)
EXISTING_DIR = click.Path(exists=True, file_okay=False)


def progress_on(no_progress: bool, as_json: bool = False) -> bool:
    """Progress lines go to stderr, and only when a person watches it: never with ``--json``,
    ``--no-progress`` or ``$CUDA_AGENT_NO_PROGRESS``, nor when stderr is not a terminal."""
    return not (no_progress or as_json) and sys.stderr.isatty()


class OneLine:
    """A usage error is one ``Error:`` line on stderr and exit status 2 (click would print the
    usage block above it); other click errors keep their own status.  Mixed into the root group
    and into every command or group a part defines (they can be invoked on their own too)."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)  # type: ignore[misc]
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)  # type: ignore[misc]
        except click.ClickException as e:
            click.echo("Error: " + " ".join(e.format_message().split()), err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


class OneLineGroup(OneLine, click.Group):
    pass


class OneLineCommand(OneLine, click.Command):
    pass


# Stage lines of one check: what check() reports through CheckOptions.progress, in its order.
# After "verify" comes the extra round at other sizes when the task allows one, else timing.
_AFTER = {"build": "reference", "reference": "start", "start": "verify", "verify": "extra round or timing",
          "extra": "timing", "timing": "close", "close": "baselines"}


class StageLines:
    """Stage lines on stderr while one check runs: a finished stage prints ``build  11.8 s``,
    the next one shows a spinner and its running time.  Use as a context manager and pass
    :meth:`lap` as ``CheckOptions.progress``; a disabled one does nothing."""

    def __init__(self, enabled: bool, *, verify: bool = True, baselines: bool = True) -> None:
        self.enabled = enabled
        self.verify, self.baselines = verify, baselines
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> "StageLines":
        if self.enabled:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=Console(stderr=True, highlight=False), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("build")
        return self

    def lap(self, stage: str, seconds: float) -> None:
        if self._bar is None:
            return
        self._bar.console.print(f"  {stage:<10} {seconds:6.1f} s", markup=False, highlight=False)
        nxt = _AFTER.get(stage)
        if (stage == "build" and not self.verify) or (stage == "close" and not self.baselines):
            nxt = None
        self._bar.reset(self._task, description=nxt or "done")

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
