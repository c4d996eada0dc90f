"""A warm fork server for the evaluation processes.

Starting an evaluation process costs seconds of CPU before its first verdict: importing torch,
then the first ``torch.compile`` pays for the dynamo/inductor imports and their first C++ build.
The fork server pays that once.  It is started with ``subprocess`` (spawned: nothing of the
pipeline is inherited), imports torch and the filters, compiles a tiny function, and then forks
one evaluation process per request.  Each child

- becomes its own session (process group), so a timeout kills exactly it and what it started,
- takes the environment of its request (``CUDA_VISIBLE_DEVICES``...), which works because the
  server never initializes CUDA,
- talks to its requester over a socket the requester passed in (SCM_RIGHTS), and runs the same
  evaluation loop as a spawned process (:func:`cuda_agent.synth.child.serve_loop`).

The server itself runs behind the sandbox's launcher (:func:`cuda_agent.synth.child.contain`),
so every child is born inside its namespaces, read-only tree and limits.  Inside a PID
namespace a child's pid differs from the one the requester sees: the requester finds the host
pid of each child among the server's descendants (``NSpid`` in /proc), so a timeout kills the
right process group.  The server reaps its children and reports each exit status to the
requester, so a crash verdict still names the exit code or signal.  If the server cannot start
or dies, :class:`EvalWorker` falls back to spawning a fresh interpreter per process
(:mod:`cuda_agent.synth.runner`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

from ..sandbox.process import descendants
from .child import config, contain, lock_dirs, quiet_stdio, serve_loop
from .evaluate import FilterConfig

STARTUP_TIMEOUT_S = 300.0
_MSG = 1 << 20


class ForkServerError(RuntimeError):
    """The fork server is not available (failed to start, died, or refused a request)."""


def _send(sock: socket.socket, obj: Any, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else status


# --- server side --------------------------------------------------------------------------------

def _warm_up(cfg: FilterConfig) -> None:
    """Import and exercise what every task needs, without touching CUDA."""
    import torch

    x = torch.randn(8, 64)
    torch.nn.functional.layer_norm(torch.nn.Linear(64, 64)(x), (64,))
    if cfg.compile:
        f = torch.compile(lambda t: torch.softmax(t * 2.0 + 1.0, dim=-1).sum(dim=0), backend=cfg.compile_backend)
        with torch.no_grad():
            f(x)
        torch._dynamo.reset()


def _child(req: dict[str, Any], fd: int, ctrl: socket.socket) -> None:
    """Runs in the forked child: never returns."""
    code = 0
    try:
        ctrl.close()
        os.setsid()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.update(req.get("env") or {})
        from multiprocessing.connection import Connection

        conn = Connection(fd)
        serve_loop(conn, conn, config(req["cfg"]))
    except BaseException:  # noqa: BLE001 - the child must never return into the server loop
        code = 70
    finally:
        os._exit(code)


def serve(ctrl_fd: int, cfg_dict: dict[str, Any]) -> None:
    """Server main loop (in the spawned server process; its stderr is the log)."""
    ctrl = socket.socket(fileno=ctrl_fd)
    quiet_stdio()
    cfg = config(cfg_dict)
    import torch

    torch.set_num_threads(1)  # no OpenMP team in the server: children may fork safely and set their own
    try:
        import torch._inductor.config as ic

        ic.compile_threads = 1
    except Exception:  # noqa: BLE001
        pass
    from . import evaluate  # noqa: F401  (imported once, shared by every child)

    t0 = time.time()
    try:
        _warm_up(cfg)
        warm = ""
    except Exception as e:  # noqa: BLE001 - a failed warm-up only costs time later
        warm = f"{type(e).__name__}: {e}"
    _send(ctrl, {"ready": True, "warm_s": round(time.time() - t0, 2), "warm_error": warm,
                 "threads": len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None})
    children: set[int] = set()
    while True:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            children.discard(pid)
            _send(ctrl, {"exit": pid, "code": _exit_code(status)})
        r, _, _ = select.select([ctrl], [], [], 0.2)
        if not r:
            continue
        msg, fds, _, _ = socket.recv_fds(ctrl, _MSG, 1)
        if not msg:
            return  # the requester is gone; children end when their own sockets close
        req = json.loads(msg)
        if not fds:
            _send(ctrl, {"id": req.get("id"), "error": "no socket passed"})
            continue
        pid = os.fork()
        if pid == 0:
            _child(req, fds[0], ctrl)
        os.close(fds[0])
        children.add(pid)
        _send(ctrl, {"id": req.get("id"), "pid": pid})


def main() -> None:
    """Entry of the server process (argv[1]: JSON with the ctrl fd and the filter config)."""
    a = json.loads(sys.argv[1])
    serve(int(a["fd"]), a["cfg"])


def _host_pid(root: int, inner: int) -> int | None:
    """The pid, as this process sees it, of the descendant of ``root`` whose innermost pid is
    ``inner`` (the same number when there is no PID namespace)."""
    for p in descendants(root, 100_000):
        try:
            with open(f"/proc/{p}/status") as f:
                nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if nspid and int(nspid[-1]) == inner:
            return p
    return None


# --- requester side -----------------------------------------------------------------------------

class ForkServer:
    """Handle on one fork server process; thread-safe :meth:`spawn`.

    The server starts (and warms up) in the background as soon as this object exists, so the
    caller can load its own things meanwhile; the first :meth:`spawn` waits for it.
    """

    def __init__(self, cfg: FilterConfig, log_path: str | None = None, env: dict[str, str] | None = None):
        self.cfg = cfg
        self.log_path = log_path
        self.info: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._cv = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits: dict[int, int] = {}
        self._ready = False
        self._dead = ""
        self._next = 0
        self._inner: dict[int, int] = {}
        """host pid -> pid inside the server's PID namespace, of each child."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._ctrl = mine
        arg = json.dumps({"fd": theirs.fileno(), "cfg": asdict(cfg)})
        self.box = contain([sys.executable, "-c", "from cuda_agent.synth.forkserver import main; main()", arg], env,
                           expose=lock_dirs(cfg))
        log = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self._proc = subprocess.Popen(
                self.box.argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=self.box.env, cwd=self.box.job_dir, start_new_session=True)
        except OSError:
            self.box.cleanup()
            raise
        finally:
            theirs.close()
            os.close(log)
        self._reader = threading.Thread(target=self._read, name="forkserver-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self._ctrl.recv(_MSG)
            except OSError:
                data = b""
            with self._cv:
                if not data:
                    self._dead = self._dead or f"fork server exited (code {self._proc.poll()})"
                    self._cv.notify_all()
                    return
                msg = json.loads(data)
                if msg.get("ready"):
                    self._ready = True
                    self.info = msg
                elif "exit" in msg:
                    self._exits[int(msg["exit"])] = int(msg["code"])
                elif "id" in msg:
                    if "pid" in msg:  # a new child: an old exit under a reused pid is not its own
                        self._exits.pop(int(msg["pid"]), None)
                    self._replies[int(msg["id"])] = msg
                self._cv.notify_all()

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        with self._cv:
            if not self._cv.wait_for(lambda: self._ready or self._dead, timeout):
                raise ForkServerError(f"fork server not ready after {timeout:.0f} s")
            if not self._ready:
                raise ForkServerError(self._dead)

    def spawn(self, env: dict[str, str] | None = None, timeout: float = 30.0) -> tuple[int, socket.socket]:
        """Fork one evaluation process; returns its pid as we see it (= its process group) and our
        socket to it."""
        self.wait_ready()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._lock:
                self._next += 1
                rid = self._next
                try:
                    _send(self._ctrl, {"id": rid, "env": env or {}, "cfg": asdict(self.cfg)}, [theirs.fileno()])
                except OSError as e:
                    raise ForkServerError(f"fork server unreachable: {e}") from None
            with self._cv:
                if not self._cv.wait_for(lambda: rid in self._replies or self._dead, timeout):
                    raise ForkServerError(f"fork server did not answer in {timeout:.0f} s")
                if rid not in self._replies:
                    raise ForkServerError(self._dead)
                reply = self._replies.pop(rid)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        if "pid" not in reply:
            mine.close()
            raise ForkServerError(reply.get("error", "fork failed"))
        inner = int(reply["pid"])
        pid = _host_pid(self._proc.pid, inner)
        if pid is None:  # never guess: a wrong pid would be killed on a timeout
            mine.close()
            raise ForkServerError(f"forked child {inner} not found among the server's processes")
        with self._cv:
            self._inner[pid] = inner
        return pid, mine

    def exit_code(self, pid: int, timeout: float = 5.0) -> int | None:
        """Exit status of a child (``-signal`` if killed), once the server has reaped it."""
        with self._cv:
            inner = self._inner.get(pid, pid)
            self._cv.wait_for(lambda: inner in self._exits or self._dead, timeout)
            code = self._exits.pop(inner, None)
            if code is not None:
                self._inner.pop(pid, None)
            return code

    def exited(self, pid: int) -> bool:
        with self._cv:
            return self._inner.get(pid, pid) in self._exits

    def alive(self) -> bool:
        return not self._dead and self._proc.poll() is None

    def close(self) -> None:
        try:
            self._ctrl.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._ctrl.close()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait(5)
        self.box.cleanup()

    def __enter__(self) -> "ForkServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["ForkServer", "ForkServerError", "serve", "main"]

