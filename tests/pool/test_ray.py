"""The Ray back-end with two CPU slots (a local Ray started by the pool): same verdicts as the
local back-end, snapshots shipped to the actors, an actor killed by its job replaced, and
the exclusivity audit."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cuda-agent[pool]')")

from cuda_agent.sandbox.pool import Pool  # noqa: E402
from cuda_agent.sandbox.pool.jobs import CHECKED, REJECTED_AT_BUILD, WORKER_DIED  # noqa: E402

from .conftest import judge_attack_task, small_task  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def test_ray_backend_two_cpu_slots(tmp_path, variants, opts):
    killer = judge_attack_task("        os.kill(os.getpid(), signal.SIGKILL)", "kills_the_judge")
    with Pool(tmp_path / "pool.sqlite", device="cpu", backend="ray", slots=2, build_workers=1) as pool:
        assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 3
        ids = {name: pool.submit(small_task(), variants[name], opts, tag=name, priority=2)
               for name in ("good", "wrong", "build_fails")}
        ids["killer"] = pool.submit(killer, variants["good"], opts, tag="killer", priority=1)
        ids["after"] = pool.submit(small_task(), variants["good"], opts, tag="after", priority=0)
        res = pool.wait(timeout=800)
        recs = {r.tag: r for r in pool.jobs()}
        aud = pool.audit()
        replaced = pool.backend.replaced()
    assert not ray.is_initialized()  # the pool started it, the pool shut it down
    assert res[ids["good"]].correct, res[ids["good"]].error
    assert res[ids["after"]].correct, res[ids["after"]].error
    assert not res[ids["wrong"]].correct and "outside atol" in res[ids["wrong"]].error
    assert recs["build_fails"].outcome == REJECTED_AT_BUILD and not res[ids["build_fails"]].compiled
    assert recs["build_fails"].build_worker.startswith("ray-build:")
    k = recs["killer"]
    assert k.outcome == WORKER_DIED and res[ids["killer"]].verdict.stage == "worker-died"
    assert "Ray actor of slot" in res[ids["killer"]].error
    assert replaced >= 1
    for tag in ("good", "wrong", "after"):
        r = recs[tag]
        assert r.outcome == CHECKED and r.slot in ("ray:0", "ray:1") and r.visible_devices == ""
        assert r.device.endswith(f"/cpu-slot:{r.slot[-1]}") and r.worker_pid
    assert aud.ok, aud.to_dict()
    assert aud.outcomes == {CHECKED: 3, REJECTED_AT_BUILD: 1, WORKER_DIED: 1}
