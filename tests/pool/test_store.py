"""The pool's database and snapshots, without workers: what a restart and a hostile workspace
see.  Real sqlite files, real copies."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace

import pytest

from cuda_agent.sandbox.check import CheckOptions
from cuda_agent.sandbox.pool import Pool, PoolError, Store, options_from_dict, options_to_dict
from cuda_agent.sandbox.pool.jobs import BUILDING, DONE, GAVE_UP, QUEUED, READY, RUNNING
from cuda_agent.sandbox.pool.snapshot import SnapshotError
from cuda_agent.sandbox.timing import Recipe

from .conftest import small_task


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "pool.sqlite")
    yield s
    s.release()
    s.close()


def test_submit_freezes_the_solution(store, variants, tmp_path, opts):
    import shutil

    sol = tmp_path / "agent_ws"
    shutil.copytree(variants["good"], sol)
    jid = store.submit(small_task(), sol, opts)
    (sol / "kernels" / "swish.cpp").write_text("// the agent kept editing\n")
    (sol / "model_new.py").unlink()
    rec = store.get(jid)
    assert rec.status == QUEUED and rec.snapshot != str(sol)
    snap = rec.snapshot
    assert (variants["good"] / "kernels" / "swish.cpp").read_text() == open(f"{snap}/kernels/swish.cpp").read()
    assert os.path.isfile(f"{snap}/model_new.py")
    # a single model_new.py is snapshotted as that file
    f = tmp_path / "model_new.py"
    f.write_text((variants["good"] / "model_new.py").read_text())
    rec2 = store.get(store.submit(small_task(), f, opts))
    assert rec2.snapshot.endswith("/model_new.py") and os.path.isfile(rec2.snapshot)


def test_snapshot_skips_special_files_and_refuses_missing_or_huge(store, variants, tmp_path, opts, monkeypatch):
    import shutil

    sol = tmp_path / "hostile"
    shutil.copytree(variants["good"], sol)
    os.mkfifo(sol / "pipe")  # copying would block forever
    os.symlink("/", sol / "root_link")  # a link to a directory: not followed
    os.symlink(sol / "model_new.py", sol / "alias.py")  # a link to a file: copied as the file
    rec = store.get(store.submit(small_task(), sol, opts))
    names = sorted(p.name for p in __import__("pathlib").Path(rec.snapshot).iterdir())
    assert names == ["alias.py", "kernels", "model_new.py"]
    with pytest.raises(SnapshotError, match="solution not found"):
        store.submit(small_task(), tmp_path / "nope", opts)
    from cuda_agent.sandbox.pool import snapshot

    monkeypatch.setattr(snapshot, "MAX_BYTES", 100)
    with pytest.raises(SnapshotError, match="larger than the pool accepts"):
        store.submit(small_task(), sol, opts)
    assert store.counts()["queued"] == 1  # the refused submits left no job
    assert len(list(store.snapshots.iterdir())) == 1  # ... and no half-copied snapshot


def test_claim_order_is_priority_then_fifo(store, variants, opts):
    prios = [0, 5, 0, 9, 5, -1]
    ids = [store.submit(small_task(), variants["good"], opts, priority=p) for p in prios]
    order = []
    while (rec := store.claim(QUEUED, BUILDING)) is not None:
        order.append(rec.id)
    assert order == [ids[3], ids[1], ids[4], ids[0], ids[2], ids[5]]


def test_key_makes_submit_idempotent(store, variants, opts):
    a = store.submit(small_task(), variants["good"], opts, key="jobs.jsonl:1:abc")
    b = store.submit(small_task(), variants["wrong"], opts, key="jobs.jsonl:1:abc")
    assert a == b
    assert len(store.jobs()) == 1
    assert len(list(store.snapshots.iterdir())) == 1


def test_recover_requeues_in_flight_and_gives_up_on_repeat_offenders(tmp_path, variants, opts):
    db = tmp_path / "pool.sqlite"
    s = Store(db)
    ids = [s.submit(small_task(), variants["good"], opts, priority=i) for i in range(5)]
    s.update(ids[0], status=BUILDING, build_worker="build:0")
    s.update(ids[1], status=READY)
    s.update(ids[2], status=RUNNING, slot="gpu:0", start=1.0)
    s.update(ids[3], status=RUNNING, slot="gpu:1", start=1.0, restarts=2)
    s.close()
    # a new process opens the same file: nothing was lost
    s2 = Store(db)
    s2.acquire()
    requeued, gave_up = s2.recover(max_restarts=2)
    assert sorted(requeued) == sorted(ids[:3]) and gave_up == [ids[3]]
    recs = {r.id: r for r in s2.jobs()}
    assert all(recs[i].status == QUEUED for i in ids[:3]) and recs[ids[4]].status == QUEUED
    assert recs[ids[2]].restarts == 1 and recs[ids[2]].slot is None and "re-queued" in recs[ids[2]].note
    r3 = recs[ids[3]]
    assert r3.status == DONE and r3.outcome == GAVE_UP and r3.restarts == 3
    assert r3.result is not None and not r3.result.correct and r3.result.reward == -1
    assert "died 3 times" in r3.result.error
    # the WAL database is consistent for any sqlite reader
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()
    s2.release()


def test_one_pool_per_database(tmp_path):
    a, b = Store(tmp_path / "p.sqlite"), Store(tmp_path / "p.sqlite")
    a.acquire()
    with pytest.raises(PoolError, match=f"another pool \\(pid {os.getpid()}\\)"):
        b.acquire()
    a.release()
    b.acquire()
    b.release()


def test_options_round_trip():
    o = CheckOptions(device="cpu", rules="kernelbench", n_sets=3, seed=7, recipe=Recipe(warmup_ms=5, max_samples=30))
    d = options_to_dict(o)
    assert options_from_dict(__import__("json").loads(__import__("json").dumps(d))) == o
    assert options_from_dict({**d, "from_a_newer_version": 1}) == o


def test_pool_refuses_bad_submits_with_one_sentence(tmp_path, variants, opts):
    pool = Pool(tmp_path / "p.sqlite", device="cpu", slots=1, start=False)
    with pytest.raises(PoolError, match="checks on 'cpu'; the job asks for 'cuda'"):
        pool.submit(small_task(), variants["good"], replace(opts, device="cuda"))
    with pytest.raises(PoolError, match="unknown reward scheme"):
        pool.submit(small_task(), variants["good"], replace(opts, reward="nope"))
    with pytest.raises(PoolError, match="task not found"):
        pool.submit("no/such/task.py", variants["good"], opts)
    with pytest.raises(PoolError, match="solution not found"):
        pool.submit(small_task(), tmp_path / "missing", opts)
    with pytest.raises(PoolError, match="unknown pool back-end 'nope'"):
        Pool(tmp_path / "q.sqlite", device="cpu", backend="nope", start=False)
    with pytest.raises(PoolError, match="give slots=N"):
        Pool(tmp_path / "q.sqlite", device="cpu", gpus=[0], start=False)
    assert pool.counts()["queued"] == 0
    pool.close()
