"""The judges' device lock (sandbox/devicelock.py) between real processes, and inside check().

Each judge here is a process of its own that holds the lock in a mode until told to let go.
Nothing is concluded from a sleep: a judge that must wait is seen waiting in ``/proc/locks``
(the kernel lists a blocked flock with ``->``), and the order of holds is read off the times
each judge recorded (the end is read before a lock goes, the start after it is taken).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox.devicelock import EXCLUSIVE, SHARED, DeviceLock, lock_dir

pytestmark = pytest.mark.timeout(300)

JUDGE = r"""
import subprocess, sys, time
from cuda_agent.sandbox.devicelock import DeviceLock
mode, key, child = sys.argv[1], sys.argv[2], sys.argv[3] == "child"
with DeviceLock("cpu", key=key) as lock:
    lock.hold(mode)
    if child:  # a process started while the lock is held, inheriting every descriptor it can
        kid = subprocess.Popen(["sleep", "600"], close_fds=False)
        print("child", kid.pid, flush=True)
    print("held", repr(lock.holds[-1][1]), flush=True)
    sys.stdin.readline()
    lock.release()
    print("released", repr(lock.holds[-1][2]), flush=True)
"""


class Judge:
    """A process holding ``key`` in ``mode`` until :meth:`let_go`."""

    def __init__(self, mode: str, key: str, child: bool = False) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", JUDGE, mode, key, "child" if child else "-"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.child: int | None = None
        self.start = self.end = None
        self._buf = b""

    def line(self, timeout: float = 120.0) -> str | None:
        """The next line it printed (raw reads: a buffered reader would hide a second line from select)."""
        deadline = time.time() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.time()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode().strip()

    def held(self, timeout: float = 120.0) -> float:
        while True:
            got = self.line(timeout)
            assert got, f"judge {self.proc.pid} did not get the lock within {timeout} s"
            word, value = got.split(" ", 1)
            if word == "child":
                self.child = int(value)
                continue
            assert word == "held", got
            self.start = float(value)
            return self.start

    def has_it(self) -> bool:
        """Whether it reported the lock held (without waiting)."""
        return b"\n" in self._buf or bool(select.select([self.proc.stdout.fileno()], [], [], 0)[0])

    def let_go(self) -> float:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        got = self.line()
        assert got and got.startswith("released"), got
        self.end = float(got.split(" ", 1)[1])
        return self.end

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def waiting(pid: int, key: str, timeout: float = 120.0) -> None:
    """Until ``pid`` is blocked on the device's lock file (not merely started)."""
    ino = os.stat(lock_dir() / f"{key}.lock").st_ino
    deadline = time.time() + timeout
    while time.time() < deadline:
        for line in Path("/proc/locks").read_text().splitlines():
            f = line.split()
            if "->" in f and f[f.index("->") + 4] == str(pid) and f[f.index("->") + 5].endswith(f":{ino}"):
                return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never waited for the lock {key}")


@pytest.fixture
def key(tmp_path) -> str:
    return f"test-{os.getpid()}-{tmp_path.name}"


@pytest.fixture
def judges():
    made: list[Judge] = []

    def make(mode: str, key: str, child: bool = False) -> Judge:
        made.append(Judge(mode, key, child))
        return made[-1]
    yield make
    for j in made:
        j.close()


def test_shared_holders_overlap(judges, key):
    a = judges(SHARED, key)
    a.held()
    b = judges(SHARED, key)
    b.held()  # while a still holds it: a lets go only below
    assert b.start >= a.start
    assert b.let_go() >= b.start and a.let_go() >= b.start


def test_an_exclusive_holder_waits_for_shared_ones_and_keeps_new_ones_out(judges, key):
    s1 = judges(SHARED, key)
    s1.held()
    x = judges(EXCLUSIVE, key)
    waiting(x.proc.pid, key)
    s2 = judges(SHARED, key)  # comes after the exclusive waiter: the gate keeps it behind
    time.sleep(1.0)  # gives s2 the chance to slip past a missing gate (no assertion rests on it)
    assert not x.has_it() and not s2.has_it()
    s1_end = s1.let_go()
    assert x.held() >= s1_end
    assert not s2.has_it()
    x_end = x.let_go()
    assert s2.held() >= x_end


def test_a_shared_holder_waits_for_the_exclusive_one(judges, key):
    x = judges(EXCLUSIVE, key)
    x.held()
    s = judges(SHARED, key)
    waiting(s.proc.pid, key)
    assert not s.has_it()
    x_end = x.let_go()
    assert s.held() >= x_end


def test_the_lock_goes_with_a_judge_killed_by_sigkill_even_if_its_child_lives(judges, key):
    x = judges(EXCLUSIVE, key, child=True)
    x.held()
    assert x.child is not None
    s = judges(SHARED, key)
    waiting(s.proc.pid, key)
    try:
        os.kill(x.proc.pid, signal.SIGKILL)
        x.proc.wait()
        assert Path(f"/proc/{x.child}").exists()  # the child lives on, with every inheritable descriptor
        s.held(timeout=60)
    finally:
        os.kill(x.child, signal.SIGKILL)


def test_the_lock_directory_is_hidden_from_the_runner(tmp_path):
    from cuda_agent.sandbox.isolation import Limits, plan_for, probe

    if "mnt" not in probe().namespaces:
        pytest.skip(f"no mount namespace here: {probe().errors[:2]}")
    (tmp_path / "job.json").write_text("{}")
    plan = plan_for(tmp_path / "job.json", Limits())
    d = lock_dir().resolve()
    assert any(d == Path(h) or Path(h) in d.parents for h in plan.hide), plan.hide


def test_a_check_waits_for_another_judges_timing_and_books_it_to_gpu_wait(example_task, example_dir):
    """Another judge holds the CPU shared while a timed check runs: the check verifies beside it
    and waits to time.  The wait is booked to ``gpu_wait`` and to no stage besides, and the
    check's exclusive hold starts after the other judge let go."""
    from cuda_agent.sandbox.check import CheckOptions, check
    from cuda_agent.sandbox.devicelock import device_key
    from cuda_agent.sandbox.timing import Recipe

    other = Judge(SHARED, device_key("cpu"))
    try:
        other.held()
        out: dict = {}
        o = CheckOptions(device="cpu", baselines=False, n_sets=2, extra_round=False, recipe=Recipe(budget_s=1.0))
        t = threading.Thread(target=lambda: out.setdefault("r", check(example_task, example_dir / "solution", o)))
        t.start()
        waiting(os.getpid(), device_key("cpu"), timeout=240)  # verified; now it waits to time
        blocked = time.perf_counter()
        time.sleep(2.0)  # the wait's length; only lower bounds are asserted on it
        other.let_go()
        waited = time.perf_counter() - blocked
        t.join(240)
    finally:
        other.close()
    r = out["r"]
    assert r.correct and r.timing is not None, r.error
    assert r.phases["gpu_wait"] >= waited - 0.05, (r.phases, waited)
    assert sum(r.phases.values()) <= r.seconds + 0.5, r.phases  # booked once: not to timing as well
    assert [h.mode for h in r.holds] == [SHARED, EXCLUSIVE, SHARED] and {h.device for h in r.holds} == {device_key("cpu")}
    assert r.holds[0].end <= r.holds[1].start and r.holds[1].start >= other.end
    # exclusive only while it measured: its runner's exit and the next spare's warm-up went under
    # the shared hold after it
    assert r.holds[1].end <= r.holds[2].start
    assert r.holds[1].end - r.holds[1].start <= r.phases["timing"] + 0.5, (r.holds, r.phases)


def test_a_cold_single_file_build_lets_the_device_go(example_task, example_dir, tmp_path):
    """A ``load_inline`` file builds while it loads, a minute or more for CUDA: the judge lets its
    device lock go for a build that is not cached (another judge's timing need not wait for it)
    and holds it again after; a cached build keeps the hold."""
    from cuda_agent.sandbox.check import CheckOptions, check

    src = (example_dir / "model_new_inline.py").read_text()
    # a source no cache has seen: the first check builds it cold, the second finds it
    sol = tmp_path / "model_new.py"
    sol.write_text(src.replace("#include <cmath>", f"#include <cmath>\n// {os.urandom(8).hex()}"))
    o = CheckOptions(device="cpu", timing=False, n_sets=2, extra_round=False)
    cold, warm = check(example_task, sol, o), check(example_task, sol, o)
    for r in (cold, warm):
        assert r.correct, r.error
    assert [x["cached"] for x in cold.extensions] == [False] and [x["cached"] for x in warm.extensions] == [True]
    built = cold.extensions[0]["seconds"]
    assert [h.mode for h in cold.holds] == [SHARED, SHARED], cold.holds
    gap = cold.holds[1].start - cold.holds[0].end
    assert gap >= 0.9 * built, (gap, built)  # let go for the whole build
    assert [h.mode for h in warm.holds] == [SHARED], warm.holds


def test_runners_in_transition_settle_under_the_shared_hold_before_a_timing(example_task, example_dir, monkeypatch):
    """Going exclusive lets the device go while it waits: the judge's runners in transition (a
    spare warming up, the last runner exiting) must be done before, not run beside the timing of
    whichever judge gets the device meanwhile.  The calls are recorded, each passed through."""
    from cuda_agent.sandbox import check as check_mod
    from cuda_agent.sandbox.check import CheckOptions, check
    from cuda_agent.sandbox.timing import Recipe

    events: list[str] = []
    settle, hold, release = check_mod.spares.settle, DeviceLock.hold, DeviceLock.release

    def rec_settle(*a, **k):
        events.append("settle")
        return settle(*a, **k)

    def rec_hold(self, mode):
        events.append(f"hold {mode}")
        return hold(self, mode)

    def rec_release(self):
        if self.mode is not None:
            events.append(f"release {self.mode}")
        return release(self)

    monkeypatch.setattr(check_mod.spares, "settle", rec_settle)
    monkeypatch.setattr(DeviceLock, "hold", rec_hold)
    monkeypatch.setattr(DeviceLock, "release", rec_release)
    o = CheckOptions(device="cpu", baselines=False, n_sets=2, extra_round=False, recipe=Recipe(budget_s=0.5))
    r = check(example_task, example_dir / "solution", o)
    assert r.correct and r.timing is not None, r.error
    i = events.index(f"hold {EXCLUSIVE}")
    assert events[i - 1] == "settle" and f"release {SHARED}" not in events[:i - 1], events


def test_the_candidate_is_frozen_while_its_judge_waits_for_the_device(example_task, example_dir):
    """While the judge waits to go exclusive the device is not its own: every process of the
    candidate's job is stopped (state T) for the wait, and thawed after it (the check times)."""
    from cuda_agent.sandbox.check import CheckOptions, check
    from cuda_agent.sandbox.devicelock import device_key
    from cuda_agent.sandbox.process import descendants, spares
    from cuda_agent.sandbox.timing import Recipe

    def state(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "gone"

    was_on = spares.on  # no spare starting beside the job: its processes are the new ones
    spares.enable(False)
    other = Judge(SHARED, device_key("cpu"))
    try:
        other.held()
        out: dict = {}
        o = CheckOptions(device="cpu", baselines=False, n_sets=2, extra_round=False, recipe=Recipe(budget_s=0.5))
        before = set(descendants(os.getpid()))  # whatever earlier tests of this process left
        t = threading.Thread(target=lambda: out.setdefault("r", check(example_task, example_dir / "solution", o)))
        t.start()
        waiting(os.getpid(), device_key("cpu"), timeout=240)  # verified; now it waits to time
        job = [p for p in descendants(os.getpid()) if p not in before]
        states = {p: state(p) for p in job}
        other.let_go()
        t.join(240)
    finally:
        other.close()
        spares.enable(was_on)
    assert job and all(s in ("T", "t") for s in states.values()), states
    r = out["r"]
    assert r.correct and r.timing is not None, r.error
    assert all(state(p) == "gone" for p in job)  # thawed, then closed with the check


def test_going_down_to_shared_does_not_queue_behind_a_waiting_timing(judges, key):
    """A judge done timing goes down to shared to close its runner: it converts in place, so it
    is not queued behind another judge's timing that waits (which would make every judge of a
    busy device end as late as the last), and that timing still waits until it lets go."""
    with DeviceLock("cpu", key=key) as mine:
        mine.hold(EXCLUSIVE)
        x = judges(EXCLUSIVE, key)
        waiting(x.proc.pid, key)  # x holds the gate now and waits for the device
        done = threading.Event()
        t = threading.Thread(target=lambda: (mine.hold(SHARED), done.set()), daemon=True)
        t.start()
        assert done.wait(60), "going down to shared waited behind the exclusive waiter"
        assert mine.mode == SHARED and not x.has_it()
        waiting(x.proc.pid, key)  # still blocked: by our shared hold now
        mine.release()
        ex_end, sh = mine.holds[0][2], mine.holds[1]
        assert sh[0] == SHARED and sh[1] >= ex_end
        assert x.held() >= sh[2]
        x.let_go()
