"""Synth's task code (the ``llm`` composer's above all) runs contained as a check's candidate:
behind the sandbox's launcher, it cannot write outside its job directory nor reach the network,
whether its process was spawned or forked by the fork server."""

from __future__ import annotations

import os
import socket

import pytest

from cuda_agent.sandbox.isolation import probe
from cuda_agent.synth.evaluate import FilterConfig
from cuda_agent.synth.forkserver import ForkServer
from cuda_agent.synth.runner import EvalWorker

from .conftest import task

CFG = FilterConfig(device="cpu", compile=False, timeout_s=30, band_ms=(0.0, 1e6))

# Runs when the task is loaded: an escape that works raises, so only a contained task passes
# every filter; writing into its own job directory (TMPDIR) must work.
ESCAPE = '''
import errno, os, socket, tempfile

# the host's home (the task's own "~" is a private one in its job directory)
for target in ({outside!r}, os.path.join({home!r}, "cuda_agent_synth_escape")):
    try:
        with open(target, "w") as f:
            f.write("escaped")
    except OSError as e:
        assert e.errno in (errno.EROFS, errno.EACCES, errno.ENOENT), e
    else:
        raise RuntimeError("wrote outside the job directory: " + target)
with open(os.path.join(tempfile.gettempdir(), "mine.txt"), "w") as f:
    f.write("inside")
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", {port}))
except OSError:
    pass
else:
    raise RuntimeError("reached the network")
'''


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.setblocking(False)
    yield srv
    srv.close()


def _escape_task(tmp_path, port: int) -> str:
    return ESCAPE.format(outside=str(tmp_path / "escaped.txt"), home=os.path.expanduser("~"), port=port) + \
        task("return torch.relu(self.linear(x))")


def _assert_contained(v, tmp_path, listener) -> None:
    assert v.ok, v.reason
    assert not (tmp_path / "escaped.txt").exists()
    with pytest.raises(BlockingIOError):
        listener.accept()


@pytest.fixture(autouse=True)
def _needs_isolation():
    pr = probe()
    if pr.namespaces != ["net", "pid", "mnt"]:
        pytest.skip(f"this platform cannot isolate: {pr.errors[:2]}")


def test_spawned_task_code_is_contained(tmp_path, listener):
    with EvalWorker(CFG) as w:
        v = w.evaluate(_escape_task(tmp_path, listener.getsockname()[1]))
        _assert_contained(v, tmp_path, listener)
        assert w.starts == {"forked": 0, "spawned": 1}


def test_forked_task_code_is_contained(tmp_path, listener):
    with ForkServer(CFG, log_path=str(tmp_path / "eval.log")) as s, EvalWorker(CFG, server=s) as w:
        v = w.evaluate(_escape_task(tmp_path, listener.getsockname()[1]))
        _assert_contained(v, tmp_path, listener)
        assert w.starts == {"forked": 1, "spawned": 0}
        assert "netns,pidns,mntns" in s.box.isolation and "rofs" in s.box.isolation


def test_the_job_directory_goes_with_the_worker(tmp_path, make_task):
    """The worker's own job directory goes when the worker does."""
    with EvalWorker(CFG) as w:
        assert w.evaluate(make_task("return torch.relu(self.linear(x))")).ok
        job = w._child.box.job_dir
        assert job.is_dir()
    assert not job.exists()
