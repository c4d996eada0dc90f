"""``cuda-agent pool serve`` as a real subprocess and ``PoolEvaluator`` as its client.

The server serves a database on one CPU slot; the test process only submits and reads
(``Pool(db, backend=None)``), as verl's CPU-only agent-loop workers do.  A correct and a
wrong solution get their real verdicts; a slow job in flight when SIGTERM arrives goes back
to the queue; the server exits 0 and releases the lock.  Without a server, or with a lock
holder that serves nothing, the evaluator returns a failed result within its limits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cuda_agent.sandbox.pool.evaluator import PoolEvaluator
from cuda_agent.sandbox.pool import Pool, PoolError, Store
from cuda_agent.sandbox.pool.jobs import CHECKED, QUEUED, RUNNING

CHECK = dict(device="cpu", timing=False, baselines=False, n_sets=2, verify_timeout=120)


def serve(db: Path, log: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "cuda_agent.cli", "pool", "serve", "--db", str(db),
           "--device", "cpu", "--slots", "1", *extra]
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def wait_for(pred, seconds: float, what: str, log: Path | None = None):
    deadline = time.time() + seconds
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {seconds} s" + (f"; server log:\n{log.read_text()}" if log else ""))


@pytest.fixture
def server(tmp_path):
    db, log = tmp_path / "pool.sqlite", tmp_path / "serve.log"
    proc = serve(db, log)
    try:
        wait_for(lambda: "SIGINT or SIGTERM stops" in log.read_text() or proc.poll() is not None, 90,
                 "the server's start", log)
        assert proc.poll() is None, log.read_text()
        yield db, log, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_served_queue_real_verdicts_then_sigterm_requeues_and_releases(server, task, variants):
    db, log, proc = server
    ev = PoolEvaluator(db, timeout=300, server_wait=10, **CHECK)
    assert ev.pool.store.served()
    # a second server on the same database is refused with one sentence
    second = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "pool", "serve",
                             "--db", str(db), "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and f"pid {proc.pid}) is serving" in second.stderr, second.stderr

    with ThreadPoolExecutor(2) as ex:  # episodes check from several threads through one evaluator
        good, wrong = ex.map(lambda v: ev.check(task, variants[v]), ["good", "wrong"])
    assert good.correct and good.compiled and good.error is None, good.error
    assert not wrong.correct and wrong.compiled and wrong.verdict.stage == "compare", wrong.error
    assert "elements outside" in wrong.error
    assert good.reward > wrong.reward
    recs = ev.pool.jobs()
    assert [r.outcome for r in recs] == [CHECKED, CHECKED]
    assert {r.slot for r in recs} == {"cpu:0"} and all(r.worker_pid not in (None, os.getpid()) for r in recs)

    # the agent's own `cuda-agent verify` in its shell goes to the same pool (CUDA_AGENT_POOL_DB),
    # not to a check in the shell, which may see no GPU
    import shutil

    from cuda_agent.sandbox.pool.evaluator import POOL_DB_ENV
    from cuda_agent.sandbox.workspace import create_workspace

    ws = create_workspace(task, db.parent / "ws", device="cpu")
    shutil.copy(variants["good"] / "model_new.py", ws / "model_new.py")
    shutil.copytree(variants["good"] / "kernels", ws / "kernels", dirs_exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "verify", str(ws)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, POOL_DB_ENV: str(db)})
    assert r.returncode == 0 and "correct   yes" in r.stdout, r.stdout + r.stderr
    recs = ev.pool.jobs()
    assert len(recs) == 3 and recs[-1].outcome == CHECKED and recs[-1].result.correct

    slow = ev.pool.submit(task, variants["slow"], ev.options)
    wait_for(lambda: ev.pool.job(slow).status == RUNNING, 120, "the slow job running", log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=150) == 0, log.read_text()
    out = log.read_text()
    assert "stopped (SIGTERM); finished while serving: 3, left in the queue for the next server: 1; lock released" in out, out
    rec = ev.pool.job(slow)
    assert rec.status == QUEUED and rec.restarts == 0 and "re-queued" in rec.note
    assert not Store(db).served()
    assert all(r["stopped"] for r in Store(db).runs())
    # nobody serves now: the client's wait says so instead of blocking
    with pytest.raises(PoolError, match="no pool is serving"):
        ev.pool.wait([slow], timeout=5)


def test_no_server_gives_a_failed_result_within_server_wait(tmp_path, task, variants):
    ev = PoolEvaluator(tmp_path / "none.sqlite", server_wait=2, **CHECK)
    t0 = time.time()
    r = ev.check(task, variants["good"])
    assert time.time() - t0 < 6
    assert not r.correct and r.verdict.stage == "pool" and r.reward is not None
    assert "no pool served" in r.error and "cuda-agent pool serve --db" in r.error, r.error
    assert ev.pool.counts()[QUEUED] == 1  # the job stays for a server that comes later


def test_lock_holder_that_serves_nothing_gives_a_failed_result_at_timeout(tmp_path, task, variants):
    db = tmp_path / "stuck.sqlite"
    holder = Store(db)
    holder.acquire()  # holds the lock, moves no job: a hung server
    try:
        ev = PoolEvaluator(db, timeout=2, server_wait=1, **CHECK)
        t0 = time.time()
        r = ev.check(task, variants["good"])
        assert time.time() - t0 < 6
        assert not r.correct and "not finished after 2 s (status queued)" in r.error, r.error
    finally:
        holder.release()


def test_bad_input_is_a_verdict_not_an_exception(tmp_path, task):
    ev = PoolEvaluator(tmp_path / "p.sqlite", server_wait=1, **CHECK)
    r = ev.check(task, tmp_path / "missing")
    assert not r.correct and "refused: solution not found" in r.error, r.error
    with pytest.raises(PoolError, match="client"):
        Pool(tmp_path / "p.sqlite", device="cpu", backend=None).start()
