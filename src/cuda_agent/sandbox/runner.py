"""The worker process that runs code we do not trust: a candidate's ``ModelNew`` or a baseline.

Started by the judge (``python -m cuda_agent.sandbox.runner JOB.json``) in its own session,
it speaks one JSON line per command on stdin/stdout; everything the loaded code prints goes
to stderr.  It never sees reference outputs and holds no comparator: it generates inputs
from the seeds it is told (the judge generates the same ones), runs ``forward``, and saves
outputs as plain tensors that the judge reads with ``torch.load(weights_only=True)``.

Commands: ``load`` (import task + solution, build the model after the reference's seed),
``copy_weights`` (strict's fallback: the reference's weights by name),
``run`` (one forward per seed, under the strict guard when asked, with uninitialised memory
NaN-poisoned; ``inputs_file`` swaps in a task variant of other sizes), ``time`` (timing
recipe, with guarded output spot checks at random points inside the loop and a
device-synchronized wall-clock cross-check), ``exit``.  Every reply also reports patched
timers/checker functions and threads left running after ``forward``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import threading
import time as _time
import traceback
from pathlib import Path

# bind the clocks before anything else is imported
from . import timing  # noqa: E402  (timing binds torch.cuda.Event & perf_counter at import)

import torch  # noqa: E402

from . import inline_hook, inputs  # noqa: E402
from .inputs import flatten  # noqa: E402
from .guards import StrictGuard  # noqa: E402
from .results import Violation  # noqa: E402

# what a candidate might patch, bound before it is imported (class 5 checker, class 11 timers)
_WATCHED = {
    "time.perf_counter": (_time, "perf_counter", 11), "time.time": (_time, "time", 11),
    "time.monotonic": (_time, "monotonic", 11),
    "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", 11),
    "torch.cuda.Event.record": (torch.cuda.Event, "record", 11),
    "torch.cuda.synchronize": (torch.cuda, "synchronize", 11),
    "torch.allclose": (torch, "allclose", 5), "torch.equal": (torch, "equal", 5),
    "torch.testing.assert_close": (torch.testing, "assert_close", 5), "torch.compile": (torch, "compile", 5),
    "torch.save": (torch, "save", 5), "torch.nn.Module.__call__": (torch.nn.Module, "__call__", 5),
}
_ORIGINAL = {k: getattr(o, a) for k, (o, a, _) in _WATCHED.items()}


def _patched() -> list[Violation]:
    out = []
    for k, (o, a, cls) in _WATCHED.items():
        if getattr(o, a, None) is not _ORIGINAL[k]:
            rule = "timer-patched" if cls == 11 else "checker-patched"
            out.append(Violation(rule, f"{k} was replaced by the solution (the evaluator's clocks and "
                                       f"checks do not use it, and patching is not allowed)", "", exploit_class=cls))
    return out


def _os_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _poison(on: bool) -> None:
    """NaN-fill (max for integers) every tensor torch allocates uninitialised, incl. at::empty
    in a binding: elements a kernel forgets to write cannot hold a plausible value."""
    try:  # the flags themselves: the public setter imports torch._inductor (seconds) for its config
        torch._C._set_deterministic_algorithms(on, warn_only=True)
        torch._C._set_deterministic_fill_uninitialized_memory(on)
    except AttributeError:
        torch.use_deterministic_algorithms(on, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = on


def _import(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical (NaN equals NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)))


def _storages(xs) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in xs if isinstance(t, torch.Tensor)}


def _short_tb(e: BaseException, files: tuple[str, ...]) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if any(f.filename.endswith(s) for s in files)]
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    return f"{type(e).__name__}: {first[:800]}{where}"


class Runner:
    def __init__(self, job: dict) -> None:
        self.job = job
        self.device = job["device"]
        self.model = None
        self.task = None
        self.files = tuple(Path(p).name for p in (job.get("solution_file"), job.get("task_file")) if p)
        self._forwards = 0
        self._hp = None  # the snapshot stream (CUDA)
        self._occ = None  # the occupier's stream and buffer (CUDA)

    def inputs(self, seed: int, source=None) -> list:
        return inputs.draw(source or self.task, seed, self.device, on_device=not self.job.get("inputs_on_cpu"))

    def _reference_forward_patched(self) -> list[Violation]:
        m = getattr(self.task, "Model", None)
        if m is not None and getattr(self, "_ref_forward", None) is not None and m.forward is not self._ref_forward:
            return [Violation("checker-patched", "the reference Model.forward was replaced by the solution",
                              "", exploit_class=5)]
        return []

    def _snapshot(self, out) -> list:
        """The outputs as they are once the current stream's work is done, copied on a stream of
        the highest priority (its blocks are scheduled before the pending blocks of any other
        stream): work still running on a stream forward never joined shows up as a difference
        from the outputs after a device-wide synchronize."""
        if self._hp is None:
            self._hp = torch.cuda.Stream(priority=-100)  # out of range: mapped to the highest priority
        self._hp.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._hp):
            return [o.clone() for o in flatten(out) if isinstance(o, torch.Tensor)]

    def _occupy(self) -> None:
        """Before a verified forward: fill every SM for a while (one elementwise kernel over a
        buffer of up to 1 GB, ~0.4 ms on an H200) on a stream of the lowest priority that no
        stream of forward waits for.  Blocks are dispatched in launch order within a priority, so
        whatever forward enqueues is still pending when it returns; the snapshot, ordered after
        the current stream alone and of the highest priority, is then dispatched before the
        pending blocks of a stream that forward left unjoined, and sees their output unwritten.
        An honest forward's work is on (or joined to) the current stream: the snapshot waits for
        it, and the only cost is the occupier's time."""
        if self._occ is None:
            total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            self._occ = (torch.cuda.Stream(priority=0), torch.zeros(int(min(1 << 30, total // 64)) // 4, device="cuda"))
        stream, buf = self._occ
        with torch.cuda.stream(stream):
            buf.add_(1.0)

    def _sync(self) -> None:
        if self.device == "cuda":
            timing._sync()

    # -- commands ---------------------------------------------------------------------
    def load(self, cmd: dict) -> dict:
        job = self.job
        stage = "load"
        try:
            self.task = _import(job["task_file"], "cuda_agent_reference_task")
            self._ref_forward = getattr(getattr(self.task, "Model", None), "forward", None)
            cls_name = job.get("class_name", "ModelNew")
            if job.get("solution_file") and job["solution_file"] != job["task_file"]:
                sol = _import(job["solution_file"], "model_new")
            else:
                sol = self.task
            cls = getattr(sol, cls_name, None)
            if cls is None:
                return {"ok": False, "stage": "load", "error": f"{Path(job['solution_file']).name} does not define {cls_name}"}
            inline_hook.count_kernel_languages()
            stage = "init"
            # as the judge builds the reference (and KernelBench both models): the seed before
            # get_init_inputs() and again before the constructor
            seed = int(job.get("init_seed", 0))
            torch.manual_seed(seed)
            init = self.task.get_init_inputs()
            torch.manual_seed(seed)
            try:
                model = cls(*init)
            except TypeError as e:
                return {"ok": False, "stage": "init", **inline_hook.report(),
                        "error": f"{cls_name}(*get_init_inputs()) failed: {e} (the constructor must take the "
                                 f"same arguments as Model)"}
            model = model.to(self.device)
            if job.get("compile"):
                model = torch.compile(model)
            self.model = model
            return {"ok": True, **inline_hook.report(),
                    "violations": [v.to_dict() for v in _patched() + self._reference_forward_patched()]}
        except BaseException as e:  # noqa: BLE001 - any failure of untrusted code is a verdict
            return {"ok": False, "stage": stage, "error": _short_tb(e, self.files), **inline_hook.report()}

    def copy_weights(self, cmd: dict) -> dict:
        """The fallback after a seeded ModelNew failed: the reference's parameters and buffers
        whose name and shape match, where they differ (the names copied)."""
        try:
            sd = torch.load(self.job["weights_file"], map_location=self.device, weights_only=True)
            mine = self.model.state_dict()
            changed = [k for k in sd if k in mine and tuple(sd[k].shape) == tuple(mine[k].shape)
                       and not torch.equal(mine[k], sd[k].to(mine[k].dtype))]
            if changed:
                self.model.load_state_dict({k: sd[k] for k in changed}, strict=False)
            return {"ok": True, "copied": changed}
        except BaseException as e:  # noqa: BLE001
            return {"ok": False, "stage": "weights", "error": _short_tb(e, self.files)}

    def run(self, cmd: dict) -> dict:
        out_dir = Path(cmd["out_dir"])
        strict = self.job.get("rules") == "strict"
        source = _import(cmd["inputs_file"], f"cuda_agent_variant_{abs(hash(cmd['inputs_file']))}") \
            if cmd.get("inputs_file") else None
        violations: list[Violation] = []

        def reply(ok: bool, **kw) -> dict:
            vs = violations + _patched() + self._reference_forward_patched()
            unique = {(v.rule, v.message): v for v in vs}  # once per rule, not per input set
            return {"ok": ok, **kw, "violations": [v.to_dict() for v in unique.values()]}

        _poison(True)
        inline_hook.reset(True)
        try:
            for seed in cmd["seeds"]:
                try:
                    xs = self.inputs(seed, source)
                    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
                    guard = StrictGuard(solution_files=self.files) if strict else None
                    py_threads = set(threading.enumerate())
                    os_threads = _os_threads()
                    if self.device == "cuda":
                        self._occupy()
                    with torch.no_grad():
                        if guard is not None:
                            with guard:
                                out = self.model(*xs)
                        else:
                            out = self.model(*xs)
                    early = self._snapshot(out) if self.device == "cuda" else []
                    self._sync()
                    outs = flatten(out)
                    if early and not all(_same_bits(a, b) for a, b in
                                         zip(early, [o for o in outs if isinstance(o, torch.Tensor)])):
                        violations.append(Violation(
                            "unjoined-stream", "the output was not complete on the current stream when forward "
                            "returned: work runs on another stream (or thread) that the current stream never waits "
                            "for, so a timer on the current stream does not see it", "", exploit_class=10))
                    if guard is not None:
                        violations += guard.violations()
                    left = [t for t in threading.enumerate() if t not in py_threads and t.is_alive()]
                    grew = self._forwards > 0 and _os_threads() > os_threads
                    if left or grew:
                        violations.append(Violation(
                            "background-thread", "forward left a thread running after it returned (work must be "
                            "finished, on the current stream, when forward returns)",
                            ", ".join(t.name for t in left[:3]), exploit_class=10))
                    self._forwards += 1
                    for a, b in zip(xs, before):
                        if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                            violations.append(Violation("input-mutated", "forward modified one of its inputs in "
                                                        "place", "", exploit_class=4))
                            break
                    if _storages(outs) & _storages(xs):
                        violations.append(Violation("output-aliases-input",
                                                    "an output shares memory with an input (return a new tensor)",
                                                    "", exploit_class=6))
                    bad = [type(o).__name__ for o in outs if type(o) is not torch.Tensor and
                           not isinstance(o, (int, float, bool))]
                    if bad:
                        return reply(False, stage="forward", exploit_class=9,
                                     error=f"forward returned {', '.join(bad)}; outputs must be plain tensors "
                                           f"(no subclasses or lazy objects)")
                    plain = [o.detach().to("cpu").clone() if isinstance(o, torch.Tensor) else torch.tensor(o)
                             for o in outs]
                    torch.save(plain, out_dir / f"out_{seed}.pt")
                except BaseException as e:  # noqa: BLE001
                    return reply(False, stage="forward", error=_short_tb(e, self.files))
        finally:
            _poison(False)
            calls = dict(inline_hook.calls)
            inline_hook.reset(False)
        return reply(True, custom_calls=calls)

    def time(self, cmd: dict) -> dict:
        try:
            recipe = timing.Recipe(**cmd.get("recipe", {}))
            if self.device == "cpu" and recipe.cpu_threads:
                torch.set_num_threads(recipe.cpu_threads)
            rng = random.Random(os.urandom(8))
            sets = [self.inputs(s) for s in cmd["seeds"]]
            pool = None
            if recipe.fresh_inputs:
                pool = timing.InputPool(sets, self.device, timing.MAX_CALLS, rng)
                sets = pool.sets
            model = self.model
            if cmd.get("compile"):
                model = torch.compile(model)

            def call(i: int):
                return model(*sets[i])

            spots: list[tuple[int, list]] = []
            guard = StrictGuard(solution_files=self.files) if self.job.get("rules") == "strict" else None

            spot_seeds = list(cmd.get("spot_seeds", []))

            def spot(i: int) -> None:
                """One call inside the timing loop on set ``i`` refilled in place with the inputs of
                a fresh seed (same tensors, same addresses, new values: a cache keyed on pointer or
                identity returns a stale answer), guarded and NaN-poisoned like verification, its
                output copied right after a sync (work deferred past the call shows up wrong)."""
                if len(spots) >= len(spot_seeds):
                    return
                seed = spot_seeds[len(spots)]
                for dst, src in zip(sets[i], self.inputs(seed)):
                    if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor):
                        dst.copy_(src)
                self._sync()
                _poison(True)
                try:
                    if guard is not None:
                        with guard:
                            out = model(*sets[i])
                    else:
                        out = model(*sets[i])
                    self._sync()
                finally:
                    _poison(False)
                spots.append((seed, [o.detach().to("cpu").clone() if isinstance(o, torch.Tensor) else o
                                     for o in flatten(out)]))

            n_spot = int(cmd.get("spot_checks", 0))
            with torch.no_grad():
                res = timing.measure(call, len(sets), self.device, recipe, spot=spot if n_spot else None,
                                     n_spot=n_spot, rng=rng, refresh=pool.refresh if pool is not None else None)
            violations = (guard.violations() if guard is not None else []) + _patched()
            for v in violations:
                if v.rule == "torch-op-in-forward":
                    v.rule, v.exploit_class = "torch-op-in-timing", 12
                    v.message = v.message.replace("inside ModelNew.forward", "inside ModelNew.forward during timing")
            files = []
            if cmd.get("out_dir"):
                for j, (seed, outs) in enumerate(spots):
                    f = Path(cmd["out_dir"]) / f"spot_{j}.pt"
                    torch.save([o if isinstance(o, torch.Tensor) else torch.tensor(o) for o in outs], f)
                    files.append({"seed": seed, "file": str(f)})
            res.pop("samples_ms", None) if cmd.get("drop_samples") else None
            return {"ok": True, **res, "spots": files, "violations": [v.to_dict() for v in violations]}
        except BaseException as e:  # noqa: BLE001
            return {"ok": False, "stage": "time", "error": _short_tb(e, self.files)}


    def once(self, cmd: dict) -> dict:
        """One forward on the inputs of ``seed`` for a wrapping tool (ncu, compute-sanitizer),
        after ``warmup`` forwards that take lazy initialisation out of the measured one; with
        ``profile_range`` only the measured forward lies between cudaProfilerStart and Stop
        (``ncu --profile-from-start off`` sees nothing else).  No guard, no NaN poisoning: the
        tool must see the candidate's own kernels only."""
        try:
            xs = self.inputs(int(cmd["seed"]))
            rng = bool(cmd.get("profile_range")) and self.device == "cuda"
            with torch.no_grad():
                for _ in range(int(cmd.get("warmup", 0))):
                    self.model(*xs)
                self._sync()
                if rng:
                    torch.cuda.profiler.start()
                self.model(*xs)
                self._sync()
                if rng:
                    torch.cuda.profiler.stop()
            return {"ok": True}
        except BaseException as e:  # noqa: BLE001
            return {"ok": False, "stage": "forward", "error": _short_tb(e, self.files)}


def _wait_for_job(job: dict, proto) -> dict:
    """A spare runner, started before its job was known (process.Spares): warm up what every
    job needs (imports, the CUDA context and cuBLAS), answer ``ping`` once warm (the judge waits
    for that before it times anything, so the warm-up never overlaps a measurement), then wait
    for ``start`` and read the job it was given."""
    import torch.utils.cpp_extension  # noqa: F401  (inline_hook patches it at start)

    if job.get("device") == "cuda":
        try:  # Triton solutions import it first thing; nothing of it runs until then
            import triton  # noqa: F401
        except Exception:  # noqa: BLE001 - not installed or broken: the solution will say so
            pass
        try:
            a = torch.ones(8, 8, device="cuda")
            (a @ a).sum().item()
            del a
        except Exception:  # noqa: BLE001 - no usable GPU: the job's own first call reports it
            pass
    for line in sys.stdin:
        cmd = json.loads(line).get("cmd")
        if cmd == "ping":
            proto.write('{"ok": true}\n')
            proto.flush()
        elif cmd == "start":
            return json.loads(Path(job["job_file"]).read_text())
        else:
            break
    os._exit(0)  # the judge closed it unused


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the loaded code prints goes to stderr
    sys.stdout = sys.stderr
    if job.get("spare"):
        job = _wait_for_job(job, proto)
    torch.backends.cuda.matmul.allow_tf32 = bool(job.get("tf32", False))
    torch.backends.cudnn.allow_tf32 = bool(job.get("tf32", False))
    if job.get("gpu_mem_fraction") and job["device"] == "cuda":  # caps torch's allocator (not raw cudaMalloc)
        torch.cuda.set_per_process_memory_fraction(float(job["gpu_mem_fraction"]))
    if job.get("extension"):
        os.environ["CUDA_AGENT_EXTENSION"] = job["extension"]
    if job.get("solution_dir"):
        sys.path.insert(0, job["solution_dir"])
    def ask(req: dict) -> dict:
        """A build request to the judge (load_inline in the solution), answered on stdin."""
        proto.write(json.dumps({"build": req}) + "\n")
        proto.flush()
        line = sys.stdin.readline()
        if not line:
            raise RuntimeError("the evaluator did not answer the extension build request")
        return json.loads(line)

    inline_hook.install(ask)
    r = Runner(job)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "exit":
            break
        reply = getattr(r, cmd["cmd"])(cmd)
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
    proto.close()
    os._exit(0)


if __name__ == "__main__":
    main()
