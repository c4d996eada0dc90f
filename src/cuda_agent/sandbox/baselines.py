"""Eager and ``torch.compile`` baseline times, measured in their own runner process with the
candidate's recipe and precision settings (TF32 off), cached in sqlite per
(task sha, device name, torch version, recipe, rotation, digest of the measuring code); an
implausible time (non-finite, not positive, above ``MAX_MS``) is an error and never cached."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import platform
import shutil
import sqlite3
import time
from pathlib import Path

from ..tasks import Task
from .cache import cache_root
from .process import RunnerDied, RunnerProcess, job_root
from .timing import Recipe


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        return "cpu:" + next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                             if l.startswith("model name"))
    except (OSError, StopIteration):
        return "cpu:" + platform.processor()


def _db() -> sqlite3.Connection:
    con = sqlite3.connect(cache_root() / "baselines.sqlite", timeout=60)
    con.execute("CREATE TABLE IF NOT EXISTS baseline (key TEXT PRIMARY KEY, value TEXT, created REAL)")
    return con


MEASURING_CODE = ("timing.py", "runner.py", "inputs.py", "baselines.py")
MAX_MS = 1e7
"""A baseline above this (~3 hours a call), non-finite or not positive is a measurement error."""


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """The code that measures (read once per process): a change to it makes every cached
    baseline stale."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in MEASURING_CODE:
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def plausible(val: dict) -> bool:
    """Every measured time is finite, positive and below ``MAX_MS``."""
    times = [v for k, v in val.items() if k.endswith("_ms")]
    return bool(times) and all(isinstance(v, (int, float)) and math.isfinite(v) and 0 < v < MAX_MS for v in times)


def _key(task: Task, device: str, recipe: Recipe, n_sets: int, compile: bool) -> str:
    import torch

    parts = [task.sha, device_name(device), torch.__version__, json.dumps(recipe.__dict__, sort_keys=True),
             str(n_sets), str(compile), _code_digest()]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def measure(task: Task, device: str, recipe: Recipe, n_sets: int, compile: bool = True,
            timeout: float = 600.0) -> dict:
    """Time the reference eager (and compiled) in a fresh runner process; no cache."""
    import secrets

    job_dir = job_root("cuda-agent-base-")
    out: dict = {}
    runner = None
    try:
        f = job_dir / "reference.py"
        f.write_text(task.source)
        job = {"device": device, "task_file": str(f), "solution_file": str(f), "class_name": "Model",
               "rules": "none", "init_seed": 0}
        (job_dir / "job.json").write_text(json.dumps(job))
        # compiler caches of its own: /tmp/torchinductor_* and ~/.triton are writable by earlier
        # candidates, which could leave slowed generated code for this baseline to load
        env = {"TORCHINDUCTOR_CACHE_DIR": str(job_dir / "inductor"), "TRITON_CACHE_DIR": str(job_dir / "triton"),
               "CUDA_CACHE_PATH": str(job_dir / "nv")}
        runner = RunnerProcess(job_dir / "job.json", env=env)
        rep = runner.request({"cmd": "load"}, timeout)
        if not rep["ok"]:
            return {"error": f"reference failed to load: {rep['error']}"}
        seeds = [secrets.randbits(31) for _ in range(n_sets)]
        for kind in (("eager", False), ("compile", True))[: 2 if compile else 1]:
            rep = runner.request({"cmd": "time", "seeds": seeds, "recipe": recipe.__dict__,
                                  "compile": kind[1]}, timeout)
            if not rep["ok"]:
                out["error"] = f"{kind[0]} baseline failed: {rep['error']}"
                break
            out[f"{kind[0]}_ms"] = rep["median_ms"]
            out[f"{kind[0]}_spread"] = rep["spread"]
            out[f"{kind[0]}_n"] = rep["n"]
    except RunnerDied as e:
        out["error"] = f"baseline runner: {e}"
    finally:
        if runner is not None:
            runner.close()
        shutil.rmtree(job_dir, ignore_errors=True)
    return out


def get(task: Task, device: str, recipe: Recipe, n_sets: int, compile: bool = True,
        timeout: float = 600.0, refresh: bool = False) -> dict:
    """Cached baselines; measured on first use.  Failures are not cached."""
    key = _key(task, device, recipe, n_sets, compile)
    con = _db()
    try:
        if not refresh:
            row = con.execute("SELECT value FROM baseline WHERE key=?", (key,)).fetchone()
            if row:
                cached = json.loads(row[0])
                if plausible(cached):
                    return {**cached, "cached": True}
        val = measure(task, device, recipe, n_sets, compile, timeout)
        if "error" not in val and not plausible(val):
            val["error"] = ("implausible baseline times " + ", ".join(f"{k}={v!r}" for k, v in val.items()
                                                                     if k.endswith("_ms")))
        if "error" not in val:
            con.execute("INSERT OR REPLACE INTO baseline VALUES (?,?,?)", (key, json.dumps(val), time.time()))
            con.commit()
        return {**val, "cached": False}
    finally:
        con.close()
