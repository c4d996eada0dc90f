"""What a pool worker does with one job, and the local worker process around it.

``build_job``: the build stage, on a CPU builder.  It runs ``check()`` with verification off,
which compiles through the content-addressed build cache; a failed build (or a solution that
is bad input) is then already the final CheckResult, so it never takes a GPU.  A good build
leaves its objects and library in the cache for the slot.  (A builder that cannot see a GPU,
e.g. a Ray CPU node, compiles with ``build()`` directly and lets the slot give every verdict.)

``check_job``: ``check()`` on a slot; the slot's check finds the build in the cache.

``python -m cuda_agent.sandbox.pool.worker ROLE NAME DEVICE`` is the local back-end's worker:
it warms up (torch, the evaluator, a CUDA context on its one GPU), then reads one JSON
:class:`~.backend.WorkItem` per line on stdin and answers one JSON line per job.  The
protocol has its own file descriptor: anything the task's code prints goes to stderr
(the worker's log).  The worker dies with the pool (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any


def _cuda_visible() -> bool:
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # no CUDA context in a builder
    import torch

    return torch.cuda.is_available()


def build_job(item: dict[str, Any]) -> dict[str, Any]:
    """Build stage; ``{"result": CheckResult dict}`` when that is the final verdict, else ``{"result": None}``."""
    from ...tasks import Task, TaskError
    from ..build import build
    from ..check import check, prebuild, resolve_solution
    from .jobs import options_from_dict

    task = Task.from_dict(item["task"])
    o = options_from_dict(item["options"])
    start = time.time()
    if o.device == "cuda" and not _cuda_visible():
        try:
            _, _, kdir = resolve_solution(item["solution"])
            if kdir is not None:
                build(kdir, "cuda", timeout=o.build_timeout)
        except TaskError:
            pass  # the slot's check() says so
        return {"result": None, "start": start, "end": time.time(), "note": "built without a GPU in view"}
    r = check(task, item["solution"], replace(o, verify=False, timing=False, baselines=False))
    if r.compiled and o.verify:  # a single file builds when imported: here, not on the GPU slot
        prebuild(task, item["solution"], o)
    return {"result": None if r.compiled else r.to_dict(), "start": start, "end": time.time()}


def check_job(item: dict[str, Any]) -> dict[str, Any]:
    """The full check on this worker's slot."""
    from ...tasks import Task
    from ..check import check
    from .jobs import options_from_dict

    start = time.time()
    r = check(Task.from_dict(item["task"]), item["solution"], options_from_dict(item["options"]))
    return {"result": r.to_dict(), "start": start, "end": time.time()}


def warm_up(role: str, device: str) -> None:
    """Pay the imports (and, on a slot, the CUDA context) once, not per job."""
    import torch  # noqa: F401

    from .. import check  # noqa: F401

    if role == "slot" and device == "cuda" and torch.cuda.is_available():
        torch.zeros(1, device="cuda")
    if role == "slot":  # each check finds its runner started (process.Spares)
        from ..process import spares

        spares.enable()


def _die_with_parent() -> None:
    expected = int(os.environ.get("CUDA_AGENT_POOL_PARENT", "0") or 0)
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if expected and os.getppid() != expected:  # the pool died before prctl took effect
        os._exit(1)


def main(argv: list[str]) -> int:
    role, name, device = argv
    _die_with_parent()
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints from task code go to the log, never into the protocol

    def send(msg: dict[str, Any]) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    if role == "build" and device == "cuda":
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    try:
        warm_up(role, device)
    except Exception:
        print(traceback.format_exc(), file=sys.stderr)
    send({"ready": True, "pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")})
    fn = check_job if role == "slot" else build_job
    for line in sys.stdin:
        if not line.strip():
            continue
        item = json.loads(line)
        print(f"[{time.strftime('%H:%M:%S')}] {name}: job {item['job']}", file=sys.stderr, flush=True)
        try:
            out = fn(item)
        except BaseException:
            out = {"error": traceback.format_exc(limit=5)}
        send({"job": item["job"], "pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), **out})
    return 0


def materialize(files: dict[str, str], rel: str) -> tuple[str, Path]:
    """Write a shipped snapshot (``{relative path: base64}``) into a fresh directory; return
    the path to hand to check() and the directory (for removal)."""
    import base64
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="cuda-agent-pool-"))
    for r, b64 in files.items():
        p = root / r
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(base64.b64decode(b64))
    return str(root / rel if rel else root), root


def pack(snapshot_root: str) -> dict[str, str]:
    """The inverse of :func:`materialize`: the snapshot's files as base64 strings."""
    import base64

    root = Path(snapshot_root)
    return {str(p.relative_to(root)): base64.b64encode(p.read_bytes()).decode()
            for p in sorted(root.rglob("*")) if p.is_file()}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
