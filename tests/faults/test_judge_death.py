"""Nothing outlives its judge: when the process that runs a check (``cuda-agent check``, a
pool worker, a script calling ``check()``) dies by SIGKILL in the middle of a job whose
solution spins forever and left a detached daemon behind, every process of that job dies too
- with a PID namespace (torn down with its init) and without one (the init's parent-death
handler kills its tree).  And a runner started from a thread that then ends keeps working
(the parent-death signal is tied to a thread, not to the process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox.isolation import launcher_env, probe
from cuda_agent.sandbox.process import descendants

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "cpu_scaled_swish" / "task.py"

SPINNER = textwrap.dedent('''\
    import subprocess, sys
    import torch
    import torch.nn as nn


    class ModelNew(nn.Module):
        def __init__(self, features):
            super().__init__()
            self.scale = nn.Parameter(torch.empty(features))

        def forward(self, x):
            # a daemon of its own (new session, ignores SIGHUP), then an endless loop
            subprocess.Popen([sys.executable, "-c", "import os, signal\\nsignal.signal(signal.SIGHUP, "
                              "signal.SIG_IGN)\\nwhile True: pass"], start_new_session=True)
            open("spinning", "w").close()  # in the job directory (the runner's cwd)
            while True:
                pass
''')


def _state(pid: int) -> str | None:
    """The process's state letter, None when it is gone (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if st[0] in ("Z", "X") else st[0] + ":" + st[19]


def _job_spinning(judge: int) -> bool:
    for p in descendants(judge):
        try:
            if os.path.exists(f"/proc/{p}/cwd/spinning"):
                return True
        except OSError:
            pass
    return False


def _kill_judge_mid_job(argv: list[str], tmp_path: Path) -> None:
    sol = tmp_path / "model_new.py"
    sol.write_text(SPINNER)
    env = launcher_env()
    judge = subprocess.Popen([str(sol) if a == "SOLUTION" else a for a in argv], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.time() + 180
        while not _job_spinning(judge.pid):
            assert judge.poll() is None, judge.stderr.read().decode()[-2000:]
            assert time.time() < deadline, "the solution never started spinning"
            time.sleep(0.2)
        time.sleep(0.5)  # let the daemon get going
        job = {p: _state(p) for p in descendants(judge.pid)}
        assert len(job) >= 3, job  # launcher, (init,) runner, daemon
        os.kill(judge.pid, signal.SIGKILL)
        judge.wait()
        deadline = time.time() + 15
        while time.time() < deadline:
            left = {p: s for p, s in job.items() if s is not None and _state(p) == s}
            if not left:
                break
            time.sleep(0.1)
        assert not left, f"processes of the job outlived their judge: {left}"
    finally:
        if judge.poll() is None:
            judge.kill()
            judge.wait()


def test_sigkill_of_cuda_agent_check_leaves_no_process_of_the_job(tmp_path):
    _kill_judge_mid_job([sys.executable, "-m", "cuda_agent.cli", "check", str(TASK), "SOLUTION",
                         "--device", "cpu", "--no-timing"], tmp_path)


JUDGE_WITHOUT_PIDNS = textwrap.dedent('''\
    import sys, threading
    from cuda_agent.sandbox.check import CheckOptions, check
    from cuda_agent.sandbox.isolation import Limits
    from cuda_agent.tasks import load_file
    o = CheckOptions(device="cpu", timing=False, baselines=False, n_sets=1, limits=Limits(isolate=False))
    # from a worker thread, as the agent's and the trainer's executors run checks
    t = threading.Thread(target=check, args=(load_file(sys.argv[1]), sys.argv[2], o))
    t.start()
    t.join()
''')


def test_sigkill_of_the_judge_without_a_pid_namespace(tmp_path):
    _kill_judge_mid_job([sys.executable, "-c", JUDGE_WITHOUT_PIDNS, str(TASK), "SOLUTION"], tmp_path)



JUDGE_WITH_SPARES = textwrap.dedent('''\
    import sys
    from pathlib import Path
    from cuda_agent.sandbox.check import CheckOptions, check
    from cuda_agent.sandbox.process import spares
    from cuda_agent.tasks import load_file
    spares.enable()  # as a pool slot: every check starts the next one's runner
    o = CheckOptions(device="cpu", timing=False, baselines=False, n_sets=1)
    bad = Path(sys.argv[2]).with_name("bad.py")
    bad.write_text("import torch\\nclass ModelNew(torch.nn.Module):\\n    def __init__(self, f):\\n        raise ValueError()\\n")
    check(load_file(sys.argv[1]), bad, o)  # leaves a spare waiting, which runs the spinner
    spares.settle()
    check(load_file(sys.argv[1]), sys.argv[2], o)  # and another spare is waiting meanwhile
''')


def test_sigkill_of_a_judge_with_spare_runners(tmp_path):
    _kill_judge_mid_job([sys.executable, "-c", JUDGE_WITH_SPARES, str(TASK), "SOLUTION"], tmp_path)

@pytest.mark.skipif("pid" not in probe().namespaces, reason="no PID namespace on this platform")
def test_a_runner_started_from_a_thread_that_ended_keeps_working(tmp_path):
    from cuda_agent.sandbox.isolation import Limits
    from cuda_agent.sandbox.process import RunnerProcess, job_root

    d = job_root("cuda-agent-job-test-")
    try:
        (d / "job.json").write_text('{"device": "cpu"}')
        made: list = []
        t = threading.Thread(target=lambda: made.append(RunnerProcess(d / "job.json", limits=Limits())))
        t.start()
        t.join()
        time.sleep(0.5)
        r = made[0]
        assert r.proc.poll() is None, r.log_tail()
        assert r.request({"cmd": "load"}, 120)["ok"] is False  # the runner answers (no task file: a verdict)
        r.close()
    finally:
        subprocess.run(["rm", "-rf", str(d)])
