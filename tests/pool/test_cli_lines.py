"""`pool run` on a terminal prints one line per finished job: verdict, reward, seconds per stage."""

from cuda_agent.sandbox.pool.cli import job_line
from cuda_agent.sandbox.results import CheckResult


def test_a_finished_job_is_one_line_with_its_stages():
    r = CheckResult(task_id="L1/12", task_sha="x", device="cuda", rules="strict", compiled=True, correct=True,
                    reward=2.0, seconds=14.94, phases={"build": 0.1, "verify": 2.02, "timing": 7.0})
    assert job_line(3, r) == "job 3  L1/12 (cuda): correct, reward 2  14.9 s (build 0.1, verify 2.0, timing 7.0)"
    bad = CheckResult(task_id="t", task_sha="x", device="cpu", rules="strict", compiled=False, reward=-1.0)
    assert job_line(4, bad) == "job 4  t (cpu): build failed, reward -1  0.0 s"
