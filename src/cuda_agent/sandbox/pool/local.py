"""The local back-end (default): worker processes on this machine.

``slots_per_gpu`` slot workers per GPU (default 1), started with ``CUDA_VISIBLE_DEVICES=<that
GPU>`` and each given one job at a time; on the CPU back-end ``slots=N`` workers with no GPU in
view.  Workers on one device verify side by side and time one at a time: each check takes the
device's lock itself (sandbox/devicelock.py), shared or exclusive.
``build_workers`` CPU builders run the build stage in parallel.  Workers are
``python -m cuda_agent.sandbox.pool.worker`` processes speaking JSON lines (nothing is
unpickled); a worker that exits, crashes or runs past its job's timeout (then it is killed)
is reported as ``died`` and replaced by a fresh one.  A worker gets jobs only once it has
said it is ready (imports and CUDA context done); workers that die before that three times
in a row stop the pool with their log's tail (a broken install must not spin).  Each
worker's stderr is appended to ``<log_dir>/<name>.log``.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .backend import (BUILT, CHECKED, DIED, FAILED, SLOTS_PER_GPU, Backend, Event, WorkItem, check_slots_per_gpu,
                      register_backend)
from .devices import gpu_arch, host, visible_gpus
from .store import PoolError


MAX_EARLY_DEATHS = 3


def default_build_workers(n_slots: int) -> int:
    """Half the cores, up to 8 per slot: a cold build (7 s for a workspace, about a minute for a
    single file's load_inline on the H200) takes longer than a warm check (~3 s), so one GPU
    needs several builders ahead of it; each build is one or two compiler processes."""
    cpus = os.cpu_count() or 2
    return max(1, min(8 * n_slots, cpus // 2))


@dataclass
class _Worker:
    name: str
    role: str
    env: dict[str, str]
    device_key: str
    proc: subprocess.Popen | None = None
    buf: bytes = b""
    item: WorkItem | None = None
    since: float = 0.0
    ready: bool = False
    pid: int | None = None
    log: object | None = None
    early_deaths: int = 0
    """Deaths in a row before the worker said it was ready (a broken install, not a job)."""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


@register_backend("local")
class LocalBackend(Backend):
    name = "local"

    def __init__(self, device: str = "cuda", gpus: list[str] | list[int] | int | None = None,
                 slots: int | None = None, build_workers: int | None = None, log_dir: str | Path | None = None,
                 env: dict[str, str] | None = None, slots_per_gpu: int = SLOTS_PER_GPU) -> None:
        self.device = device
        per_gpu = check_slots_per_gpu(device, slots_per_gpu)
        self.log_dir = Path(log_dir) if log_dir else None
        base_env = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                    "CUDA_AGENT_POOL_PARENT": str(os.getpid()), **(env or {})}
        self._workers: list[_Worker] = []
        hostname = host()
        if device == "cuda":
            if isinstance(gpus, int):
                ids = visible_gpus()[:gpus]
            elif gpus is None:
                ids = visible_gpus()
            else:
                ids = [str(g) for g in gpus]
            if slots is not None and slots != len(ids):
                raise PoolError("on --device cuda the slots are the GPUs: give gpus, not slots")
            if not ids:
                raise PoolError("no GPU found for the pool (use device='cpu' with slots=N for CPU slots)")
            arch = gpu_arch(ids[0])
            if arch:
                base_env.setdefault("CUDA_AGENT_ARCH", arch)
            for g in ids:
                for k in range(per_gpu):  # gpu:0 alone; gpu:0.0, gpu:0.1, ... when it has several
                    self._workers.append(_Worker(f"gpu:{g}" + (f".{k}" if per_gpu > 1 else ""), "slot",
                                                 {**base_env, "CUDA_VISIBLE_DEVICES": g}, f"{hostname}/gpu:{g}"))
            builder_env = {**base_env, "CUDA_VISIBLE_DEVICES": ",".join(ids), "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
        elif device == "cpu":
            if gpus:
                raise PoolError("device='cpu' has no GPUs: give slots=N")
            n = 1 if slots is None else int(slots)
            if n < 1:
                raise PoolError("slots must be at least 1")
            for i in range(n):
                self._workers.append(_Worker(f"cpu:{i}", "slot", {**base_env, "CUDA_VISIBLE_DEVICES": ""},
                                             f"{hostname}/cpu-slot:{i}"))
            builder_env = {**base_env, "CUDA_VISIBLE_DEVICES": ""}
        else:
            raise PoolError(f"unknown device {device!r} (cuda or cpu)")
        n_slots = len(self._workers)
        nb = default_build_workers(n_slots) if build_workers is None else int(build_workers)
        if nb < 1:
            raise PoolError("build_workers must be at least 1")
        for i in range(nb):
            self._workers.append(_Worker(f"build:{i}", "build", dict(builder_env), f"{hostname}/build:{i}"))
        self._sel = selectors.DefaultSelector()
        self._replaced = 0
        self._closed = False

    # --- processes --------------------------------------------------------------------
    def _spawn(self, w: _Worker) -> None:
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = open(self.log_dir / f"{w.name.replace(':', '-')}.log", "ab")
        w.proc = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent.sandbox.pool.worker", w.role, w.name, self.device],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log if log else subprocess.DEVNULL,
            env={**os.environ, **w.env}, start_new_session=True)
        if log is not None:
            log.close()
        w.pid, w.buf, w.item, w.ready = w.proc.pid, b"", None, False
        self._sel.register(w.proc.stdout, selectors.EVENT_READ, w)

    def _kill(self, w: _Worker) -> int | None:
        p = w.proc
        if p is None:
            return None
        try:
            self._sel.unregister(p.stdout)
        except (KeyError, ValueError):
            pass
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            code = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        for f in (p.stdin, p.stdout):
            try:
                f.close()  # type: ignore[union-attr]
            except Exception:
                pass
        w.proc = None
        return code

    def start(self) -> None:
        """Nothing to do here: workers are spawned by the first ``poll`` (in the scheduler
        thread, so that ``PR_SET_PDEATHSIG`` ties them to the pool's life)."""

    # --- Backend ----------------------------------------------------------------------
    def slots(self) -> list[str]:
        return [w.name for w in self._workers if w.role == "slot"]

    def device_of(self, slot: str) -> str:
        return next(w.device_key for w in self._workers if w.name == slot)

    def free_slots(self) -> list[str]:
        return [w.name for w in self._workers if w.role == "slot" and w.proc is not None and w.ready and w.item is None]

    def free_builders(self) -> int:
        return sum(1 for w in self._workers if w.role == "build" and w.proc is not None and w.ready and w.item is None)

    def _send(self, w: _Worker, item: WorkItem) -> None:
        w.item, w.since = item, time.time()
        try:
            assert w.proc is not None and w.proc.stdin is not None
            w.proc.stdin.write((json.dumps(item.to_dict()) + "\n").encode())
            w.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the next poll sees the worker dead and reports the job

    def dispatch_build(self, item: WorkItem) -> str:
        w = next(w for w in self._workers if w.role == "build" and w.proc is not None and w.ready and w.item is None)
        self._send(w, item)
        return w.name

    def dispatch_check(self, slot: str, item: WorkItem) -> None:
        w = next(w for w in self._workers if w.name == slot)
        if w.item is not None or w.proc is None or not w.ready:
            raise RuntimeError(f"slot {slot} is not free")  # a scheduler bug, never a user's
        self._send(w, item)

    def poll(self, timeout: float) -> list[Event]:
        events: list[Event] = []
        if self._closed:
            return events
        for w in self._workers:
            if w.proc is None:
                self._spawn(w)
        for key, _ in self._sel.select(timeout=timeout):
            w = key.data
            try:
                chunk = os.read(key.fd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                events += self._died(w, timeout_hit=False)
                continue
            w.buf += chunk
            while b"\n" in w.buf:
                line, w.buf = w.buf.split(b"\n", 1)
                ev = self._message(w, line)
                if ev is not None:
                    events.append(ev)
        now = time.time()
        for w in self._workers:
            if w.proc is None:
                continue
            if w.item is not None and now - w.since > w.item.timeout:
                events += self._died(w, timeout_hit=True)
            elif w.proc.poll() is not None:
                events += self._died(w, timeout_hit=False)
        return events

    def _message(self, w: _Worker, line: bytes) -> Event | None:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            return None  # not ours (the protocol fd is private; ignore anything odd)
        if msg.get("ready"):
            w.ready = True
            return None
        item = w.item
        if item is None or msg.get("job") != item.job:
            return None
        w.item = None
        common = dict(job=item.job, worker=w.name, role=w.role, pid=msg.get("pid"), visible=msg.get("visible"),
                      device=w.device_key, start=msg.get("start", w.since), end=msg.get("end", time.time()))
        if "error" in msg:
            return Event(FAILED, reason=msg["error"], **common)
        return Event(BUILT if w.role == "build" else CHECKED, result=msg.get("result"),
                     reason=msg.get("note", ""), **common)

    def _died(self, w: _Worker, timeout_hit: bool) -> list[Event]:
        item, since, pid = w.item, w.since, w.pid
        code = self._kill(w)
        if not w.ready:
            w.early_deaths += 1
            if w.early_deaths >= MAX_EARLY_DEATHS:
                log = self.log_dir / f"{w.name.replace(':', '-')}.log" if self.log_dir else None
                tail = log.read_text(errors="replace")[-1500:] if log and log.exists() else ""
                raise PoolError(f"worker {w.name} {_describe_exit(code)} at start {w.early_deaths} times in a row; "
                                f"the pool stops (log {log}):\n{tail}")
        else:
            w.early_deaths = 0
        if not self._closed:
            self._replaced += 1
            self._spawn(w)
        if item is None:
            return []
        if timeout_hit:
            why = f"the {w.role} worker {w.name} (pid {pid}) ran past the job's {item.timeout:.0f} s limit and was killed"
        else:
            why = f"the {w.role} worker {w.name} (pid {pid}) {_describe_exit(code)} while it held this job"
        return [Event(DIED, item.job, w.name, w.role, start=since, pid=pid, visible=w.env.get("CUDA_VISIBLE_DEVICES"),
                      device=w.device_key, reason=why, timeout=timeout_hit)]

    def replaced(self) -> int:
        return self._replaced

    def worker_pids(self) -> dict[str, int | None]:
        return {w.name: (w.proc.pid if w.proc is not None else None) for w in self._workers}

    def close(self) -> None:
        self._closed = True
        for w in self._workers:
            p = w.proc
            if p is not None and p.poll() is None and w.item is None:
                try:
                    p.stdin.close()  # type: ignore[union-attr]
                except Exception:
                    pass
        deadline = time.time() + 5
        for w in self._workers:
            p = w.proc
            if p is not None:
                try:
                    p.wait(timeout=max(0.0, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    pass
            self._kill(w)
        self._sel.close()
