"""The Ray back-end: the same pool on a Ray cluster (an existing engine, not our networking).

One actor per slot, scheduled with ``num_gpus=1/slots_per_gpu`` (Ray gives it one GPU, shared
by that many actors, and sets its ``CUDA_VISIBLE_DEVICES``), or ``num_cpus=1`` for CPU slots; builds are Ray tasks with
``num_cpus=1``.  The solution snapshot travels with the work item (base64 files, written into
a temporary directory on whichever node runs it), so nodes share no filesystem with the
pool; the build cache is per node unless ``CUDA_AGENT_CACHE`` points at shared storage (a
slot on another node than its builder recompiles, with the same result).

``Pool(backend="ray", backend_options={"address": "ray://head:10001"})`` joins a cluster;
without an address the pool starts a local Ray with ``num_cpus``/``num_gpus`` for its slots
and builders and shuts it down on close.  An actor that dies (or runs past the job's
timeout and is killed) is reported as ``died`` and replaced.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backend import (BUILT, CHECKED, DIED, FAILED, SLOTS_PER_GPU, Backend, Event, WorkItem, check_slots_per_gpu,
                      register_backend)
from .local import default_build_workers
from .store import PoolError


def _apply_env(env: dict[str, str], device: str, role: str) -> None:
    os.environ.update(env)
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    elif role == "build":
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"


def _run(fn_name: str, item: dict[str, Any], files: dict[str, str], rel: str) -> dict[str, Any]:
    from . import worker

    path, root = worker.materialize(files, rel)
    try:
        out = getattr(worker, fn_name)({**item, "solution": path})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {**out, "pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


class SlotActor:
    """Lives on one GPU (or CPU slot); runs check() for one job at a time."""

    def __init__(self, env: dict[str, str], device: str) -> None:
        _apply_env(env, device, "slot")
        self.device = device
        from .worker import warm_up

        warm_up("slot", device)

    def info(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "ip": ray.util.get_node_ip_address(), "gpus": [str(g) for g in ray.get_gpu_ids()]}

    def check(self, item: dict[str, Any], files: dict[str, str], rel: str) -> dict[str, Any]:
        return _run("check_job", item, files, rel)


def build_task(item: dict[str, Any], files: dict[str, str], rel: str, env: dict[str, str],
               device: str) -> dict[str, Any]:
    _apply_env(env, device, "build")
    return _run("build_job", item, files, rel)


@dataclass
class _Slot:
    name: str
    actor: Any = None
    device_key: str = ""
    ref: Any = None
    item: WorkItem | None = None
    since: float = 0.0
    info_ref: Any = None
    """While a (replacement) actor starts: its pending ``info()`` call."""
    failures: int = 0
    """Actors in a row that died while starting (after 3 the slot is taken out of service)."""


@register_backend("ray")
class RayBackend(Backend):
    name = "ray"

    def __init__(self, device: str = "cuda", gpus: list[str] | list[int] | int | None = None,
                 slots: int | None = None, build_workers: int | None = None, log_dir: str | Path | None = None,
                 env: dict[str, str] | None = None, address: str | None = None,
                 init_options: dict[str, Any] | None = None, slots_per_gpu: int = SLOTS_PER_GPU) -> None:
        if device not in ("cuda", "cpu"):
            raise PoolError(f"unknown device {device!r} (cuda or cpu)")
        self.device = device
        self.per_gpu = check_slots_per_gpu(device, slots_per_gpu)
        self.address = address
        self.init_options = dict(init_options or {})
        self.gpu_ids: list[str] | None = None
        if device == "cuda":
            if slots is not None:
                raise PoolError("on device='cuda' the slots are the GPUs: give gpus, not slots")
            if isinstance(gpus, int):
                self.n_slots = gpus
            elif gpus is None:
                self.n_slots = 0  # all GPUs of the cluster, counted at start
            else:
                self.gpu_ids = [str(g) for g in gpus]
                self.n_slots = len(self.gpu_ids)
        else:
            if gpus:
                raise PoolError("device='cpu' has no GPUs: give slots=N")
            self.n_slots = 1 if slots is None else int(slots)
            if self.n_slots < 1:
                raise PoolError("slots must be at least 1")
        self.n_build = build_workers
        self.env = dict(env or {})
        self._slots: list[_Slot] = []
        self._builds: dict[Any, tuple[WorkItem, str, float]] = {}
        self._build_seq = 0
        self._owns_ray = False
        self._replaced = 0
        self._closed = False

    # --- start / stop -----------------------------------------------------------------
    def start(self) -> None:
        try:
            import ray
        except ImportError:
            raise PoolError("the ray back-end needs ray: pip install 'cuda-agent[pool]'") from None
        from ..cache import cache_root
        from .devices import gpu_arch, visible_gpus

        self._ray = ray
        if self.device == "cuda" and "CUDA_AGENT_ARCH" not in self.env:
            ids = self.gpu_ids or visible_gpus()
            arch = gpu_arch(ids[0]) if ids else None
            if arch:
                self.env["CUDA_AGENT_ARCH"] = arch
        if not ray.is_initialized():
            opts = {"include_dashboard": False, "log_to_driver": False, "ignore_reinit_error": True,
                    **self.init_options}
            if self.address:
                ray.init(address=self.address, **opts)
            else:
                if self.device == "cuda" and not self.n_slots:
                    self.gpu_ids = visible_gpus()
                    self.n_slots = len(self.gpu_ids)
                nb = self.n_build or default_build_workers(max(1, self.n_slots))
                opts.setdefault("object_store_memory", 256 << 20)
                if self.device == "cuda":
                    opts.setdefault("num_gpus", self.n_slots)
                    opts.setdefault("num_cpus", max(os.cpu_count() or 1, self.n_slots * self.per_gpu + nb))
                else:
                    opts.setdefault("num_gpus", 0)
                    opts.setdefault("num_cpus", self.n_slots + nb)
                old = os.environ.get("CUDA_VISIBLE_DEVICES")
                if self.gpu_ids is not None:
                    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
                try:
                    ray.init(**opts)
                finally:
                    if self.gpu_ids is not None:
                        if old is None:
                            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                        else:
                            os.environ["CUDA_VISIBLE_DEVICES"] = old
                self._owns_ray = True
                self.env.setdefault("CUDA_AGENT_CACHE", str(cache_root()))
        if self.device == "cuda" and not self.n_slots:
            self.n_slots = int(ray.cluster_resources().get("GPU", 0))
            if not self.n_slots:
                raise PoolError("the Ray cluster has no GPUs (use device='cpu' with slots=N)")
        if self.n_build is None:
            self.n_build = default_build_workers(self.n_slots)
        self._actor_cls = ray.remote(SlotActor)
        self._build_fn = ray.remote(build_task)
        self._slots = [_Slot(f"ray:{i}") for i in range(self.n_slots * self.per_gpu)]
        for s in self._slots:
            self._new_actor(s)
        for s in self._slots:  # wait for every actor: a cluster without room fails here, clearly
            try:
                self._describe(s, self._ray.get(s.info_ref, timeout=600))
            except self._ray.exceptions.GetTimeoutError:
                raise PoolError(f"Ray could not place slot {s.name} within 600 s (not enough "
                                f"{'GPUs' if self.device == 'cuda' else 'CPUs'} in the cluster?)") from None

    def _new_actor(self, s: _Slot) -> None:
        res = {"num_gpus": 1 / self.per_gpu, "num_cpus": 1} if self.device == "cuda" else {"num_gpus": 0, "num_cpus": 1}
        s.actor = self._actor_cls.options(max_restarts=0, max_task_retries=0, **res).remote(self.env, self.device)
        s.info_ref = s.actor.info.remote()
        s.device_key = ""

    def _describe(self, s: _Slot, info: dict[str, Any]) -> None:
        s.info_ref = None
        idx = s.name.split(":")[1]
        kind = f"gpu:{','.join(info['gpus'])}" if self.device == "cuda" else f"cpu-slot:{idx}"
        s.device_key = f"{info['ip']}/{kind}"

    def close(self) -> None:
        self._closed = True
        ray = getattr(self, "_ray", None)
        if ray is None:
            return
        for s in self._slots:
            if s.actor is not None:
                try:
                    ray.kill(s.actor, no_restart=True)
                except Exception:
                    pass
        for ref in list(self._builds):
            try:
                ray.cancel(ref, force=True)
            except Exception:
                pass
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()

    # --- Backend ----------------------------------------------------------------------
    def slots(self) -> list[str]:
        return [s.name for s in self._slots]

    def free_slots(self) -> list[str]:
        return [s.name for s in self._slots if s.item is None and s.actor is not None and s.info_ref is None]

    def free_builders(self) -> int:
        return max(0, (self.n_build or 1) - len(self._builds))

    def _payload(self, item: WorkItem) -> tuple[dict[str, Any], dict[str, str], str]:
        from .worker import pack

        root = item.snapshot_root or item.solution
        rel = "" if Path(item.solution) == Path(root) else str(Path(item.solution).relative_to(root))
        return item.to_dict(), pack(root), rel

    def dispatch_build(self, item: WorkItem) -> str:
        d, files, rel = self._payload(item)
        ref = self._build_fn.options(num_cpus=1, num_gpus=0, max_retries=0).remote(d, files, rel, self.env, self.device)
        self._build_seq += 1
        name = f"ray-build:{self._build_seq}"
        self._builds[ref] = (item, name, time.time())
        return name

    def dispatch_check(self, slot: str, item: WorkItem) -> None:
        s = next(s for s in self._slots if s.name == slot)
        if s.item is not None:
            raise RuntimeError(f"slot {slot} is busy")
        d, files, rel = self._payload(item)
        s.item, s.since = item, time.time()
        s.ref = s.actor.check.remote(d, files, rel)

    def poll(self, timeout: float) -> list[Event]:
        ray = self._ray
        events: list[Event] = []
        if self._closed:
            return events
        starting = [s.info_ref for s in self._slots if s.info_ref is not None]
        refs = [s.ref for s in self._slots if s.item is not None] + list(self._builds) + starting
        if not refs:
            time.sleep(timeout)
            return events
        ray.wait(refs, num_returns=1, timeout=timeout)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        ready_set = set(ready)
        for s in self._slots:
            if s.info_ref is not None and s.info_ref in ready_set:
                try:
                    self._describe(s, ray.get(s.info_ref))
                    s.failures = 0
                except ray.exceptions.RayError:
                    s.failures += 1
                    if s.failures < 3:
                        self._replace(s)  # it died starting: try again
                    else:
                        s.actor = s.info_ref = None  # out of service; the other slots go on
        for s in self._slots:
            if s.item is not None and s.ref in ready_set:
                events.append(self._slot_event(s))
        for ref in [r for r in self._builds if r in ready_set]:
            item, name, since = self._builds.pop(ref)
            events.append(self._build_event(ref, item, name, since))
        now = time.time()
        for s in self._slots:
            if s.item is not None and now - s.since > s.item.timeout:
                item, since = s.item, s.since
                ray.kill(s.actor, no_restart=True)
                s.item = s.ref = None
                events.append(Event(DIED, item.job, s.name, "slot", start=since, device=s.device_key, timeout=True,
                                    reason=f"the Ray actor of slot {s.name} ran past the job's {item.timeout:.0f} s "
                                           f"limit and was killed"))
                self._replace(s)
        for ref, (item, name, since) in list(self._builds.items()):
            if now - since > item.timeout:
                ray.cancel(ref, force=True)
                self._builds.pop(ref)
                events.append(Event(DIED, item.job, name, "build", start=since, timeout=True,
                                    reason=f"the Ray build task {name} ran past {item.timeout:.0f} s and was cancelled"))
        return events

    def _replace(self, s: _Slot) -> None:
        """A fresh actor for the slot; it takes jobs once its ``info()`` answers (see poll)."""
        self._replaced += 1
        try:
            self._ray.kill(s.actor, no_restart=True)
        except Exception:
            pass
        self._new_actor(s)

    def _slot_event(self, s: _Slot) -> Event:
        ray = self._ray
        item, since, ref = s.item, s.since, s.ref
        assert item is not None
        s.item = s.ref = None
        try:
            out = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            self._replace(s)
            return Event(DIED, item.job, s.name, "slot", start=since, device=s.device_key or None,
                         reason=f"the Ray actor of slot {s.name} died while it held this job ({type(e).__name__}: "
                                f"{str(e).splitlines()[0][:300] if str(e) else ''})")
        except ray.exceptions.RayError as e:
            return Event(FAILED, item.job, s.name, "slot", start=since, device=s.device_key, reason=str(e)[-3000:])
        return Event(CHECKED, item.job, s.name, "slot", result=out.get("result"), start=out.get("start", since),
                     end=out.get("end", time.time()), pid=out.get("pid"), visible=out.get("visible"),
                     device=s.device_key)

    def _build_event(self, ref: Any, item: WorkItem, name: str, since: float) -> Event:
        ray = self._ray
        try:
            out = ray.get(ref)
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.RayActorError) as e:
            return Event(DIED, item.job, name, "build", start=since, reason=f"the Ray build task died ({e})")
        except ray.exceptions.RayError as e:
            return Event(FAILED, item.job, name, "build", start=since, reason=str(e)[-3000:])
        return Event(BUILT, item.job, name, "build", result=out.get("result"), start=out.get("start", since),
                     end=out.get("end", time.time()), pid=out.get("pid"), visible=out.get("visible"),
                     reason=out.get("note", ""))

    def replaced(self) -> int:
        return self._replaced
