"""The local back-end on CPU slots: real worker processes, real builds, real checks.

Mixed verdicts and exclusivity, priorities, a worker killed or hung by the job it runs, and a
``kill -9`` of the whole pool (the CLI) followed by a restart that finishes every job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cuda_agent.sandbox.pool import Pool, Store
from cuda_agent.sandbox.pool.jobs import CHECKED, REJECTED_AT_BUILD, WORKER_DIED, WORKER_TIMEOUT

from conftest import copy_example

from .conftest import SMALL, _model_new, judge_attack_task, small_task, wait_dead

pytestmark = pytest.mark.timeout(600)


def test_mixed_stream_on_two_slots(tmp_path, variants, opts):
    edited = tmp_path / "edited"
    shutil.copytree(variants["good"], edited)
    with Pool(tmp_path / "pool.sqlite", device="cpu", slots=2, build_workers=1) as pool:
        ids = {name: pool.submit(small_task(), variants[name], opts, tag=name)
               for name in ("good", "wrong", "build_fails", "crash", "torch_op")}
        ids["edited"] = pool.submit(small_task(), edited, opts, tag="edited")
        # the agent breaks its workspace right after submitting: the snapshot is judged
        shutil.copy(variants["wrong"] / "kernels" / "swish.cpp", edited / "kernels" / "swish.cpp")
        res = pool.wait(timeout=540)
        recs = {r.tag: r for r in pool.jobs()}
        aud = pool.audit()
        pids = set(pool.backend.worker_pids().values())
    assert set(res) == set(ids.values())
    assert res[ids["good"]].correct and res[ids["good"]].reward == 1, res[ids["good"]].error
    assert res[ids["edited"]].correct, res[ids["edited"]].error
    w = res[ids["wrong"]]
    assert w.compiled and not w.correct and "outside atol" in w.error
    b = res[ids["build_fails"]]
    assert not b.compiled and "undeclared_factor" in b.error and b.reward == -1
    assert recs["build_fails"].outcome == REJECTED_AT_BUILD and recs["build_fails"].slot is None
    c = res[ids["crash"]]
    assert c.verdict.stage == "crash" and "SIGSEGV" in c.error
    t = res[ids["torch_op"]]
    assert not t.correct and "torch-op-in-forward" in {v.rule for v in t.violations}
    for name, r in recs.items():
        if name == "build_fails":
            continue
        assert r.outcome == CHECKED and r.slot in ("cpu:0", "cpu:1") and r.visible_devices == ""
        assert r.worker_pid in pids and r.start < r.end and r.attempts == 1
        assert r.build_worker == "build:0" and r.build_end <= r.start
    assert aud.ok, aud.to_dict()
    assert sum(aud.per_device.values()) == 5 and aud.outcomes == {CHECKED: 5, REJECTED_AT_BUILD: 1}
    # snapshots of finished jobs are removed; the logs stay
    assert list((tmp_path / "pool.sqlite.d" / "snapshots").iterdir()) == []
    assert any((tmp_path / "pool.sqlite.d" / "logs").glob("cpu-*.log"))


def test_priorities_then_fifo_on_one_slot(tmp_path, variants, opts):
    pool = Pool(tmp_path / "pool.sqlite", device="cpu", slots=1, build_workers=1, start=False)
    prios = [0, 5, 0, 9]
    ids = [pool.submit(small_task(), variants["good"], opts, priority=p) for p in prios]
    with pool:
        pool.wait(timeout=540)
        recs = pool.jobs()
    ran = [r.id for r in sorted(recs, key=lambda r: r.start)]
    assert ran == [ids[3], ids[1], ids[0], ids[2]]
    assert all(r.result.correct for r in recs)
    assert pool.audit().ok


def test_worker_killed_or_hung_by_its_job_is_replaced_and_the_job_gets_a_verdict(tmp_path, variants, opts):
    killer = judge_attack_task("        os.kill(os.getpid(), signal.SIGKILL)", "kills_the_judge")
    hang = judge_attack_task("        time.sleep(600)", "hangs_the_judge")
    with Pool(tmp_path / "pool.sqlite", device="cpu", slots=1, build_workers=1) as pool:
        k = pool.submit(killer, variants["good"], opts, priority=3)
        h = pool.submit(hang, variants["good"], opts, priority=2, timeout=25)
        g = pool.submit(small_task(), variants["good"], opts, priority=1)
        res = pool.wait(timeout=540)
        recs = {r.id: r for r in pool.jobs()}
        replaced = pool.backend.replaced()
    rk, rh, rg = recs[k], recs[h], recs[g]
    assert rk.outcome == WORKER_DIED and res[k].verdict.stage == "worker-died"
    assert "killed by SIGKILL" in res[k].error and "replaced" in res[k].error and res[k].reward == -1
    assert rh.outcome == WORKER_TIMEOUT and res[h].verdict.stage == "worker-timeout"
    assert "25 s limit" in res[h].error
    assert 24 < rh.end - rh.start < 120
    assert res[g].correct, res[g].error
    assert rg.worker_pid not in (rk.worker_pid, rh.worker_pid) and rk.worker_pid != rh.worker_pid
    assert replaced >= 2
    assert wait_dead([rk.worker_pid, rh.worker_pid]) == []
    if hasattr(res[k], "exploit_classes"):
        assert res[k].exploit_classes == [18]
    assert audit_ok(tmp_path)


def audit_ok(tmp_path) -> bool:
    from cuda_agent.sandbox.pool import audit_records

    return audit_records(Store(tmp_path / "pool.sqlite").jobs()).ok


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cuda_agent.cli", "pool", "run", *args]


def test_kill_9_of_the_pool_then_restart_finishes_every_job(tmp_path, variants):
    """The CLI serves a job file; it is killed with SIGKILL while a job runs; its workers die
    with it; the same command again resumes: every job has a result, nothing is duplicated,
    and results finished before the kill are untouched."""
    task = tmp_path / "task.py"
    task.write_text(SMALL)
    jobs = tmp_path / "jobs.jsonl"
    lines = [{"task": "task.py", "solution": str(variants["slow"]), "tag": f"slow{i}"} for i in range(3)]
    lines.append({"task": str(task), "solution": str(variants["good"]), "tag": "good", "priority": -1})
    jobs.write_text("\n".join(json.dumps(d) for d in lines) + "\n")
    db = tmp_path / "pool.sqlite"
    args = [str(jobs), "--db", str(db), "--device", "cpu", "--slots", "1", "--build-workers", "1", "--no-timing",
            "--n-sets", "1"]
    first = subprocess.Popen(_cli(*args, "--no-progress"), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    store = Store(db)
    deadline = time.time() + 400
    running = None
    while time.time() < deadline and first.poll() is None:
        c = store.counts()
        run = store.jobs(status="running")
        if c["done"] >= 1 and run and time.time() - run[0].start > 1.0:
            running = run[0]
            break
        time.sleep(0.2)
    assert running is not None, (store.counts(), first.poll(), first.stdout.read().decode()[-2000:])
    before = {r.id: r.result.to_dict() for r in store.jobs(status="done")}
    worker_pids = _children_of(first.pid)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    assert len(worker_pids) == 2  # the slot and the builder
    assert wait_dead(worker_pids) == [], "workers must die with the pool"
    assert store.get(running.id).status == "running"  # as the dead pool left it
    second = subprocess.run(_cli(*args, "--json"), cwd=tmp_path, capture_output=True, text=True, timeout=500)
    assert second.returncode == 0, second.stdout + second.stderr
    assert re.search(r"recovered from a previous pool: [1-3] re-queued, 0 given up", second.stderr)
    recs = {r.id: r for r in store.jobs()}
    assert len(recs) == 4 and all(r.status == "done" and r.result is not None for r in recs.values())
    for jid, res in before.items():
        assert recs[jid].result.to_dict() == res
    assert recs[running.id].restarts == 1 and recs[running.id].outcome == CHECKED
    assert recs[max(recs)].result.correct  # the good one, last by priority
    summary = json.loads(second.stdout)  # --json: one object on stdout, nothing else
    assert summary["summary"]["done"] == 4 and summary["summary"]["audit"]["ok"]
    assert summary["summary"]["evals_per_min"] > 0
    assert len(store.runs()) == 2 and store.runs()[0]["stopped"] is None
    st = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "pool", "status", "--db", str(db)],
                        capture_output=True, text=True)
    assert "done 4" in st.stdout and "did not stop cleanly" in st.stdout


def _children_of(pid: int) -> list[int]:
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(d))
    return kids


def test_workers_that_cannot_start_stop_the_pool_with_a_clear_error(tmp_path, variants, opts):
    from cuda_agent.sandbox.pool import PoolError

    pool = Pool(tmp_path / "pool.sqlite", device="cpu", slots=1, build_workers=1,
                backend_options={"env": {"PYTHONHOME": str(tmp_path / "no-python-here")}})
    jid = pool.submit(small_task(), variants["good"], opts)
    with pytest.raises(PoolError, match=r"at start 3 times in a row; the pool stops"):
        pool.wait(timeout=120)
    pool.close()
    assert Store(tmp_path / "pool.sqlite").get(jid).status == "queued"  # kept for a pool that works


TAMPER = '''        import json, os, sqlite3
        db = DB
        report = []
        try:  # what a candidate that found the pool's database would do: fake a passing result
            con = sqlite3.connect(db, timeout=2)
            fake = json.dumps({"task_id": "swish_small", "task_sha": "", "device": "cpu", "rules": "strict",
                               "compiled": True, "correct": True, "reward": 3.0})
            con.execute("UPDATE jobs SET status='done', outcome='checked', result=?, tag='pwned'", (fake,))
            con.commit()
            report.append("db written")
        except Exception as e:
            report.append(f"db: {type(e).__name__}")
        try:
            open(os.path.join(db + ".d", "pwned"), "w").write("x")
            report.append("state dir written")
        except OSError as e:
            report.append(f"state dir: {type(e).__name__}")
'''


def test_a_candidate_cannot_reach_the_pools_database_or_snapshots(tmp_path, variants, opts):
    """The pool's database and its snapshot/log directory are concealed from every runner: a
    candidate that writes a passing result for its job (and the others) into the database
    finds nothing there, and the pool reports the real verdict."""
    from cuda_agent.sandbox.isolation import probe

    if "mnt" not in probe().namespaces:
        pytest.skip(f"no mount namespace here: {probe().errors[:2]}")
    db = tmp_path / "pool.sqlite"
    body = TAMPER.replace("DB", repr(str(db))) + "        return x * torch.sigmoid(x) * self.scale"
    attacker = copy_example(tmp_path / "attacker", {"model_new.py": _model_new(body)})
    with Pool(db, device="cpu", slots=1, build_workers=1) as pool:
        bad = pool.submit(small_task(), attacker, opts, tag="attacker")
        good = pool.submit(small_task(), variants["good"], opts, tag="good")
        res = pool.wait(timeout=300)
        recs = {r.id: r for r in pool.jobs()}
    assert res[good].correct, res[good].error
    a = res[bad]  # a torch op in forward under strict rules: rejected, whatever it wrote
    assert not a.correct and "torch-op-in-forward" in {v.rule for v in a.violations}
    assert {r.tag for r in recs.values()} == {"attacker", "good"}
    assert not (tmp_path / "pool.sqlite.d" / "pwned").exists()


def test_a_single_file_is_built_by_a_builder_not_on_its_slot(tmp_path, opts):
    """A KernelBench-style file builds its extension when imported.  The pool imports it first on
    a CPU builder (contained, no GPU in sight), so the slot's check loads the build from the
    cache instead of compiling while it holds the slot."""
    from conftest import EXAMPLE

    src = (EXAMPLE / "model_new_inline.py").read_text()
    salted = src.replace("#include <cmath>", f"#include <cmath>\n// pool prebuild {time.time_ns()}")
    assert salted != src
    sol = tmp_path / "model_new.py"
    sol.write_text(salted)
    with Pool(tmp_path / "pool.sqlite", device="cpu", slots=1, build_workers=1) as pool:
        jid = pool.submit(small_task(), sol, opts, tag="inline")
        res = pool.wait(timeout=540)[jid]
        rec = pool.job(jid)
    assert res.correct, res.error
    assert rec.build_worker == "build:0" and rec.build_end <= rec.start
    assert [x["cached"] for x in res.extensions] == [True], res.extensions  # built before the slot took it
    assert res.custom_calls > 0
