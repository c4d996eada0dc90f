"""The evaluation child: the loop that runs task code, and how it is contained.

Task code (model-written, with the ``llm`` composer) is run like a candidate in a check: behind
the sandbox's launcher (``cuda_agent.sandbox.launcher``, planned by ``sandbox.isolation``), in new network, mount and PID
namespaces where the platform allows, the file tree read-only but for the child's job directory
(``TMPDIR`` points into it, so the task's files and torch.compile's caches land there), no
capabilities, no core dumps, a file-size limit.  A spawned child gets a job directory of its
own; children forked by the fork server share the server's (and its namespaces).

Neither the pipeline's log file nor the device timing locks can be opened for writing in
there: the log arrives as the child's stderr (opened by the parent), the locks are created by
the parent and only opened for reading (``flock`` needs no write access).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ..sandbox.isolation import Limits, launcher_argv, launcher_env, plan_for
from ..sandbox.process import job_root
from .evaluate import FilterConfig


@dataclass
class Contained:
    """A command behind the launcher: its argv and environment, its job directory, what applied."""

    argv: list[str]
    env: dict[str, str]
    job_dir: Path
    isolation: str
    warnings: list[str]

    def cleanup(self) -> None:
        shutil.rmtree(self.job_dir, ignore_errors=True)


def contain(argv: list[str], env: dict[str, str] | None = None, limits: Limits | None = None,
            expose: tuple[str, ...] = ()) -> Contained:
    """``argv`` as a check's runner is run: the plan the sandbox makes for a job in a fresh
    directory (nothing but the directory and, read-only, ``expose``: no solution, no task files)."""
    job_dir = job_root("cuda-agent-synth-")  # where a check's job goes: it gets a private /tmp there
    (job_dir / "job.json").write_text(json.dumps({"expose_ro": list(expose)}))
    plan = plan_for(job_dir / "job.json", limits or Limits())
    # the job's own home, tool caches (inductor's above all) and TMPDIR, as a check's runner has them
    return Contained(launcher_argv(plan, argv), launcher_env({**plan.env, **(env or {})}), job_dir, plan.describe(),
                     plan.warnings)


def lock_dirs(cfg: FilterConfig) -> tuple[str, ...]:
    """What a contained evaluation must see of the host: the directory of the timing locks (it
    opens its device's lock, made by the parent, read-only)."""
    return (str(Path(cfg.timing_lock).resolve().parent),) if cfg.timing_lock else ()


def config(cfg_dict: dict[str, Any]) -> FilterConfig:
    return FilterConfig(**{**cfg_dict, "band_ms": tuple(cfg_dict["band_ms"]) if cfg_dict.get("band_ms") else None})


def quiet_stdio() -> None:
    """stdin from /dev/null, stdout into stderr (the log): a task's prints reach no protocol."""
    nul = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nul, 0)
    os.close(nul)
    os.dup2(2, 1)


def serve_loop(conn_in: Connection, conn_out: Connection, cfg: FilterConfig) -> None:
    """Receive task sources on ``conn_in``, send phases and verdicts on ``conn_out``."""
    import torch

    torch.set_num_threads(max(1, cfg.threads))
    try:
        import torch._inductor.config as ic

        ic.compile_threads = 1
    except Exception:  # noqa: BLE001
        pass
    from .evaluate import safe_run_filters

    workdir = Path(tempfile.mkdtemp(prefix="synth_eval_"))
    conn_out.send(("ready", None))
    while True:
        try:
            msg = conn_in.recv()
        except EOFError:
            return
        if msg is None:
            return
        verdict = safe_run_filters(msg, cfg, workdir, phase=lambda p: conn_out.send(("phase", p)))
        conn_out.send(("result", verdict.to_dict()))


def main() -> None:
    """A spawned child (argv[1]: the filter config as JSON): task sources arrive on fd 0,
    messages leave on (a copy of) fd 1."""
    conn_in = Connection(os.dup(0), writable=False)
    conn_out = Connection(os.dup(1), readable=False)
    quiet_stdio()
    serve_loop(conn_in, conn_out, config(json.loads(sys.argv[1])))

