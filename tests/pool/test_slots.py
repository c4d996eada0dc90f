"""Several slots on one device: they verify side by side and time one at a time.

The CPU slots of the local back-end share the CPU as the slots of ``slots_per_gpu`` share a
GPU: every check takes the device's lock (sandbox/devicelock.py).  Two slots must give the
verdicts of one check at a time, and the audit must see every timing alone on its device.
"""

from __future__ import annotations

import pytest

from cuda_agent.sandbox.check import CheckOptions, check
from cuda_agent.sandbox.devicelock import EXCLUSIVE, SHARED
from cuda_agent.sandbox.pool import Pool, PoolError, audit_records
from cuda_agent.sandbox.pool.jobs import CHECKED, DONE, JobRecord
from cuda_agent.sandbox.results import CheckResult, DeviceHold
from cuda_agent.sandbox.timing import Recipe

from .conftest import small_task

pytestmark = pytest.mark.timeout(600)


def _verdict(r: CheckResult) -> tuple:
    return (r.compiled, r.correct, r.verdict.stage if r.verdict else None, sorted({v.rule for v in r.violations}),
            r.reward)


def test_two_slots_on_the_cpu_give_the_verdicts_of_one_check_at_a_time(tmp_path, variants):
    o = CheckOptions(device="cpu", baselines=False, n_sets=2, verify_timeout=120, recipe=Recipe(budget_s=1.0))
    batch = ["good", "wrong", "crash", "good", "torch_op", "build_fails"]
    alone = [check(small_task(), variants[k], o) for k in batch]
    with Pool(tmp_path / "pool.sqlite", device="cpu", slots=2, build_workers=1) as pool:
        ids = [pool.submit(small_task(), variants[k], o, tag=k) for k in batch]
        res = pool.wait(ids, timeout=540)
        aud = pool.audit(ids)
    assert [_verdict(r) for r in alone] == [_verdict(res[i]) for i in ids]
    assert alone[0].correct and alone[0].timing is not None  # the goods were timed: exclusive holds to audit
    assert aud.ok, aud.to_dict()
    for i, k in zip(ids, batch):
        modes = [h.mode for h in res[i].holds]
        assert modes == ([SHARED, EXCLUSIVE, SHARED] if k == "good" else [] if k == "build_fails" else [SHARED]), (k, modes)


def _record(job: int, slot: str, start: float, end: float, holds: list[tuple[str, float, float]]) -> JobRecord:
    t = small_task()
    r = CheckResult(task_id=t.id, task_sha=t.sha, device="cpu", rules="strict",
                    holds=[DeviceHold(m, "cpu-host", a, b) for m, a, b in holds])
    return JobRecord(id=job, status=DONE, priority=0, task=t, options=CheckOptions(device="cpu"), solution="",
                     snapshot="", submitted=0.0, slot=slot, device=f"host/{slot}", visible_devices="", start=start,
                     end=end, outcome=CHECKED, result=r)


def test_the_audit_allows_sharing_and_flags_a_timing_beside_another_job():
    shared = [_record(1, "cpu:0", 0, 10, [(SHARED, 1, 5), (EXCLUSIVE, 5, 8)]),
              _record(2, "cpu:1", 2, 12, [(SHARED, 2, 5), (EXCLUSIVE, 8, 11)])]
    assert audit_records(shared).ok, audit_records(shared).to_dict()
    beside = [_record(1, "cpu:0", 0, 10, [(SHARED, 1, 5), (EXCLUSIVE, 5, 8)]),
              _record(2, "cpu:1", 2, 12, [(SHARED, 2, 6)])]
    a = audit_records(beside)
    assert not a.ok and a.exclusive_overlaps == [(1, 2, "cpu-host")] and not a.overlaps
    one_slot = [_record(1, "cpu:0", 0, 10, []), _record(2, "cpu:0", 9, 12, [])]
    assert audit_records(one_slot).overlaps == [(1, 2, "cpu:0")]


def test_slots_per_gpu_is_for_gpus(tmp_path):
    with pytest.raises(PoolError, match="slots_per_gpu is for device='cuda'"):
        Pool(tmp_path / "pool.sqlite", device="cpu", slots=2, slots_per_gpu=2, start=False)
    with pytest.raises(PoolError, match="at least 1"):
        Pool(tmp_path / "pool.sqlite", device="cpu", slots_per_gpu=0, start=False)


def test_each_gpu_gets_its_slots_on_one_device(monkeypatch):
    from cuda_agent.sandbox.pool.local import LocalBackend

    monkeypatch.setenv("CUDA_AGENT_ARCH", "90")  # no GPU to ask here; nothing is started
    b = LocalBackend(device="cuda", gpus=["0", "3"], slots_per_gpu=2, build_workers=1)
    assert b.slots() == ["gpu:0.0", "gpu:0.1", "gpu:3.0", "gpu:3.1"]
    assert {s: b.device_of(s).split("/")[-1] for s in b.slots()} == {
        "gpu:0.0": "gpu:0", "gpu:0.1": "gpu:0", "gpu:3.0": "gpu:3", "gpu:3.1": "gpu:3"}
    assert [w.env["CUDA_VISIBLE_DEVICES"] for w in b._workers if w.role == "slot"] == ["0", "0", "3", "3"]
    assert LocalBackend(device="cuda", gpus=["0"], build_workers=1).slots() == ["gpu:0"]
