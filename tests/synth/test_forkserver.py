"""The warm fork server: forked evaluation processes give the same verdicts as spawned ones,
crashes and hangs still kill only that child (exit codes named), the next task gets a fresh
fork, and a dead server falls back to spawning."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cuda_agent.synth.evaluate import FilterConfig
from cuda_agent.synth.forkserver import ForkServer, ForkServerError
from cuda_agent.synth.runner import EvalWorker

CFG = FilterConfig(device="cpu", compile=False, timeout_s=4, band_ms=(0.0, 1e6))


@pytest.fixture(scope="module")
def good(make_task):
    return make_task("return torch.relu(self.linear(x))")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ForkServer(CFG, log_path=str(tmp_path_factory.mktemp("fs") / "eval.log"))
    s.wait_ready()
    yield s
    s.close()


def test_server_warms_up_and_forks_workers(server, good):
    assert server.info["ready"] and server.info["warm_error"] == ""
    with EvalWorker(CFG, server=server) as w:
        t = time.time()
        v = w.evaluate(good)
        assert v.ok, v.reason
        assert set(v.phase_s) >= {"load", "eager", "determinism", "time"}
        assert w.starts == {"forked": 1, "spawned": 0}
        # a forked child starts with torch imported: far below a fresh interpreter's import time
        assert time.time() - t < 20
        pid = w._child.pid
        assert os.getpgid(pid) == pid  # its own process group: a timeout kills exactly it


def test_crash_segfault_and_hang_in_forked_children(server, make_task, good):
    with EvalWorker(CFG, server=server) as w:
        v = w.evaluate(make_task("import os; os._exit(7)"))
        assert not v.ok and v.code == "crash" and "exit code 7" in v.reason, v.reason
        v = w.evaluate(make_task("import ctypes; ctypes.string_at(0)"))
        assert not v.ok and v.code == "crash" and f"exit code -{int(signal.SIGSEGV)}" in v.reason, v.reason
        t = time.time()
        v = w.evaluate(make_task("import time; time.sleep(60)"))
        assert not v.ok and v.code == "timeout" and time.time() - t < 30
        v = w.evaluate(good)
        assert v.ok, v.reason
        assert w.starts["forked"] == 4 and w.starts["spawned"] == 0


def test_idle_child_killed_between_tasks_does_not_fail_the_next_task(server, good):
    with EvalWorker(CFG, server=server) as w:
        assert w.evaluate(good).ok
        os.killpg(w._child.pid, signal.SIGKILL)
        time.sleep(0.5)
        v = w.evaluate(good)
        assert v.ok, v.reason
        assert w.starts["forked"] == 2


def test_dead_server_falls_back_to_spawning(tmp_path, good):
    s = ForkServer(CFG, log_path=str(tmp_path / "eval.log"))
    s.wait_ready()
    os.killpg(s._proc.pid, signal.SIGKILL)
    s._proc.wait(10)
    with pytest.raises(ForkServerError):
        s.spawn()
    with EvalWorker(CFG, server=s) as w:
        v = w.evaluate(good)
        assert v.ok, v.reason
        assert w.starts == {"forked": 0, "spawned": 1}
    s.close()
