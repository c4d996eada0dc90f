"""The judge's lock on its device: shared while a phase only needs the device to compute right,
exclusive while its numbers need the device quiet.

Several judges may share one GPU (a pool with ``slots_per_gpu`` above 1, concurrent
``cuda-agent check`` processes).  A verification round gives the same outputs beside another
job as alone; a timing does not.  So a check holds its device's lock *shared* from the moment it
prepares its runner until it is done (reference outputs, loading the candidate, verification;
a single file's extension build that is not cached lets it go meanwhile: CPU work, often minutes),
and *exclusive* for what it measures (timing the candidate with its spot checks and cross-checks,
measuring baselines, Nsight Compute's counters): an exclusive holder is alone on the device with
no other judge doing anything there.

It is ``flock`` on one file per physical device under the cache directory (``<cache>/locks``),
which the candidate's sandbox hides.  A GPU is named by its UUID (its PCI bus id where torch has
no UUID), which stays the same whatever ``CUDA_VISIBLE_DEVICES`` calls it and on whichever host
shares the cache; the CPU by the host's name.  The kernel drops an flock with the last descriptor
of the open file, so a judge that dies (SIGKILL included) frees its device at once; the file is
opened close-on-exec, so no runner the judge starts inherits it.

flock has no queue: a steady stream of short shared holders could keep an exclusive waiter out
forever.  Every taker therefore passes a gate (a second lock file) held exclusively while it
waits, so that once a timing waits for the device no new shared holder gets in before it.  Going
up from shared to exclusive lets the lock go first (flock's conversion is not atomic anyway, and a
holder that waited for the gate while holding the device could deadlock with the gate's holder).
Going down from exclusive to shared converts in place, without the gate: the judge is not a new
holder but one finishing its job (closing its runner), and making it queue behind every timing
that waits made all the judges of a busy device end together, each as late as the last.  (Should
another judge slip in while the kernel converts, this one just waits for it: no deadlock, as it
holds nothing then.)
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import time
from pathlib import Path

from .cache import cache_root

SHARED, EXCLUSIVE = "shared", "exclusive"
_FLOCK = {SHARED: fcntl.LOCK_SH, EXCLUSIVE: fcntl.LOCK_EX}


def device_key(device: str) -> str:
    """The physical device behind ``device`` as this process sees it: ``gpu-<uuid>`` for the
    current CUDA device, ``cpu-<host>`` for the CPU."""
    if device == "cuda":
        try:
            import torch

            p = torch.cuda.get_device_properties(torch.cuda.current_device())
            uuid = str(getattr(p, "uuid", "") or "")
            bus = [getattr(p, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
        except Exception:  # no usable CUDA here: the check reports that itself; lock by what is visible
            uuid, bus = "", [os.environ.get("CUDA_VISIBLE_DEVICES", "all")]
        if uuid:
            name = f"gpu-{uuid}"
        else:  # an older torch: the bus address, unique on its host
            name = f"gpu-{socket.gethostname()}-" + "-".join(str(b) for b in bus)
    else:
        name = f"cpu-{socket.gethostname()}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def lock_dir() -> Path:
    d = cache_root() / "locks"
    d.mkdir(parents=True, exist_ok=True)
    return d


class DeviceLock:
    """One judge's hold on one device: ``hold(SHARED | EXCLUSIVE)`` (the seconds it waited),
    ``release()``; a context manager that opens the files and lets everything go on exit.
    ``holds`` records each hold as (mode, start, end) in wall-clock seconds."""

    def __init__(self, device: str, key: str | None = None) -> None:
        self.key = key or device_key(device)
        self.mode: str | None = None
        self.holds: list[tuple[str, float, float | None]] = []
        self._fd: int | None = None
        self._gate: int | None = None

    def __enter__(self) -> "DeviceLock":
        d = lock_dir()
        # O_CLOEXEC (Python's default, said explicitly): a runner started by this judge must not
        # inherit the lock and keep the device held after its judge died
        self._fd = os.open(d / f"{self.key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._gate = os.open(d / f"{self.key}.gate", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        for fd in (self._fd, self._gate):
            if fd is not None:
                os.close(fd)
        self._fd = self._gate = None

    def hold(self, mode: str) -> float:
        """Hold the device in ``mode`` (already held so: nothing to do); the seconds waited."""
        if mode == self.mode:
            return 0.0
        assert self._fd is not None and self._gate is not None, "DeviceLock used outside its with-block"
        t0 = time.perf_counter()
        if self.mode == EXCLUSIVE and mode == SHARED:
            self._end_hold()
            fcntl.flock(self._fd, fcntl.LOCK_SH)  # converts: no unlock that would wake a waiter first
        else:
            self.release()
            fcntl.flock(self._gate, fcntl.LOCK_EX)
            try:
                fcntl.flock(self._fd, _FLOCK[mode])
            finally:
                fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.mode = mode
        self.holds.append((mode, time.time(), None))
        return time.perf_counter() - t0

    def release(self) -> None:
        if self.mode is None or self._fd is None:
            return
        self._end_hold()
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _end_hold(self) -> None:
        mode, start, _ = self.holds[-1]
        # the end is read before the lock goes and the start after it is taken, so the recorded
        # holds of two judges overlap only if the holds did (the pool's audit relies on it)
        self.holds[-1] = (mode, start, time.time())
        self.mode = None
