"""The launcher: the program that runs in front of an untrusted command and contains it, as
the judge's plan says (sandbox/isolation.py builds the plan and the command line)::

    python -m cuda_agent.sandbox.launcher PLAN_JSON -- python -m cuda_agent.sandbox.runner job.json

It ``unshare``s new network, mount and PID namespaces (a user namespace too when not root),
forks an init that is PID 1 of the new PID namespace (dies with the launcher, and takes every
descendant with it, even ones that called ``setsid``), and there, before ``exec`` of the
command: makes the whole file tree read-only (every mount, recursively), mounts a fresh
``/proc``, hides the build caches and ``/dev/shm`` under empty tmpfs (the latter a private
writable one), binds the job directory back writable and the job's own files read-only,
points ``TMPDIR`` into the job, sets RLIMIT_CORE/RLIMIT_FSIZE, drops every capability and sets
no_new_privs.  The init reaps orphans and reports the command's exit status on a status pipe.
Where the platform allows none of it the same launcher still sets the rlimits and acts as a
child subreaper.  With ``"probe": true`` in the plan it reports what took effect instead
(isolation.probe).

It imports nothing from the rest of the package: it is all that runs before the command.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import stat
import sys
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 36, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SETUP_FAILED = 97  # launcher exit code when the planned isolation could not be applied


def host_ns(kind: str) -> int:
    try:
        return os.stat(f"/proc/self/ns/{kind}").st_ino
    except OSError:
        return 0


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {errno.errorcode.get(e, e)} {os.strerror(e)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    _check(libc.mount(src.encode() if src else None, target.encode(), fstype.encode() if fstype else None,
                      flags, data.encode() if data else None), f"mount {target}")


_ST_TO_MS = {2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: 1024, 2048: 2048, 4096: 1 << 21}


def _mountpoints_under(path: str) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mp = line.split()[4].encode().decode("unicode_escape")
        if mp == path or mp.startswith(path.rstrip("/") + "/"):
            out.append(mp)
    return out


def _make_readonly(path: str) -> None:
    """Bind ``path`` onto itself and make it (and every mount below it) read-only."""
    _mount(path, path, None, MS_BIND | MS_REC)

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    import platform

    if platform.machine() in ("x86_64", "aarch64"):  # mount_setattr(2), Linux >= 5.12
        attr = MountAttr(1, 0, 0, 0)  # MOUNT_ATTR_RDONLY
        libc = _libc()
        if libc.syscall(442, -100, path.encode(), 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
            return
    for mp in _mountpoints_under(path):
        try:
            _remount_ro(mp)
        except OSError:
            if mp == path:
                raise


def _remount_ro(mp: str, ro: bool = True) -> None:
    """Make the mount at ``mp`` read-only (or writable), keeping its other flags (locked ones in
    a user ns)."""
    keep = os.statvfs(mp).f_flag
    flags = MS_BIND | MS_REMOUNT | (MS_RDONLY if ro else 0)
    for st, ms in _ST_TO_MS.items():
        if keep & st:
            flags |= ms
    _mount(None, mp, None, flags)


def _make_root_readonly() -> None:
    """Every mount of this (private) namespace read-only.  No bind of ``/`` onto itself: the
    process's root would stay the mount underneath."""

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    import platform

    if platform.machine() in ("x86_64", "aarch64"):
        attr = MountAttr(1, 0, 0, 0)  # MOUNT_ATTR_RDONLY, AT_RECURSIVE
        if _libc().syscall(442, -100, b"/", 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
            return
    for mp in _mountpoints_under("/"):
        try:
            _remount_ro(mp)
        except OSError:
            if mp == "/":
                raise


def _setup_mounts(plan: dict) -> None:
    cwd = os.getcwd()
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if plan.get("root_readonly"):
        _make_root_readonly()
    if "pid" in plan["namespaces"]:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    hide = [h for h in plan["hide"] if os.path.isdir(h)]
    if plan.get("private_tmp") and plan.get("tmpdir"):  # what lies in /tmp goes with the private /tmp
        hide = [h for h in hide if not (h == "/tmp" or h.startswith("/tmp/"))]
    # expose: open what must stay visible before it is hidden, bind it back afterwards
    held = []
    for path, mode in plan["expose"]:
        if os.path.exists(path):
            held.append((os.open(path, os.O_PATH | os.O_CLOEXEC), path, mode))
    tmp_fd = -1
    if plan.get("private_tmp") and plan.get("tmpdir"):  # reached before /dev/shm (holding the job) is hidden
        os.makedirs(plan["tmpdir"], exist_ok=True)
        tmp_fd = os.open(plan["tmpdir"], os.O_PATH | os.O_CLOEXEC)
    for p in plan["readonly"]:
        if os.path.isdir(p):
            _make_readonly(p)
    for h in hide:
        shm = h == plan.get("shm")
        opts = f"size={plan['shm_bytes']},mode=1777" if shm else "size=1m,mode=755"
        _mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV, opts)
    if tmp_fd >= 0:
        # the job's tmp (writable, reached through the held job directory) over /tmp; what was
        # exposed under /tmp (a solution in /tmp/ws) is bound back below like under a hidden dir
        _mount(f"/proc/self/fd/{tmp_fd}", "/tmp", None, MS_BIND)
        _remount_ro("/tmp", False)
        os.close(tmp_fd)
        hide = hide + ["/tmp"]
    held.sort(key=lambda h: h[1].rstrip("/").count("/"))  # an enclosing directory first, then what is inside
    for fd, path, mode in held:
        if any(path == h or path.startswith(h.rstrip("/") + "/") for h in hide):
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        _remount_ro(path, mode == "ro")  # a bind keeps the source's flags: set them both ways
        os.close(fd)
    for h in hide:
        if h not in (plan.get("shm"), "/tmp"):
            _mount(None, h, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for f in plan.get("mask", []):
        if os.path.isfile(f):  # /dev/null in its place: reads find nothing, writes vanish
            _mount("/dev/null", f, None, MS_BIND)
    if "pid" in plan["namespaces"] and os.path.isdir("/proc/sys"):
        _make_readonly("/proc/sys")
    os.chdir(cwd)  # the view through the new mounts
    if plan.get("tmpdir"):
        os.makedirs(plan["tmpdir"], exist_ok=True)
        os.environ["TMPDIR"] = plan["tmpdir"]


def _loopback_up() -> None:
    """``ip link set lo up`` in this network namespace (SIOCSIFFLAGS on a struct ifreq)."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", 0x1 | 0x8 | 0x40))  # IFF_UP|LOOPBACK|RUNNING


def _drop_caps() -> None:
    libc = _libc()
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)()
    _check(libc.capset(ctypes.byref(Header(0x20080522, 0)), data), "capset")


def _cap_eff() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return -1


def _probe_report(plan: dict) -> dict:
    host = plan.get("host_ns", {})
    rep: dict = {"ok": True, "caps_dropped": bool(plan["drop_caps"]) and _cap_eff() == 0}
    rep["net"] = host_ns("net") != host.get("net")
    rep["pid"] = os.getpid() == 1
    hidden = plan["hide"][0] if plan["hide"] else None
    if hidden:
        seen = sorted(os.listdir(hidden))
        exposed = os.path.join(hidden, "exposed")
        try:
            Path(exposed, "w").write_text("ok")
            rw = True
        except OSError:
            rw = False
        try:
            Path(plan["readonly"][0], "w").write_text("no")
            ro = False
        except OSError as e:
            ro = e.errno == errno.EROFS
        rep["mnt"] = seen == ["exposed"] and rw and ro
        if not rep["mnt"]:
            rep["why"] = f"mounts not effective (hidden dir lists {seen}, exposed writable {rw}, read-only {ro})"
    return rep


def _report(fd: int, d: dict) -> None:
    try:
        os.write(fd, (json.dumps(d) + "\n").encode())
    except OSError:
        pass


def _orphaned_init() -> None:
    """The launcher died (the judge with it): take every process of the job along, then go."""
    _kill_descendants(os.getpid())
    os._exit(SETUP_FAILED)


def _init(plan: dict, argv: list[str], status_w: int, lifeline: int) -> None:
    """Runs in the fork (PID 1 of a new PID namespace when there is one); never returns.

    It dies with the launcher: with a PID namespace by SIGKILL (the kernel then kills every
    process in the namespace); without one, the parent-death signal is SIGUSR2, whose handler
    kills the whole tree first (the init is its subreaper, so orphans and setsid'd daemons of
    the job are still its descendants).  ``lifeline`` is the read end of a pipe only the
    launcher writes to: at EOF the launcher was gone before the signal was armed."""
    step = "setup"
    try:
        pidns = "pid" in plan["namespaces"]
        if not pidns:
            step = "subreaper"
            _check(_libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")
            signal.signal(signal.SIGUSR2, lambda *_: _orphaned_init())
        step = "pdeathsig"
        _check(_libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL if pidns else signal.SIGUSR2, 0, 0, 0),
               "prctl(PDEATHSIG)")
        import select

        if select.select([lifeline], [], [], 0)[0]:  # EOF: the launcher died before the prctl
            os._exit(SETUP_FAILED)
        if "mnt" in plan["namespaces"]:
            step = "mounts"
            _setup_mounts(plan)
        if plan.get("loopback"):
            step = "loopback"
            _loopback_up()
        step = "rlimits"
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if plan["rlimits"].get("fsize"):
            n = int(plan["rlimits"]["fsize"])
            resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
        if plan["drop_caps"]:
            step = "drop capabilities"
            _drop_caps()
        step = "no_new_privs"
        _check(_libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        if plan.get("probe"):
            step = "probe"
            _report(status_w, _probe_report(plan))
            os._exit(0)
    except BaseException as e:  # noqa: BLE001 - report, never run unconfined by accident
        _report(status_w, {"setup_error": f"{step}: {e}"})
        os._exit(SETUP_FAILED)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the command (same uid) cannot ptrace its init
    child = os.fork()
    if child == 0:
        os.close(status_w)
        os.close(lifeline)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGUSR2):
            signal.signal(s, signal.SIG_DFL)
        # the command dies with its init too (the init is single-threaded, so "parent" is exact)
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, f"cuda-agent sandbox: cannot run {argv[0]}: {e}\n".encode())
        os._exit(127)
    # only the command holds the protocol pipes
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    status = 0
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child:
            break
    if "pid" not in plan["namespaces"]:
        _kill_descendants(os.getpid())
    rep = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit": os.waitstatus_to_exitcode(status)}
    _report(status_w, rep)
    os._exit(0)


def _kill_descendants(root: int) -> None:
    """SIGKILL every descendant of ``root`` (we are their subreaper, so orphans stay ours)."""
    for _ in range(50):
        kids = []
        for t in os.listdir(f"/proc/{root}/task"):
            try:
                kids += [int(x) for x in Path(f"/proc/{root}/task/{t}/children").read_text().split()]
            except OSError:
                pass
        if not kids:
            return
        stack = list(kids)
        while stack:
            p = stack.pop()
            try:
                os.kill(p, signal.SIGSTOP)  # freeze first so a forking loop cannot outrun us
                for t in os.listdir(f"/proc/{p}/task"):
                    stack += [int(x) for x in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                pass
            kids.append(p)
        for p in set(kids):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def launch(plan: dict, argv: list[str]) -> None:
    """The launcher: unshare, fork the init, wait for it, mirror the command's status.

    Nothing outlives its judge: the launcher gets SIGKILL when the judge's thread that started
    it ends (the judge starts launchers from one thread that lives as long as the judge,
    process.py), and checks that the judge (``parent_pid``) did not die before that was armed."""
    status_fd = int(plan.get("status_fd", -1))
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if plan.get("parent_pid") and os.getppid() != int(plan["parent_pid"]):
        os._exit(SETUP_FAILED)  # the judge is gone already: nobody to run this for
    flags = 0
    for name, flag in (("net", CLONE_NEWNET), ("mnt", CLONE_NEWNS), ("pid", CLONE_NEWPID)):
        if name in plan["namespaces"]:
            flags |= flag
    if flags and plan.get("userns"):
        flags |= CLONE_NEWUSER
    uid, gid = os.getuid(), os.getgid()
    try:
        if flags:
            _check(_libc().unshare(flags), "unshare")
        if flags & CLONE_NEWUSER:
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
            Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    except OSError as e:
        _report(status_fd, {"setup_error": f"namespaces: {e}"})
        os._exit(SETUP_FAILED)
    r, w = os.pipe()
    life_r, life_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(life_w)
        if status_fd >= 0:
            os.close(status_fd)
        _init(plan, argv, w, life_r)
    os.close(w)
    os.close(life_r)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    _, status = os.waitpid(pid, 0)
    raw = b""
    while chunk := os.read(r, 4096):
        raw += chunk
    try:
        rep = json.loads(raw.decode().splitlines()[-1])
    except (ValueError, IndexError):
        rep = {"setup_error": f"sandbox init ended with status {status} before reporting"}
    _report(status_fd, rep)
    if "signal" in rep:
        sig = int(rep["signal"])
        signal.signal(sig, signal.SIG_DFL)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), sig)
    os._exit(int(rep.get("exit", SETUP_FAILED if "setup_error" in rep else 0)) & 0xFF)


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.stderr.write("usage: python -m cuda_agent.sandbox.launcher PLAN_JSON -- COMMAND...\n")
        sys.exit(2)
    launch(json.loads(sys.argv[1]), sys.argv[3:])


if __name__ == "__main__":
    main()
