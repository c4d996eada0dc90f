"""The pool's persistent state: jobs and results in sqlite (WAL), solution snapshots beside it.

``<db>`` holds the ``jobs`` table (task source, options, status, slot, times, the
CheckResult JSON) and ``runs`` (one row per pool process that served the queue).
``<db>.d/snapshots/`` holds the frozen solutions, ``<db>.d/logs/`` the workers' stderr.
Any process may submit or read; only the process holding ``<db>.lock`` (a running pool)
moves jobs between states, and on taking the lock it recovers what a dead predecessor left
in flight.  Every state change is one committed transaction, so a ``kill -9`` at any moment
loses nothing that was committed.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterable

from ...tasks import Task
from ..check import CheckOptions
from ..results import CheckResult
from . import snapshot
from .jobs import (BUILDING, DONE, GAVE_UP, QUEUED, READY, RUNNING, STATUSES, JobRecord, dumps,
                   failure_result, options_from_dict, options_to_dict)

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  key TEXT UNIQUE,
  status TEXT NOT NULL,
  priority INTEGER NOT NULL DEFAULT 0,
  tag TEXT NOT NULL DEFAULT '',
  task TEXT NOT NULL,
  task_id TEXT NOT NULL,
  options TEXT NOT NULL,
  solution TEXT NOT NULL,
  snapshot TEXT NOT NULL,
  submitted REAL NOT NULL,
  timeout REAL,
  build_worker TEXT, build_start REAL, build_end REAL,
  slot TEXT, device TEXT, worker_pid INTEGER, visible_devices TEXT,
  start REAL, end REAL,
  attempts INTEGER NOT NULL DEFAULT 0,
  restarts INTEGER NOT NULL DEFAULT 0,
  outcome TEXT, note TEXT NOT NULL DEFAULT '',
  result TEXT
);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(status, priority DESC, id);
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  pid INTEGER NOT NULL, backend TEXT NOT NULL, slots TEXT NOT NULL,
  started REAL NOT NULL, stopped REAL, recovered INTEGER NOT NULL DEFAULT 0
);
"""

_COLUMNS = ("build_worker", "build_start", "build_end", "slot", "device", "worker_pid", "visible_devices",
            "start", "end", "attempts", "restarts", "outcome", "note", "status")


class PoolError(RuntimeError):
    """Misuse of the pool (bad arguments, database held by another pool); one clear sentence."""


class Store:
    """Jobs in sqlite + snapshots on disk.  Thread-safe: one connection per thread."""

    def __init__(self, db: str | Path, keep_snapshots: bool = False) -> None:
        self.db = Path(db).resolve()
        if str(db) == ":memory:":
            raise PoolError("the pool needs a database file (it must survive a restart), not :memory:")
        self.db.parent.mkdir(parents=True, exist_ok=True)
        self.root = self.db.with_name(self.db.name + ".d")
        self.snapshots = self.root / "snapshots"
        self.logs = self.root / "logs"
        self.snapshots.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.keep_snapshots = keep_snapshots
        self._local = threading.local()
        self._lock_fd: int | None = None
        con = self._con()
        con.executescript(SCHEMA)
        con.commit()

    # --- connections ------------------------------------------------------------------
    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.db, timeout=60, isolation_level=None)
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA busy_timeout=60000")
            self._local.con = con
        return con

    def _tx(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Cursor:
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            cur = con.execute(sql, tuple(args))
            con.execute("COMMIT")
            return cur
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None

    # --- the serving lock -------------------------------------------------------------
    def acquire(self) -> None:
        """Become the one process that serves this queue (released by the OS if we die)."""
        path = self.db.with_name(self.db.name + ".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        for attempt in range(20):  # a reader's served() probe holds the lock for microseconds
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt < 19:
                    time.sleep(0.05)
                    continue
                other = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise PoolError(f"another pool (pid {other}) is serving {self.db}; one pool per database") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def served(self) -> bool:
        """Whether some process (this one included) holds ``<db>.lock``, i.e. serves the queue."""
        if self._lock_fd is not None:
            return True
        path = self.db.with_name(self.db.name + ".lock")
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- submit -----------------------------------------------------------------------
    def submit(self, task: Task, solution: str | Path, options: CheckOptions, priority: int = 0,
               tag: str = "", key: str | None = None, timeout: float | None = None) -> int:
        """Snapshot ``solution`` and queue it; with ``key``, a second submit of the same key
        returns the first job's id (so re-running a job file resumes instead of duplicating)."""
        if key is not None:
            row = self._con().execute("SELECT id FROM jobs WHERE key=?", (key,)).fetchone()
            if row:
                return int(row[0])
        dest = self.snapshots / uuid.uuid4().hex
        path = snapshot.take(solution, dest)
        try:
            cur = self._tx(
                "INSERT INTO jobs (key, status, priority, tag, task, task_id, options, solution, snapshot, "
                "submitted, timeout) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (key, QUEUED, int(priority), tag, dumps(task.to_dict()), task.id, dumps(options_to_dict(options)),
                 str(Path(solution).resolve()), str(path), time.time(), timeout))
            return int(cur.lastrowid)
        except sqlite3.IntegrityError:
            snapshot.remove(dest)
            row = self._con().execute("SELECT id FROM jobs WHERE key=?", (key,)).fetchone()
            return int(row[0])
        except BaseException:
            snapshot.remove(dest)
            raise

    # --- read -------------------------------------------------------------------------
    @staticmethod
    def _record(row: sqlite3.Row) -> JobRecord:
        res = json.loads(row["result"]) if row["result"] else None
        return JobRecord(
            id=row["id"], status=row["status"], priority=row["priority"],
            task=Task.from_dict(json.loads(row["task"])), options=options_from_dict(json.loads(row["options"])),
            solution=row["solution"], snapshot=row["snapshot"], submitted=row["submitted"], tag=row["tag"],
            timeout=row["timeout"],
            key=row["key"], build_worker=row["build_worker"], build_start=row["build_start"],
            build_end=row["build_end"], slot=row["slot"], device=row["device"], worker_pid=row["worker_pid"],
            visible_devices=row["visible_devices"], start=row["start"], end=row["end"], attempts=row["attempts"],
            restarts=row["restarts"], outcome=row["outcome"], note=row["note"],
            result=CheckResult.from_dict(res) if res else None)

    def get(self, job_id: int) -> JobRecord:
        row = self._con().execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise PoolError(f"no job {job_id} in {self.db}")
        return self._record(row)

    def jobs(self, ids: Iterable[int] | None = None, status: str | None = None) -> list[JobRecord]:
        sql, args = "SELECT * FROM jobs", []
        conds = []
        if ids is not None:
            ids = list(ids)
            conds.append(f"id IN ({','.join('?' * len(ids))})")
            args += ids
        if status is not None:
            conds.append("status=?")
            args.append(status)
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        return [self._record(r) for r in self._con().execute(sql + " ORDER BY id", args)]

    def counts(self, ids: Iterable[int] | None = None) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        if ids is None:
            rows = self._con().execute("SELECT status, COUNT(*) FROM jobs GROUP BY status")
        else:
            ids = list(ids)
            rows = self._con().execute(f"SELECT status, COUNT(*) FROM jobs WHERE id IN ({','.join('?' * len(ids))}) "
                                       "GROUP BY status", ids) if ids else []
        for s, n in rows:
            out[s] = n
        return out

    def unfinished(self, ids: Iterable[int] | None = None) -> int:
        c = self.counts(ids)
        return sum(n for s, n in c.items() if s != DONE)

    # --- state changes (the serving pool only) ----------------------------------------
    def claim(self, from_status: str, to_status: str, **fields: Any) -> JobRecord | None:
        """Move the first job of ``from_status`` (highest priority, then oldest) to ``to_status``."""
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            row = con.execute("SELECT id FROM jobs WHERE status=? ORDER BY priority DESC, id LIMIT 1",
                              (from_status,)).fetchone()
            if row is None:
                con.execute("COMMIT")
                return None
            sets = {"status": to_status, **fields}
            con.execute(f"UPDATE jobs SET {', '.join(f'{k}=?' for k in sets)} WHERE id=?",
                        (*sets.values(), row[0]))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return self.get(int(row[0]))

    def update(self, job_id: int, **fields: Any) -> None:
        bad = set(fields) - set(_COLUMNS)
        if bad:
            raise ValueError(f"not updatable: {bad}")
        self._tx(f"UPDATE jobs SET {', '.join(f'{k}=?' for k in fields)} WHERE id=?", (*fields.values(), job_id))

    def finish(self, job_id: int, result: CheckResult, outcome: str, **fields: Any) -> None:
        """Store the result and mark the job done (one transaction); drop its snapshot."""
        bad = set(fields) - set(_COLUMNS)
        if bad:
            raise ValueError(f"not updatable: {bad}")
        sets = {**fields, "status": DONE, "outcome": outcome, "result": dumps(result.to_dict())}
        self._tx(f"UPDATE jobs SET {', '.join(f'{k}=?' for k in sets)} WHERE id=?", (*sets.values(), job_id))
        if not self.keep_snapshots:
            row = self._con().execute("SELECT snapshot FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row:
                p = Path(row[0])
                snapshot.remove(p if p.parent == self.snapshots else p.parent)

    def recover(self, max_restarts: int) -> tuple[list[int], list[int]]:
        """After taking the lock: put back what a dead pool left in flight.

        Jobs that were building or built go back to the queue (their build products are in
        the build cache); jobs that were running count one restart each and go back to the
        queue, unless that makes more than ``max_restarts``, in which case they get a
        ``gave-up`` verdict (a job that kills the pool itself must not loop forever)."""
        requeued, gave_up = [], []
        for rec in self.jobs(status=BUILDING) + self.jobs(status=READY):
            self.update(rec.id, status=QUEUED, build_worker=None, build_start=None, build_end=None)
            requeued.append(rec.id)
        for rec in self.jobs(status=RUNNING):
            n = rec.restarts + 1
            if n > max_restarts:
                msg = (f"pool: the pool process died {n} times while this job was running on "
                       f"{rec.slot}; not retried again")
                self.finish(rec.id, failure_result(rec.task, rec.options, "pool", msg, compiled=True), GAVE_UP,
                            restarts=n, end=time.time(), note=msg)
                gave_up.append(rec.id)
            else:
                self.update(rec.id, status=QUEUED, restarts=n, slot=None, device=None, worker_pid=None,
                            visible_devices=None, start=None, end=None,
                            note=f"re-queued after the pool died while it ran on {rec.slot}")
                requeued.append(rec.id)
        return requeued, gave_up

    def requeue_in_flight(self) -> list[int]:
        """On a clean stop: hand what was in flight back to the queue (no restart counted)."""
        ids = []
        for rec in self.jobs(status=BUILDING) + self.jobs(status=READY) + self.jobs(status=RUNNING):
            self.update(rec.id, status=QUEUED, build_worker=None, build_start=None, build_end=None, slot=None,
                        device=None, worker_pid=None, visible_devices=None, start=None, end=None,
                        note="re-queued: the pool was closed while it was in flight")
            ids.append(rec.id)
        return ids

    def start_run(self, backend: str, slots: list[str], recovered: int) -> int:
        cur = self._tx("INSERT INTO runs (pid, backend, slots, started, recovered) VALUES (?,?,?,?,?)",
                       (os.getpid(), backend, dumps(slots), time.time(), recovered))
        return int(cur.lastrowid)

    def stop_run(self, run_id: int) -> None:
        self._tx("UPDATE runs SET stopped=? WHERE id=?", (time.time(), run_id))

    def runs(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._con().execute("SELECT * FROM runs ORDER BY id")]
