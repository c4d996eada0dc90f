"""``Pool``: submit candidates, get CheckResults; the scheduler between the database and a back-end.

    with Pool("pool.sqlite", device="cuda", gpus=[0, 1]) as pool:
        ids = [pool.submit(task, path, priority=p) for path, p in candidates]
        results = pool.wait(ids)          # {id: CheckResult}

The scheduler thread moves jobs through the database: the highest-priority queued job (FIFO
within a priority) goes to a free builder; the highest-priority built job to a free slot.
Every transition is committed before or after the back-end acts, so a pool that dies loses
nothing: the next pool on the same database re-queues what was in flight.  A worker that dies
is replaced by the back-end and its job gets a verdict (``worker-died`` / ``worker-timeout``),
after ``retries`` further attempts if asked.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable

from ... import reward as rewards
from ...tasks import Task, TaskError, resolve
from ..check import CheckOptions
from ..isolation import Limits
from ..results import CheckResult
from .audit import Audit, audit_records
from .backend import BUILT, CHECKED, DIED, SLOTS_PER_GPU, Backend, Event, WorkItem
from .backends import get_backend
from .jobs import (BUILDING, DONE, QUEUED, READY, RUNNING, WORKER_DIED, WORKER_TIMEOUT, JobRecord,
                   failure_result, options_to_dict)
from .jobs import CHECKED as OUT_CHECKED
from .jobs import REJECTED_AT_BUILD
from .snapshot import SnapshotError
from .store import PoolError, Store


def job_timeout(o: CheckOptions) -> float:
    """Last-resort limit for one job on a slot: every stage's own timeout, summed, plus slack.
    (check() enforces the stage timeouts itself; this catches a judge that hangs.)"""
    return o.build_timeout + 2 * o.verify_timeout + 4 * o.time_timeout + 120.0


class Pool:
    """A queue of checks served by a back-end (``local`` or ``ray`` or a registered one).

    ``backend=None`` opens a client: it submits and reads (``wait`` polls the database) while
    another process serves the queue (``cuda-agent pool serve``); it never starts workers."""

    def __init__(self, db: str | Path = "pool.sqlite", *, device: str = "cuda", backend: str | None = "local",
                 gpus: list[int] | list[str] | int | None = None, slots: int | None = None,
                 slots_per_gpu: int = SLOTS_PER_GPU, build_workers: int | None = None,
                 job_timeout: float | None = None, retries: int = 0,
                 max_restarts: int = 3, keep_snapshots: bool = False, start: bool = True,
                 backend_options: dict[str, Any] | None = None) -> None:
        self.device = device
        self.store = Store(db, keep_snapshots=keep_snapshots)
        self.job_timeout = job_timeout
        self.retries = retries
        self.max_restarts = max_restarts
        self.backend_name = backend
        self.backend: Backend | None = None
        if backend is not None:
            try:
                factory = get_backend(backend)
            except KeyError as e:
                raise PoolError(str(e.args[0])) from None
            self.backend = factory(device=device, gpus=gpus, slots=slots, build_workers=build_workers,
                                   log_dir=self.store.logs, slots_per_gpu=slots_per_gpu, **(backend_options or {}))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._run_id: int | None = None
        self.recovered: tuple[list[int], list[int]] = ([], [])
        self.started_at: float | None = None
        if start:
            self.start()

    # --- life -------------------------------------------------------------------------
    def start(self) -> "Pool":
        if self._thread is not None:
            return self
        if self.backend is None:
            raise PoolError("this Pool is a client (backend=None): it submits and reads, another process serves")
        self.store.acquire()
        try:
            self.backend.start()
        except BaseException:
            self.store.release()
            raise
        self.recovered = self.store.recover(self.max_restarts)
        self._run_id = self.store.start_run(self.backend_name, self.backend.slots(),
                                            len(self.recovered[0]) + len(self.recovered[1]))
        self.started_at = time.time()
        self._thread = threading.Thread(target=self._serve, name="cuda-agent-pool", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; jobs not finished go back to the queue for the next pool."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=120)
            self._thread = None
            self.store.requeue_in_flight()
        elif self.backend is not None:
            try:
                self.backend.close()
            except Exception:
                pass
        if self._run_id is not None:
            self.store.stop_run(self._run_id)
            self._run_id = None
        self.store.release()

    @property
    def error(self) -> str | None:
        """Why the scheduler thread stopped, if it did (the pool then serves nothing)."""
        return self._error

    def __enter__(self) -> "Pool":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- submit / read ----------------------------------------------------------------
    def submit(self, task: Task | str | Path, solution: str | Path, options: CheckOptions | None = None, *,
               priority: int = 0, tag: str = "", key: str | None = None, timeout: float | None = None,
               kernelbench: str | None = None) -> int:
        """Queue one check; the solution is copied now.  Returns the job id.

        ``task`` is a Task or anything :func:`cuda_agent.tasks.resolve` accepts.  ``key``
        makes the submit idempotent (the same key returns the same job); ``timeout`` bounds the
        job's time on a slot (the worker is killed and replaced past it)."""
        o = options or CheckOptions(device=self.device)
        if o.device != self.device:
            raise PoolError(f"this pool checks on {self.device!r}; the job asks for {o.device!r}")
        if o.reward not in rewards.names():
            raise PoolError(f"unknown reward scheme {o.reward!r}; known: {', '.join(rewards.names())}")
        if not isinstance(task, Task):
            try:
                task = resolve(task, kernelbench)
            except TaskError as e:
                raise PoolError(str(e)) from None
        try:
            jid = self.store.submit(task, solution, o, priority=priority, tag=tag, key=key, timeout=timeout)
        except SnapshotError as e:
            raise PoolError(str(e)) from None
        return jid

    def job(self, job_id: int) -> JobRecord:
        return self.store.get(job_id)

    def jobs(self, ids: Iterable[int] | None = None) -> list[JobRecord]:
        return self.store.jobs(ids)

    def counts(self, ids: Iterable[int] | None = None) -> dict[str, int]:
        return self.store.counts(ids)

    def results(self, ids: Iterable[int] | None = None) -> dict[int, CheckResult]:
        """Results of the finished jobs among ``ids`` (all by default)."""
        return {r.id: r.result for r in self.store.jobs(ids, status=DONE) if r.result is not None}

    def wait(self, ids: Iterable[int] | None = None, timeout: float | None = None,
             on_progress: Callable[[dict[str, int]], None] | None = None, poll: float = 0.25) -> dict[int, CheckResult]:
        """Block until the jobs (all jobs by default) are done; return their results.  In a
        process that does not serve the queue, this polls the database that a server fills."""
        idl = None if ids is None else list(ids)
        deadline = None if timeout is None else time.time() + timeout
        while True:
            counts = self.store.counts(idl)
            if on_progress is not None:
                on_progress(counts)
            if sum(n for s, n in counts.items() if s != DONE) == 0:
                return self.results(idl)
            if self._error is not None:
                raise PoolError(f"the pool's scheduler stopped: {self._error}")
            if self._thread is None and not self.store.served():
                raise PoolError(f"no pool is serving {self.store.db} (start() this one, or run "
                                f"`cuda-agent pool serve --db {self.store.db}`)")
            if deadline is not None and time.time() > deadline:
                raise TimeoutError(f"jobs not finished after {timeout} s: {counts}")
            time.sleep(poll)

    def result(self, job_id: int, timeout: float | None = None) -> CheckResult:
        return self.wait([job_id], timeout=timeout)[job_id]

    def audit(self, ids: Iterable[int] | None = None) -> Audit:
        return audit_records(self.store.jobs(ids))

    # --- the scheduler ----------------------------------------------------------------
    def _item(self, rec: JobRecord, stage: str) -> WorkItem:
        snap = Path(rec.snapshot)
        root = snap if snap.is_dir() else snap.parent
        if stage == "build":
            limit = rec.options.build_timeout + 120.0  # check() bounds the compiler; this bounds the builder
        else:
            limit = rec.timeout or self.job_timeout or job_timeout(rec.options)
        # the candidate must not reach the pool's own state: its database (another job's result
        # or its own could be written there before the pool reads it) and the other snapshots
        db = self.store.db
        lim = rec.options.limits or Limits()
        conceal = (*lim.conceal, str(db), f"{db}-wal", f"{db}-shm", f"{db}.lock", str(self.store.root))
        opts = options_to_dict(replace(rec.options, limits=replace(lim, conceal=conceal)))
        return WorkItem(job=rec.id, task=rec.task.to_dict(), options=opts,
                        solution=rec.snapshot, timeout=limit, snapshot_root=str(root))

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                self._fill()
                for ev in self.backend.poll(0.2):
                    self._handle(ev)
        except PoolError as e:
            self._error = str(e)
        except BaseException:
            self._error = traceback.format_exc(limit=8)
        finally:
            try:
                self.backend.close()
            except Exception:
                pass

    def _fill(self) -> None:
        for _ in range(self.backend.free_builders()):
            rec = self.store.claim(QUEUED, BUILDING, build_start=time.time())
            if rec is None:
                break
            name = self.backend.dispatch_build(self._item(rec, "build"))
            self.store.update(rec.id, build_worker=name)
        for slot in self.backend.free_slots():
            rec = self.store.claim(READY, RUNNING, slot=slot, start=time.time(), end=None)
            if rec is None:
                break
            self.store.update(rec.id, attempts=rec.attempts + 1)
            self.backend.dispatch_check(slot, self._item(rec, "slot"))

    def _handle(self, ev: Event) -> None:
        try:
            rec = self.store.get(ev.job)
        except PoolError:
            return
        if rec.status == DONE:
            return
        if ev.role == "build":
            if ev.kind == BUILT and ev.result is not None:
                self.store.finish(ev.job, CheckResult.from_dict(ev.result), REJECTED_AT_BUILD,
                                  build_worker=ev.worker, build_end=ev.end)
            else:
                note = ("" if ev.kind == BUILT else
                        f"build stage failed ({ev.reason.strip().splitlines()[-1] if ev.reason.strip() else ev.kind}); "
                        f"the slot's check() builds it")
                self.store.update(ev.job, status=READY, build_worker=ev.worker, build_end=ev.end,
                                  note=note or (ev.reason or ""))
            return
        fields = dict(slot=ev.worker, device=ev.device, worker_pid=ev.pid, visible_devices=ev.visible,
                      start=ev.start if ev.start is not None else rec.start, end=ev.end)
        if ev.kind == CHECKED and ev.result is not None:
            self.store.finish(ev.job, CheckResult.from_dict(ev.result), OUT_CHECKED, **fields)
            return
        if ev.kind == DIED and rec.attempts <= self.retries:
            self.store.update(ev.job, status=READY, note=f"retrying: {ev.reason}", **fields)
            return
        if ev.kind == DIED:
            outcome = WORKER_TIMEOUT if ev.timeout else WORKER_DIED
            stage = "worker-timeout" if ev.timeout else "worker-died"
            msg = f"pool: {ev.reason}; the worker was replaced" + (
                f" (after {rec.attempts} attempts)" if rec.attempts > 1 else "")
        else:
            outcome, stage = WORKER_DIED, "internal"
            msg = f"pool: the worker failed on this job: {ev.reason.strip()[-1500:]}"
        self.store.finish(ev.job, failure_result(rec.task, rec.options, stage, msg, compiled=True), outcome,
                          note=msg, **fields)
