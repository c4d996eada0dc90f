"""The isolation launcher and the runner process on their own (no torch in the child, so
each test takes well under a second): exit statuses and signals come back exactly, a setup
failure is reported, the confinement holds from inside, the plan says what is missing,
and a detached process tree is killed whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox.isolation import SETUP_FAILED, Limits, launcher_env, plan_for, probe
from cuda_agent.sandbox.process import descendants, kill_tree


@pytest.fixture
def outside_tmp():
    """A scratch directory outside /tmp: a candidate sees its own private /tmp, so what the
    hide/conceal mechanisms must cover is tested where the host's tree stays visible."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    d = Path(tempfile.mkdtemp(prefix="cuda-agent-isolation-", dir=base))
    yield d
    subprocess.run(["rm", "-rf", str(d)])


@pytest.fixture
def job(tmp_path):
    """A job directory where check() puts them (/dev/shm), with a job.json naming a solution."""
    sol = tmp_path / "solution"
    sol.mkdir()
    (sol / "model_new.py").write_text("x = 1\n")
    d = Path(tempfile.mkdtemp(prefix="cuda-agent-job-test-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK)
                              else None))
    f = d / "job.json"
    f.write_text(json.dumps({"solution_dir": str(sol), "solution_file": str(sol / "model_new.py")}))
    yield f
    subprocess.run(["rm", "-rf", str(d)])


def launch(plan, argv, cwd) -> tuple[subprocess.CompletedProcess, dict]:
    r, w = os.pipe()
    p = json.loads(plan.to_json()) if not isinstance(plan, dict) else dict(plan)
    p["status_fd"] = w
    try:
        proc = subprocess.run([sys.executable, "-m", "cuda_agent.sandbox.launcher", json.dumps(p), "--", *argv],
                              capture_output=True, text=True, pass_fds=(w,), cwd=cwd, timeout=60,
                              env=launcher_env())
    finally:
        os.close(w)
    raw = os.read(r, 1 << 16).decode()
    os.close(r)
    return proc, json.loads(raw.splitlines()[-1]) if raw else {}


def test_exit_codes_and_signals_come_back(job):
    plan = plan_for(job, Limits())
    proc, st = launch(plan, ["sh", "-c", "exit 3"], job.parent)
    assert (proc.returncode, st) == (3, {"exit": 3})
    proc, st = launch(plan, ["sh", "-c", "kill -SEGV $$"], job.parent)
    assert (proc.returncode, st) == (-11, {"signal": 11})


def test_setup_failure_is_reported_not_run_unconfined(job):
    plan = json.loads(plan_for(job, Limits()).to_json())
    plan["rlimits"]["fsize"] = "lots"  # setrlimit cannot take it
    marker = job.parent / "ran"
    proc, st = launch(plan, ["touch", str(marker)], job.parent)
    assert proc.returncode == SETUP_FAILED
    assert st["setup_error"].startswith("rlimits:")
    assert not marker.exists()


INSIDE = r"""
import errno, json, os, socket, sys
rep = {"pid": os.getpid(), "ifaces": sorted(n for _, n in socket.if_nameindex())}
rep["cache"] = sorted(os.listdir(sys.argv[1])) if os.path.isdir(sys.argv[1]) else "absent"
rep["shm"] = sorted(os.listdir("/dev/shm"))
rep["capeff"] = open("/proc/self/status").read().split("CapEff:")[1].split()[0]
def writable(d):
    try:
        open(os.path.join(d, "w.tmp"), "w").close()
        os.unlink(os.path.join(d, "w.tmp"))
        return "yes"
    except OSError as e:
        return errno.errorcode[e.errno]
rep["package"] = writable(sys.argv[2])
rep["solution"] = writable(sys.argv[3])
rep["job"] = writable(os.getcwd())
rep["sys"] = writable("/sys/fs")
import tempfile
rep["home"] = writable(os.path.expanduser("~"))
rep["tmp"] = writable("/tmp")
try:  # a private /tmp: what is written there stays in the job
    open("/tmp/cuda-agent-isolation-leak", "w").write("x")
except OSError:
    pass
rep["tmpdir"] = [tempfile.gettempdir(), writable(tempfile.gettempdir())]
rep["dev_null"] = open("/dev/null", "w").write("x")
rep["procs"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[4])), timeout=2).close()
    rep["net"] = "connected"
except OSError as e:
    rep["net"] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(rep))
"""


def test_confinement_seen_from_inside(job):
    import socket

    from cuda_agent.sandbox.cache import cache_root

    pr = probe()
    if pr.namespaces != ["net", "pid", "mnt"]:
        pytest.skip(f"this platform cannot isolate: {pr.errors[:2]}")
    (cache_root() / "secret").write_text("other jobs' builds")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    plan = plan_for(job, Limits())
    assert plan.warnings == []
    assert plan.describe().startswith(("netns,pidns,mntns", "userns,netns,pidns,mntns"))
    pkg = Path(__import__("cuda_agent").__file__).parent
    sol = json.loads(job.read_text())["solution_dir"]
    proc, st = launch(plan, [sys.executable, "-c", INSIDE, str(cache_root()), str(pkg), sol,
                             str(srv.getsockname()[1])], job.parent)
    srv.close()
    assert st == {"exit": 0}, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["pid"] == 2 and rep["procs"] == [1, 2]  # only the init and itself
    assert rep["ifaces"] == ["lo"] and rep["net"] != "connected"
    assert rep["cache"] in ([], "absent")  # hidden (or gone with the host's /tmp, where the tests keep it)
    assert rep["shm"] == [job.parent.name]  # a private /dev/shm with only this job in it
    assert rep["package"] == "EROFS" and rep["solution"] == "EROFS" and rep["sys"] in ("EROFS", "EACCES")
    assert rep["job"] == "yes"
    # the rest of the tree is read-only: nothing is left behind for another check or tool
    assert rep["home"] == "EROFS"
    # ... but for a private, writable /tmp of its own (load_inline build directories)
    assert rep["tmp"] == ("yes" if plan.private_tmp else "EROFS")
    assert not Path("/tmp/cuda-agent-isolation-leak").exists()
    assert rep["tmpdir"] == [str(job.parent / "tmp"), "yes"] and rep["dev_null"] == 1
    assert "rofs" in plan.describe()
    if os.geteuid() == 0:
        assert rep["capeff"] == "0000000000000000"


def test_plan_without_isolation_warns(job):
    plan = plan_for(job, Limits(isolate=False))
    assert plan.describe() == "rlimits,watchdog"
    text = " ".join(plan.warnings)
    assert "network not isolated" in text and "PID namespace" in text and "filesystem not isolated" in text
    assert plan.rlimits == {"core": 0, "fsize": Limits().file_size_bytes}


def test_plan_matches_probe(job):
    pr = probe()
    plan = plan_for(job, Limits())
    for ns in ("net", "pid", "mnt"):
        assert (f"{ns}ns" in plan.describe()) == (ns in pr.namespaces)
    assert bool(plan.warnings) == (pr.namespaces != ["net", "pid", "mnt"])
    assert "net" not in plan_for(job, Limits(network=True)).namespaces


def test_default_limits():
    lim = Limits()
    ram = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    assert lim.memory_bytes == min(32 << 30, int(ram * 0.6))
    assert (lim.processes, lim.file_size_bytes) == (256, 8 << 30)


def test_kill_tree_kills_detached_descendants():
    p = subprocess.Popen(["sh", "-c", "setsid sleep 300 & (sleep 300 &) ; sleep 300"], start_new_session=True)
    deadline = time.time() + 10
    while len(descendants(p.pid)) < 2 and time.time() < deadline:
        time.sleep(0.05)
    kids = descendants(p.pid)
    assert len(kids) >= 2
    kill_tree(p.pid)
    p.wait(timeout=10)
    time.sleep(0.2)
    alive = []
    for k in kids:
        try:
            state = Path(f"/proc/{k}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            alive.append(k)
    assert alive == []


def test_the_default_cache_is_hidden_as_well_as_the_active_one(job, outside_tmp, monkeypatch):
    """With $CUDA_AGENT_CACHE set elsewhere, ~/.cache/cuda_agent (other evaluations' baselines)
    is hidden too: a candidate once multiplied the baselines cached there by 100 from a test run."""
    pr = probe()
    if "mnt" not in pr.namespaces:
        pytest.skip(f"this platform cannot isolate: {pr.errors[:2]}")
    home = outside_tmp / "home"
    default = home / ".cache" / "cuda_agent"
    default.mkdir(parents=True)
    (default / "baselines.sqlite").write_text("other evaluations' baselines")
    monkeypatch.setenv("HOME", str(home))
    plan = plan_for(job, Limits())
    assert str(default.resolve()) in plan.hide
    code = ("import os, sys\n"
            "d = sys.argv[1]\n"
            "print(sorted(os.listdir(d)) if os.path.isdir(d) else 'absent')\n"
            "try:\n"
            "    open(os.path.join(d, 'baselines.sqlite'), 'w').write('poisoned')\n"
            "except OSError as e:\n"
            "    print('write', type(e).__name__)\n")
    proc, st = launch(plan, [sys.executable, "-c", code, str(default)], job.parent)
    assert st == {"exit": 0}, proc.stderr
    assert proc.stdout.splitlines()[0] == "[]"
    assert (default / "baselines.sqlite").read_text() == "other evaluations' baselines"


def test_concealed_files_and_directories(job, outside_tmp):
    """``Limits.conceal``: a file reads empty and cannot be written, a directory is empty; the
    real ones are untouched (how the pool keeps its database and snapshots from candidates)."""
    pr = probe()
    if "mnt" not in pr.namespaces:
        pytest.skip(f"this platform cannot isolate: {pr.errors[:2]}")
    secret = outside_tmp / "state.sqlite"
    secret.write_text("jobs and results")
    folder = outside_tmp / "state.sqlite.d"
    folder.mkdir()
    (folder / "snapshot").write_text("another job's solution")
    plan = plan_for(job, Limits(conceal=(str(secret), str(folder))))
    assert str(secret.resolve()) in plan.mask and str(folder.resolve()) in plan.hide
    code = ("import os, sqlite3, sys\n"
            "print(repr(open(sys.argv[1]).read()), sorted(os.listdir(sys.argv[2])))\n"
            "try:\n"
            "    open(sys.argv[1], 'w').write('tampered')\n"
            "except OSError as e:\n"
            "    print('refused', type(e).__name__)\n"
            "print('after', repr(open(sys.argv[1]).read()))\n"
            "try:\n"
            "    sqlite3.connect(sys.argv[1]).execute('CREATE TABLE t (x)')\n"
            "    print('sqlite wrote')\n"
            "except sqlite3.Error as e:\n"
            "    print('sqlite refused')\n"
            "try:\n"
            "    open(os.path.join(sys.argv[2], 'x'), 'w').write('tampered')\n"
            "except OSError as e:\n"
            "    print('refused', type(e).__name__)\n")
    proc, st = launch(plan, [sys.executable, "-c", code, str(secret), str(folder)], job.parent)
    assert st == {"exit": 0}, proc.stderr
    lines = proc.stdout.splitlines()
    # the file is /dev/null in there: reads find nothing, writes vanish, sqlite cannot use it
    assert lines == ["'' []", "after ''", "sqlite refused", "refused OSError"], lines
    assert secret.read_text() == "jobs and results" and sorted(p.name for p in folder.iterdir()) == ["snapshot"]


def test_concealed_paths_inside_a_concealed_directory_are_not_mounted_twice(job, outside_tmp):
    """An eval conceals its output directory, and the pool inside it conceals its database and
    state directory there: only the outer directory is covered (a mount inside a hidden tmpfs
    has no mount point and broke the sandbox set-up)."""
    pr = probe()
    if "mnt" not in pr.namespaces:
        pytest.skip(f"this platform cannot isolate: {pr.errors[:2]}")
    out = outside_tmp / "out"
    (out / "pool.sqlite.d").mkdir(parents=True)
    (out / "pool.sqlite").write_text("db")
    plan = plan_for(job, Limits(conceal=(str(out), str(out / "pool.sqlite"), str(out / "pool.sqlite.d"))))
    assert str(out.resolve()) in plan.hide and plan.mask == []
    assert not [h for h in plan.hide if h.startswith(str(out.resolve()) + "/")]
    proc, st = launch(plan, [sys.executable, "-c", "import os, sys; print(os.listdir(sys.argv[1]))", str(out)],
                      job.parent)
    assert st == {"exit": 0}, proc.stderr
    assert proc.stdout.strip() == "[]"


LOOPBACK = r"""
import errno, json, socket, sys
rep = {}
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    rep["host"] = "connected"
except OSError as e:
    rep["host"] = errno.errorcode.get(e.errno, str(e))
try:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    socket.create_connection(s.getsockname(), timeout=2).close()
    rep["inside"] = "connected"
except OSError as e:
    rep["inside"] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(rep))
"""


@pytest.mark.parametrize("loopback", [False, True])
def test_loopback_for_profilers_stays_inside_the_namespace(job, loopback):
    """ncu and compute-sanitizer talk to their target over the loopback: Limits(loopback=True)
    sets the namespace's own ``lo`` up; the host's loopback stays out of reach either way."""
    import socket

    if "net" not in probe().namespaces:
        pytest.skip("no network namespace here")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    plan = plan_for(job, Limits(loopback=loopback))
    assert plan.loopback is loopback
    proc, st = launch(plan, [sys.executable, "-c", LOOPBACK, str(srv.getsockname()[1])], job.parent)
    srv.close()
    assert st == {"exit": 0}, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["host"] != "connected"
    assert rep["inside"] == ("connected" if loopback else "ENETUNREACH")
