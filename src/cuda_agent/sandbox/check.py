"""``check(task, solution, options) -> CheckResult``: the one door to the evaluator.

build (cached) -> verify (candidate in its own process, reference and comparison here)
-> extra round (other sizes where the task allows, fresh seeds) -> time (same recipe for
candidate and baselines; spot checks of outputs inside the loop, wall-clock and roofline
cross-checks) -> reward.  Files we provide are hashed before and after the candidate runs.
The CLI's ``check``/``compile``/``verify``/``profile``, the agent, eval and training all
come through here.  Bad input of any kind ends in a CheckResult with ``error`` set; every
rejection names its exploit class (``CheckResult.exploit_classes``, sandbox/exploits.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import reward as rewards
from ..rules_profile import RulesProfile
from ..tasks import Task, TaskError, validate_source
from . import baselines, inline_build, inputs, ncu, roofline, sanitizer
from .build import build, kernel_sources
from .compare import PRECISION_FACTOR, compare
from .devicelock import EXCLUSIVE, SHARED, DeviceLock
from .exploits import Exploit, label
from .process import RunnerDied, RunnerProcess, job_root, spares
from .reference import KERNELBENCH_SEED, Reference, kernelbench_trial_seeds, module_from_source
from .results import BuildResult, CheckResult, DeviceHold, Timing, Verdict, Violation
from .timing import Recipe
from .variants import size_variants


@dataclass
class CheckOptions:
    """How to check a solution."""

    device: str = "cuda"
    """``cuda`` or ``cpu``."""
    rules: str = RulesProfile.STRICT
    """A :class:`~cuda_agent.rules_profile.RulesProfile`: ``strict`` (no torch compute in
    forward) or ``kernelbench`` (torch ops allowed); a plain name is the same."""
    reward: str = "paper"
    """Reward scheme name (see cuda_agent.reward)."""
    n_sets: int = 5
    """Random input sets for verification (fresh seeds each check)."""
    verify: bool = True
    timing: bool = True
    baselines: bool = True
    """Time eager and torch.compile (cached per task, device and torch version)."""
    compile_baseline: bool = True
    atol: float | None = None
    rtol: float | None = None
    seed: int | None = None
    """Fix the verification seeds (tests, reproduction); None draws fresh ones."""
    precision_factor: float | None = PRECISION_FACTOR
    """FP32 outputs: the candidate's error vs float64 may be at most this multiple of the FP32
    reference's own (None turns the precision-honesty check off)."""
    extra_round: bool = True
    """After the main round, verify on other input sizes (where the task allows) and fresh seeds."""
    spot_checks: int = 3
    """Calls inside the timing loop whose outputs are checked (guarded like verification)."""
    confirm_timing: int = 2
    """A suspicion from timing (a wrong spot output, hidden work, faster than the roofline) is
    measured again up to this many times and rejects only if it holds every time."""
    build_timeout: float = 300.0
    verify_timeout: float = 300.0
    """Cap on one verification command (loading, a round of forwards) of the candidate."""
    time_timeout: float = 300.0
    """Cap on the candidate's timing (and on each baseline measurement)."""
    hang_floor: float = 10.0
    """A hang costs the task's time, not the caps: a command that makes no progress (no process
    started or ended, no file written) for this many seconds beyond what the reference's own
    time predicts (``hang_factor``) is killed as a hang.  Scaled up by the machine's load."""
    hang_factor: float = 50.0
    """How many times the reference's time per call a candidate's call may take before it
    counts toward a hang (a slow but honest kernel is timed, not killed)."""
    recipe: Recipe = field(default_factory=Recipe)
    limits: Any = None
    """Resource caps for the candidate's process (sandbox.isolation.Limits); None: defaults."""
    sanitize: tuple[str, ...] = ()
    """compute-sanitizer tools (memcheck, racecheck, initcheck, synccheck) run on one forward on
    the first input set once the solution loads (GPU only).  A memcheck error fails the check:
    an out-of-bounds access that happened to give the right numbers is not rewarded."""
    ncu: bool = False
    """Read Nsight Compute's counters of each kernel of one forward of a correct solution (GPU only)."""
    progress: Callable[[str, float], None] | None = field(default=None, compare=False, repr=False)
    """Called with each stage's name and seconds as it ends (the CLI's stage lines); this
    process only: a pool job does not carry it."""


def resolve_solution(solution: str | Path) -> tuple[Path, Path, Path | None]:
    """(solution_dir, model_new.py, kernels dir or None)."""
    p = Path(solution)
    if p.is_dir():
        f = p / "model_new.py"
        if not f.is_file():
            raise TaskError(f"solution directory {p} has no model_new.py")
        k = p / "kernels"
        return p, f, (k if kernel_sources(k) else None)
    if p.is_file() and p.suffix == ".py":
        return p.parent, p, None
    raise TaskError(f"solution not found: {p} (a workspace directory or a model_new.py)")


def _static_violations(sol_dir: Path, sol_file: Path, task: Task, rules: str) -> list[Violation]:
    try:
        from .rules import check_sources
    except ImportError:
        return []
    target = sol_dir if sol_file.name == "model_new.py" and sol_file.parent == sol_dir else sol_file
    try:
        return list(check_sources(target, task_source=task.source, profile=rules))
    except Exception as e:  # a bug in a rule must not lose the result
        return [Violation("static-check-error", f"static checks failed: {e}", "")]


def _protected(sol_dir: Path, task: Task) -> list[Violation]:
    from .workspace import changed_provided_files

    out = []
    ref = sol_dir / "model.py"
    changed = changed_provided_files(sol_dir)
    if (ref.is_file() and ref.read_text() != task.source) or "model.py" in changed:
        out.append(Violation("protected-file-changed", "model.py (the reference) was modified or deleted; the "
                             "evaluator always uses the task's original", "model.py",
                             exploit_class=Exploit.PROTECTED_FILES))
    others = [f for f in changed if f != "model.py"]
    if others:
        out.append(Violation("protected-file-changed", "files the workspace was given were changed or deleted: "
                             + ", ".join(others), others[0], exploit_class=Exploit.PROTECTED_FILES))
    return out


def _digest_files(paths) -> dict[str, str]:
    out = {}
    for p in paths:
        try:
            out[str(p)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
        except OSError:
            out[str(p)] = "missing"
    return out


def _package_files() -> list[Path]:
    """What the candidate's process runs or builds against: the runner and its imports, the
    extension loader and the binding infrastructure (patched, they would fool later checks)."""
    here = Path(__file__).resolve().parent
    names = ("__init__.py", "runner.py", "timing.py", "guards.py", "results.py", "inputs.py", "inline_hook.py")
    return sorted([here / n for n in names] + [here.parent / "__init__.py", here.parent / "ext.py"]
                  + [p for p in (here / "infra").iterdir() if p.is_file()])


def _changed_files(before: dict[str, str]) -> list[Violation]:
    after = _digest_files(before)
    changed = [Path(k).name for k in before if after.get(k) != before[k]]
    if not changed:
        return []
    return [Violation("evaluator-files-changed", "files of the evaluator or the job were changed while the "
                      "candidate ran: " + ", ".join(changed[:6]), changed[0], exploit_class=Exploit.PROTECTED_FILES)]


def _explain(vs: list[Violation]) -> str:
    return "rules violated: " + "; ".join(
        v.message + (f" [{v.where}]" if v.where else "") + (f" <{label(v.exploit_class)}>" if v.exploit_class else "")
        for v in vs[:5])


FAULT_STAGES = {"timeout", "crash", "memory", "processes"}


def check(task: Task, solution: str | Path, options: CheckOptions | None = None) -> CheckResult:
    """Build, verify, time and reward one solution.  Never raises for bad input."""
    o = options or CheckOptions()
    t0 = time.perf_counter()
    res = CheckResult(task_id=task.id, task_sha=task.sha, device=o.device, rules=o.rules,
                      reward_scheme=o.reward)
    if o.reward not in rewards.names():
        res.error = f"unknown reward scheme {o.reward!r}; known: {', '.join(rewards.names())}"
        return res
    try:
        _check(task, solution, o, res)
    except TaskError as e:
        res.error = str(e)
    except Exception as e:  # last line of defence: a verdict, never a traceback
        res.error = f"internal error: {type(e).__name__}: {e}"
        res.verdict = Verdict(correct=False, error=traceback.format_exc(limit=3), stage="internal")
    res.correct = bool(res.correct and not res.violations)
    classes = {v.exploit_class for v in res.violations if v.exploit_class}
    if res.verdict is not None and not res.verdict.correct:
        if res.verdict.stage in FAULT_STAGES and res.verdict.exploit_class is None:
            res.verdict.exploit_class = Exploit.CRASH_OR_HANG
        if res.verdict.exploit_class:
            classes.add(res.verdict.exploit_class)
    res.exploit_classes = sorted(classes)
    if o.verify or not res.compiled:  # a build that worked but was not verified (`compile`) has no reward yet
        res.reward = rewards.compute(o.reward, rewards.Outcome(
            compiled=res.compiled, correct=res.correct, t_gen=res.t_gen_ms, t_eager=res.t_eager_ms,
            t_compile=res.t_compile_ms))
    res.seconds = round(time.perf_counter() - t0, 3)
    return res


def machine_load() -> float:
    """How much busier than one runnable process per core the machine is now (1 = not busier,
    at most 4): the hang floor stretches with it, so a busy machine does not turn an honest
    first call (a JIT compile) into a hang."""
    try:
        return max(1.0, min(4.0, os.getloadavg()[0] / (os.cpu_count() or 1)))
    except OSError:
        return 1.0


def hang_budget(o: CheckOptions, ref_s: float, calls: float, extra_s: float = 0.0) -> tuple[float, str]:
    """(seconds without progress that make a hang, the reason in words) for a command of
    ``calls`` candidate calls whose reference takes ``ref_s`` per call."""
    load = machine_load()
    s = (o.hang_floor + extra_s + o.hang_factor * ref_s * calls) * load
    why = (f"the reference takes {ref_s * 1e3:.3g} ms a call, {calls:g} call{'s' if calls != 1 else ''} "
           f"x {o.hang_factor:g} + {o.hang_floor + extra_s:g} s" + (f", x {load:.2g} for the machine's load"
                                                                    if load > 1 else ""))
    return s, why


def prebuild(task: Task, solution: str | Path, o: CheckOptions) -> list[dict]:
    """Build a single file's ``load_inline``/``load`` extensions before its check, where the
    CPU cores are (a pool builder, while the GPUs time other jobs): the file is imported in a
    contained runner that sees no GPU, and its build requests fill the content-keyed cache that
    the check then hits.  Whatever else the import does is thrown away; a workspace (built by
    ``build``) has nothing to do here.  The builds made (``extensions`` entries); never raises."""
    try:
        sol_dir, sol_file, kdir = resolve_solution(solution)
    except TaskError:
        return []
    if kdir is not None or "load" not in sol_file.read_text(errors="replace"):
        return []
    job_dir = job_root()
    runner = None
    try:
        (job_dir / "reference.py").write_text(task.source)
        (job_dir / "job.json").write_text(json.dumps({
            "device": o.device, "task_file": str(job_dir / "reference.py"), "solution_file": str(sol_file.resolve()),
            "solution_dir": str(sol_dir.resolve()), "rules": o.rules, "init_seed": 0, "class_name": "ModelNew"}))
        runner = RunnerProcess(job_dir / "job.json", env={"CUDA_AGENT_DEVICE": o.device, "CUDA_VISIBLE_DEVICES": "",
                                                          "PYTHONDONTWRITEBYTECODE": "1"},
                               **({"limits": o.limits} if o.limits is not None else {}))
        runner.on_build = inline_build.server(o.device, job_dir, o.build_timeout)
        return list(runner.request({"cmd": "load"}, o.verify_timeout).get("extensions", []))
    except Exception:  # noqa: BLE001 - the check builds what is missing and gives the verdict
        return []
    finally:
        if runner is not None:
            runner.close()
        shutil.rmtree(job_dir, ignore_errors=True)


class Stop(Exception):
    """A stage ended the check.  :meth:`_Check.run` is the one place that writes it into the
    result (before the job is closed, so the closing steps see the verdict)."""

    def record(self, res: CheckResult) -> None:
        raise NotImplementedError


class Failed(Stop):
    """The check ends with ``error`` and no verdict of its own (the build failed, the timing
    could not run): what was judged so far stands."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error

    def record(self, res: CheckResult) -> None:
        res.error = self.error


class Rejected(Stop):
    """The candidate failed (it did not load, crashed, hung, or computed wrong outputs):
    ``verdict`` says where and why.  A stage that retries or adds context catches it, edits
    the verdict and raises it again."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.error)
        self.verdict = verdict

    @classmethod
    def at(cls, stage: str, error: str, violations=(), exploit_class: int | None = None,
           round: str = "main") -> "Rejected":
        return cls(Verdict(correct=False, error=error, stage=stage, violations=list(violations),
                           exploit_class=exploit_class, round=round))

    def record(self, res: CheckResult) -> None:
        res.verdict = self.verdict
        res.error = self.verdict.error
        res.correct = False


class RulesBroken(Stop):
    """The outputs may be right but rules were broken (``res.violations``): the check ends
    with them explained."""

    def record(self, res: CheckResult) -> None:
        res.error = _explain(res.violations)


@dataclass
class _Errors:
    """The worst numerical errors over the input sets compared so far (the verdict's numbers)."""

    abs: float = 0.0
    rel: float = 0.0
    ratio: float | None = None
    n: int = 0
    """Input sets that passed."""
    tol: tuple[float | None, float | None] = (None, None)
    rel_l2: float | None = None
    ref_rel_l2: float | None = None
    ref_max_abs: float | None = None

    def restart(self) -> None:
        """A new main round (the weights copied by name): its verdict counts from zero; the
        numerical error report keeps the worst of both rounds."""
        self.abs, self.rel, self.ratio, self.n = 0.0, 0.0, None, 0


def _check(task: Task, solution: str | Path, o: CheckOptions, res: CheckResult) -> None:
    _Check(task, solution, o, res).run()


class _Check:
    """One check as named stages, in order: validate and static rules, build, then in a job
    directory: write the job and the reference, start the runner, reference outputs, load,
    main round, extra round, accept, time; then close the job (GPU tools) and time the
    baselines.  A stage that ends the check raises a :class:`Stop`; :meth:`run` turns it
    into the result in one place.  Bad input raises TaskError (``check`` reports it)."""

    def __init__(self, task: Task, solution: str | Path, o: CheckOptions, res: CheckResult) -> None:
        self.task, self.solution, self.o, self.res = task, solution, o, res
        # kernelbench: its protocol (seed 42 before each constructor, no weight copy, its trial
        # seeds, inputs drawn on the CPU); strict: a fresh seed, ModelNew constructed after it like
        # the reference, the reference's weights copied by name only if the seeded one fails
        self.kb = o.rules == "kernelbench"
        self.protocol = "kernelbench" if self.kb else "evaluator"
        self.clock = time.perf_counter()
        self.job_dir: Path | None = None
        self.spare = None  # a runner started before this check (process.spares), if one was ready
        self.runner: RunnerProcess | None = None
        self.tool_seed: int | None = None  # the first input set, for ncu / compute-sanitizer
        self.errors = _Errors()
        self.last_round = "main"
        self.device: DeviceLock | None = None
        self.under: dict | None = None  # how busy the machine was around the candidate's timing
        self.timed_at: float | None = None  # when that timing ended

    def run(self) -> None:
        o = self.o
        self.validate()
        if not self._stages(self.compile) or not o.verify:
            return
        # 2. verify, on a device other judges may share (devicelock.py): held shared from before
        # the runner starts (a spare warming up must not run beside another judge's clocks) to the
        # end, exclusive only while something is measured (the candidate's timing, baselines that
        # are not cached, ncu): closing runners and warming the next one go beside other judges'
        # verification, never beside their clocks
        with DeviceLock(o.device) as self.device:
            try:
                self.hold(SHARED)
                self.open_job()
                try:
                    finished = self._stages(self.write_job, self.start_runner, self.reference_outputs, self.load,
                                            self.main_round, self.extra_round, self.accept,
                                            *([self.time_candidate] if o.timing else []))
                finally:
                    self.hold(SHARED)
                    self.close_job()
                if finished and o.timing and o.baselines:
                    self.time_baselines()
                self.hold(SHARED)
                spares.settle()  # the last runner gone and the next one warm before another judge times
                self.lap("close")
            finally:
                self.device.release()
                self.res.holds = [DeviceHold(m, self.device.key, a, b if b is not None else a)
                                  for m, a, b in self.device.holds]

    def hold(self, mode: str) -> None:
        """Hold the device in ``mode``.  The wait (another judge's timing, or its verification
        before ours) is booked to ``gpu_wait`` and to no stage: it is neither the candidate's
        time nor any budget of its.  The candidate's runner is frozen meanwhile (between two
        commands it has nothing to do): the device is not ours while we wait."""
        assert self.device is not None
        if mode == self.device.mode:
            return
        with self.frozen():
            self._wait_for(mode)

    def _wait_for(self, mode: str) -> None:
        waited = self.device.hold(mode)
        self.res.phases["gpu_wait"] = round(self.res.phases.get("gpu_wait", 0.0) + waited, 3)
        self.clock += waited

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The candidate's runner stopped (SIGSTOP) for the block, if it is running: it must not
        work beside another judge's clocks while this judge does not hold the device."""
        runner = self.runner  # None once close_job has it
        if runner is not None:
            runner.pause()
        try:
            yield
        finally:
            if runner is not None:
                runner.resume()

    def exclusive(self) -> None:
        """Hold the device alone, for a measurement.  This judge's runners in transition (the last
        one exiting, the next spare importing torch) finish first, under the shared hold: waiting
        for the exclusive lock lets the device go, and they must not run beside the clocks of the
        judge that gets it meanwhile (nor, once it is ours, beside our own)."""
        spares.settle()
        self.hold(EXCLUSIVE)
        spares.settle()  # another check in a thread of this process may have started a spare meanwhile

    @contextlib.contextmanager
    def off_device(self) -> Iterator[None]:
        """The device lock let go for a while (a single file's cold extension build: CPU work of
        the judge's side, a minute or more for CUDA), then held again in the same mode, the wait
        booked like any other.  The candidate's runner waits for the build's answer meanwhile."""
        mode = self.device.mode if self.device is not None else None
        if mode is None:
            yield
            return
        with self.frozen():  # it waits for the build's answer anyway
            self.device.release()
            try:
                yield
            finally:
                self._wait_for(mode)

    def _stages(self, *stages: Callable[[], None]) -> bool:
        """Run ``stages`` in order; False when one ended the check (what it raised is written
        into the result here: the one place)."""
        try:
            for stage in stages:
                stage()
        except Stop as stop:
            phase = self.PHASE_OF.get(getattr(stage, "__func__", None))
            if phase is not None:
                self.lap(phase)
            stop.record(self.res)
            return False
        return True

    def lap(self, name: str) -> None:
        """Book the time since the last lap to phase ``name`` (and tell ``progress``)."""
        res = self.res
        now = time.perf_counter()
        res.phases[name] = round(res.phases.get(name, 0.0) + now - self.clock, 3)
        self.clock = now
        if self.o.progress is not None:
            self.o.progress(name, res.phases[name])

    # -- before the candidate runs -------------------------------------------------------
    def validate(self) -> None:
        """Options, task and solution readable; the static rules (their time is no phase's)."""
        import torch

        o, res, task = self.o, self.res, self.task
        rewards.get(o.reward)  # unknown scheme -> KeyError early (CLI turns it into a usage error)
        if o.device == "cuda" and not torch.cuda.is_available():
            raise TaskError("--device cuda but no CUDA GPU is visible (use --device cpu for the CPU backend)")
        validate_source(task.source, what=f"task {task.id}")
        self.sol_dir, self.sol_file, self.kdir = resolve_solution(self.solution)
        if o.device != "cuda" and (o.sanitize or o.ncu):
            res.warnings.append("ncu and compute-sanitizer are GPU-only: skipped on the CPU backend")
        validate_source(self.sol_file.read_text(), required=("ModelNew",), what=self.sol_file.name)
        res.violations += (_protected(self.sol_dir, task)
                           + _static_violations(self.sol_dir, self.sol_file, task, o.rules))
        self.clock = time.perf_counter()

    def compile(self) -> None:
        """1. build the workspace's kernels (cached); a single file builds while it loads."""
        o, res = self.o, self.res
        if self.kdir is not None:
            b = build(self.kdir, o.device, timeout=o.build_timeout)
        else:
            b = BuildResult(ok=True)
        res.build = b
        res.compiled = b.ok
        self.lap("build")
        if not b.ok:
            raise Failed("build failed:\n" + b.log)

    def open_job(self) -> None:
        """The job directory: a spare runner's, with the solution placed in its sight, or a new one."""
        o = self.o
        self.env = {"CUDA_AGENT_DEVICE": o.device, "PYTHONDONTWRITEBYTECODE": "1"}
        spare = spares.take(o.device, self.env, o.limits)
        run_dir = spare.place(self.sol_dir) if spare is not None else None
        if spare is not None and run_dir is None:  # out of its sight and too large to copy
            spare.discard()
            spare = None
        self.spare, self.run_dir = spare, run_dir
        self.job_dir = spare.job_dir if spare is not None else job_root()
        self.run_file = (run_dir / self.sol_file.relative_to(self.sol_dir)) if run_dir is not None else self.sol_file

    def write_job(self) -> None:
        """The job's files: the reference's source, the extension, job.json, the reference's
        seeded weights; hashed, to be compared once the candidate has run."""
        import torch

        o, res, job_dir = self.o, self.res, self.job_dir
        task_file = job_dir / "reference.py"
        task_file.write_text(self.task.source)
        ext = None
        if res.build.so_path:  # the runner loads its own copy: the build cache can stay hidden from it
            ext = job_dir / "extension.so"
            shutil.copy2(res.build.so_path, ext)
        init_seed = KERNELBENCH_SEED if self.kb else (secrets.randbits(31) if o.seed is None else o.seed)
        job = {"device": o.device, "task_file": str(task_file), "solution_file": str(self.run_file.resolve()),
               "solution_dir": str((self.run_dir or self.sol_dir).resolve()), "extension": str(ext) if ext else None,
               "rules": o.rules,
               "init_seed": init_seed, "weights_file": str(job_dir / "weights.pt"), "class_name": "ModelNew",
               "inputs_on_cpu": self.kb,
               "gpu_mem_fraction": getattr(o.limits, "gpu_memory_fraction", None)}
        (job_dir / "job.json").write_text(json.dumps(job))

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.ref = Reference(self.task, o.device, init_seed, inputs_on_cpu=self.kb)
        torch.save(self.ref.model.state_dict(), job_dir / "weights.pt")
        self.watched = _digest_files(_package_files() + [task_file, job_dir / "weights.pt", job_dir / "job.json"]
                                     + ([ext] if ext else []))

    def start_runner(self) -> None:
        """The candidate's process (isolated); it starts up while the reference computes."""
        o, res, job_dir = self.o, self.res, self.job_dir
        if self.spare is not None:  # started before this check: torch and the evaluator already loaded
            runner = self.spare.start()
        else:
            runner = RunnerProcess(job_dir / "job.json", env=self.env,
                                   **({"limits": o.limits} if o.limits is not None else {}))
        self.runner = runner
        runner.on_build = inline_build.server(o.device, job_dir, o.build_timeout, aside=self.off_device)
        res.isolation = getattr(runner, "isolation", "")
        res.warnings += list(getattr(runner, "warnings", []))

    def reference_outputs(self) -> None:
        """The main round's input seeds and the reference's outputs (and float64 outputs) on them."""
        o = self.o
        self.rng = secrets.SystemRandom() if o.seed is None else __import__("random").Random(o.seed)
        seeds = kernelbench_trial_seeds(o.n_sets) if self.kb else [self.rng.randrange(1, 2**31)
                                                                   for _ in range(o.n_sets)]
        self.seeds = seeds
        self.tool_seed = seeds[0] if o.device == "cuda" else None
        self.expected = {}
        self.set_bytes = 0
        for s in seeds:
            outs, r64, self.set_bytes = self.ref.outputs(s)
            self.expected[s] = (outs, r64)
        self.lap("reference")

    # -- the candidate runs --------------------------------------------------------------
    def load(self) -> None:
        """Import the solution (a single file builds its extensions here) and construct ModelNew."""
        o, res = self.o, self.res
        try:  # importing torch and the solution: no reference time to go by, so three floors
            rep = self.runner.request({"cmd": "load"}, o.verify_timeout, *hang_budget(o, 0.0, 0, 2 * o.hang_floor))
        except RunnerDied as e:
            raise Rejected.at(e.stage, str(e)) from None
        res.violations += [Violation.from_dict(v) for v in rep.get("violations", [])]
        res.extensions = rep.get("extensions", [])
        self.lap("start")
        built = round(sum(x.get("seconds") or 0.0 for x in res.extensions), 3)
        if built:  # a single file's extensions are built while it loads: build time, not start time
            res.phases["start"] = round(max(0.0, res.phases["start"] - built), 3)
            res.phases["build"] = round(res.phases.get("build", 0.0) + built, 3)
        failed = [x for x in res.extensions if not x.get("ok")]
        if not rep["ok"]:
            if failed:  # the extension did not build: a compile failure, as KernelBench counts it
                res.compiled = False
            raise Rejected.at(rep.get("stage", "load"), rep["error"])
        if failed:
            res.warnings.append("extension " + ", ".join(repr(x["name"]) for x in failed) + " failed to build or "
                                "load and the solution carried on without it (a caught error: whatever runs now is "
                                "its fallback)")
        res.weights = "seeded"
        self.ref.time_call(self.seeds[0])

    def run_round(self, seeds: list[int], inputs_file: Path | None = None, module: str | None = None) -> None:
        """The candidate's forwards on ``seeds`` (outputs left in the job directory)."""
        o, res, ref = self.o, self.res, self.ref
        rnd = "shape" if inputs_file else "main"
        cmd = {"cmd": "run", "seeds": seeds, "out_dir": str(self.job_dir)}
        if inputs_file is not None:
            cmd["inputs_file"] = str(inputs_file)
        ref_s = ref.call_s.get(module or ref.mod.__name__, max(ref.call_s.values(), default=1.0))
        stall, why = hang_budget(o, ref_s, len(seeds))
        try:
            rep = self.runner.request(cmd, o.verify_timeout, stall, why)
        except RunnerDied as e:
            raise Rejected.at(e.stage, str(e), round=rnd) from None
        vs = [Violation.from_dict(v) for v in rep.get("violations", [])]
        known = {(w.rule, w.message) for w in res.violations}
        res.violations += [v for v in vs if (v.rule, v.message) not in known]
        if not rep["ok"]:
            raise Rejected.at(rep.get("stage", "forward"), rep["error"], vs, rep.get("exploit_class"), rnd)
        if not inputs_file:
            res.custom_calls = sum(rep.get("custom_calls", {}).values())

    def judge(self, seed: int, exp, what: str, rnd: str) -> None:
        """Compare the candidate's outputs for ``seed`` with the reference's ``exp``."""
        import torch

        o, res, e = self.o, self.res, self.errors
        f = self.job_dir / f"out_{seed}.pt"
        outs = torch.load(f, weights_only=True, map_location=o.device)
        f.unlink()
        cmp = compare(outs, exp[0], o.atol, o.rtol, refs64=exp[1], precision_factor=o.precision_factor,
                      protocol=self.protocol)
        e.abs, e.rel = max(e.abs, cmp.max_abs_err), max(e.rel, cmp.max_rel_err)
        if cmp.precision_ratio is not None:
            e.ratio = max(e.ratio or 0.0, cmp.precision_ratio)
        res.max_abs_err, res.max_rel_err = e.abs, e.rel
        for k in ("rel_l2", "ref_rel_l2", "ref_max_abs"):  # the numerical error report
            if getattr(cmp, k) is not None:
                setattr(e, k, max(getattr(e, k) or 0.0, getattr(cmp, k)))
        res.rel_l2_err, res.ref_rel_l2_err = e.rel_l2, e.ref_rel_l2
        res.ref_max_abs_err = e.ref_max_abs
        if not cmp.ok:
            cls = cmp.exploit_class if cmp.exploit_class is not None else (7 if rnd == "shape" else None)
            raise Rejected(Verdict(False, f"{what}: {cmp.error}", "compare", e.abs, e.rel, cmp.atol, cmp.rtol, e.n,
                                   list(res.violations), cls, rnd, e.ratio))
        e.n += 1
        e.tol = (cmp.atol, cmp.rtol)

    def _main_sets(self) -> None:
        """One main round: every input set run, then compared."""
        res, seeds = self.res, self.seeds
        self.run_round(seeds)
        digests = {_first_output_digest(self.job_dir / f"out_{s}.pt") for s in seeds}
        if len(seeds) > 1 and len(digests) == 1 and _refs_differ([self.expected[s][0] for s in seeds]):
            v = Violation("output-ignores-input", "the output is bit-identical for every input set while the "
                          "reference's changes: the result does not depend on the inputs (cached or hard-coded)",
                          "", exploit_class=7)
            res.violations.append(v)
            raise Rejected.at("compare", v.message, [v], 7)
        for k, s in enumerate(seeds):
            self.judge(s, self.expected[s], f"input set {k + 1}/{len(seeds)}", "main")

    def main_round(self) -> None:
        """The main round; then the precision route and (strict) the no-custom-code rule."""
        import torch

        res, ref = self.res, self.ref
        try:
            self._main_sets()
        except Rejected as first:
            self._copied_weights_round(first)
        res.precision_route = ref.route
        if ref.route.startswith("unavailable") and any(
                isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in self.expected[self.seeds[0]][0]):
            res.warnings.append(f"the precision-honesty check did not run: the float64 reference is {ref.route}")
        if not self.kb and not res.custom_calls and not _uncounted_kernels(self.sol_file):
            v = Violation("no-custom-code", "forward ran none of the solution's own code (no extension function, "
                          "workspace op, Triton or CuPy kernel was called): the output came from torch alone "
                          "(rules: strict)", "", exploit_class=1)
            res.violations.append(v)  # the numbers may be right: the verdict stays, the rule fails it
        self.lap("verify")

    def _copied_weights_round(self, first: Rejected) -> None:
        """strict: a ModelNew whose parameters do not come out of the seed as the reference's
        (declared uninitialised, created in another order) gets the reference's weights by
        name and one more round; one that renames or pre-folds them passed seeded already.
        Raises ``first`` again where that does not apply."""
        res = self.res
        v = first.verdict
        wrong = v.stage == "compare" and v.exploit_class in (None, 6)
        if self.kb or not wrong:
            raise first
        try:
            rep = self.runner.request({"cmd": "copy_weights"}, self.o.verify_timeout)
        except RunnerDied as e:
            raise Rejected.at(e.stage, str(e)) from None
        if not rep.get("ok") or not rep.get("copied"):
            raise first
        self.errors.restart()
        res.weights = f"seeded, then copied by name ({len(rep['copied'])})"
        for f in self.job_dir.glob("out_*.pt"):
            f.unlink()
        try:
            self._main_sets()
        except Rejected as again:
            again.verdict.error = (f"{again.verdict.error} (with the reference's weights copied by name; "
                                   f"seeded it failed too: {v.error})")
            raise

    def extra_round(self) -> None:
        """2b. other sizes where the task allows them, always fresh seeds (not for KernelBench:
        its sizes are the problem's, nor after a broken rule)."""
        o, res, ref, task, job_dir = self.o, self.res, self.ref, self.task, self.job_dir
        if not (o.extra_round and not self.kb and not res.violations):
            return
        extra = [self.rng.randrange(1, 2**31) for _ in range(2)]
        variant_file, desc, exp2, vname = None, "the same sizes", None, None
        for d, src in size_variants(task.source):
            try:
                vmod = module_from_source(src, f"cuda_agent_variant_{task.sha}")
                exp2 = {s: ref.outputs(s, vmod)[:2] for s in extra}
            except Exception:
                exp2 = None
                continue
            variant_file, desc, vname = job_dir / "variant.py", d, vmod.__name__
            variant_file.write_text(src)
            break
        if exp2 is None:
            exp2 = {s: ref.outputs(s)[:2] for s in extra}
        try:
            self.run_round(extra, variant_file, vname)
        except Rejected as e:
            if e.verdict.stage == "forward":
                e.verdict.exploit_class = e.verdict.exploit_class or 7
                e.verdict.error = f"with other input sizes ({desc}): {e.verdict.error}"
            raise
        rnd = "shape" if variant_file else "main"
        for k, s in enumerate(extra):
            self.judge(s, exp2[s], f"extra round with other inputs ({desc}), set {k + 1}/{len(extra)}", rnd)
        self.last_round = rnd
        self.lap("extra")

    def accept(self) -> None:
        """The outputs are right: the verdict; then files changed while it ran, broken rules."""
        res, e = self.res, self.errors
        res.verdict = Verdict(True, None, "compare", e.abs, e.rel, *e.tol, e.n, list(res.violations), None,
                              self.last_round, e.ratio)
        res.correct = True
        res.violations += _changed_files(self.watched)
        self.expected = {}  # free the reference's outputs before timing
        if res.violations:
            raise RulesBroken()

    def time_candidate(self) -> None:
        """3. time: the recipe, with spot checks of outputs inside the loop; a suspicion
        rejects only when it holds in every one of 1 + ``confirm_timing`` measurements: a busy
        machine (another job's kernels, CPU stress) can stretch one wall clock sample, but not
        every one, and never makes a wrong output right."""
        import torch

        o, res, ref = self.o, self.res, self.ref
        self.exclusive()  # no other judge on the device while it is timed
        self.n_rot = rotation_sets(self.set_bytes, o.device)
        tseeds = [secrets.randbits(31) for _ in range(self.n_rot)]
        self.under = self._conditions()  # how busy the machine is around the candidate's timing
        self.gpu_name = torch.cuda.get_device_name(torch.cuda.current_device()) if o.device == "cuda" else ""
        self.bound = roofline.input_bound_ms(self.set_bytes, self.gpu_name) if o.device == "cuda" else None
        rules_seen: dict = {}
        for attempt in range(1 + o.confirm_timing):
            spot_seeds = [secrets.randbits(31) for _ in range(4 * o.spot_checks + 2)] if o.spot_checks else []
            rep = self._measure(tseeds, spot_seeds)
            for v in rep.get("violations", []):
                rules_seen.setdefault((v["rule"], v["message"]), Violation.from_dict(v))
            sus = self._suspicions(rep, spot_seeds)
            if not sus:
                break
            res.warnings.append(f"timing attempt {attempt + 1}: suspected {', '.join(v.rule for v in sus)}; "
                                f"measured again" if attempt < o.confirm_timing else
                                f"timing: {', '.join(v.rule for v in sus)} held in all {attempt + 1} measurements")
        self.under = baselines.worse(self.under, self._conditions())
        self.timed_at = time.time()  # baselines measured after this are as good as ours (baselines.py)
        res.violations += list(rules_seen.values()) + sus
        res.timing = Timing(rep["median_ms"], rep["spread"], rep["n"], rep["method"], rep["calls_per_sample"],
                            rep["min_ms"], wall_ms=rep.get("wall_ms"))
        res.timing.roofline_ms = self.bound
        res.t_gen_ms = rep["median_ms"]
        res.roofline = roofline.forward_roofline(ref.model, inputs.draw(ref.mod, tseeds[0], o.device),
                                                 rep["median_ms"], o.device)
        res.violations += _changed_files(self.watched)
        self.lap("timing")
        if res.violations:
            res.correct = False
            raise RulesBroken()

    def _conditions(self) -> dict:
        """How busy the machine is, with the candidate's job frozen: the probe is of the load
        beside the candidate (the baselines are measured once its job is gone), and the candidate
        must not be able to make the machine look busier or quieter than it is."""
        with self.frozen():
            return baselines.conditions(self.o.device)

    def _measure(self, tseeds: list[int], spot_seeds: list[int]) -> dict:
        """One timing of the candidate (its report)."""
        o, ref = self.o, self.ref
        try:
            rep = self.runner.request({"cmd": "time", "seeds": tseeds, "recipe": o.recipe.__dict__,
                                       "spot_checks": o.spot_checks, "spot_seeds": spot_seeds,
                                       "out_dir": str(self.job_dir)},
                                      o.time_timeout, *_timing_hang_budget(o, ref.call_s.get(ref.mod.__name__, 1.0)))
        except RunnerDied as e:
            raise Rejected.at(e.stage, f"timing failed: {e}", round="timing") from None
        if not rep["ok"]:
            raise Failed(f"timing failed: {rep['error']}")
        return rep

    def _suspicions(self, rep: dict, spot_seeds: list[int]) -> list[Violation]:
        """What this timing suggests: a wrong output inside the loop, work outside the
        current stream, a time under the roofline."""
        import torch

        o, ref, bound, name = self.o, self.ref, self.bound, self.gpu_name
        out = []
        for spot in rep.get("spots", []):
            if spot["seed"] not in spot_seeds:
                continue
            exp = ref.outputs(spot["seed"])[:2]
            outs = torch.load(spot["file"], weights_only=True, map_location=o.device)
            cmp = compare(outs, exp[0], o.atol, o.rtol, refs64=exp[1], precision_factor=o.precision_factor,
                          protocol=self.protocol)
            if not cmp.ok:
                out.append(Violation(
                    "timing-output-wrong", f"an output produced inside the timing loop is wrong ({cmp.error}); "
                    f"the kernel must do the same work whether or not it is being timed", "", exploit_class=12))
                break
        wall = rep.get("wall_ms")
        # the wall clock is measured against what can explain it honestly: the GPU time the
        # events see, or the host's own time to issue the calls (a busy CPU slows launches)
        own = max(rep["median_ms"], rep.get("enqueue_ms") or 0.0)
        if o.device == "cuda" and wall is not None and wall > 1.5 * own + 0.02:
            out.append(Violation(
                "hidden-work", f"back-to-back calls take {wall:.4g} ms each by the wall clock with a "
                f"device-wide synchronize, but {rep['median_ms']:.4g} ms by events on the current stream (and "
                f"{rep.get('enqueue_ms') or 0.0:.4g} ms to issue): work runs outside the current stream (join "
                f"other streams before returning)", "", exploit_class=10))
        if bound is not None and rep["median_ms"] < roofline.FLAG_FRACTION * bound:
            out.append(Violation(
                "faster-than-roofline", f"{rep['median_ms']:.4g} ms per call is under half the time needed just "
                f"to read the inputs at {name}'s peak bandwidth ({bound:.4g} ms): work is skipped or results "
                f"are reused across calls", "", exploit_class=13))
        return out

    # -- after the candidate ran ---------------------------------------------------------
    def close_job(self) -> None:
        """Stop the runner; provided files changed while the candidate ran (hashed before,
        compared after); the GPU tools; remove the job directory."""
        o, res, runner, spare = self.o, self.res, self.runner, self.spare
        self.runner = None  # closed here, or left to exit behind the check: nothing to freeze after
        if runner is None and spare is not None:  # failed before the runner was needed
            runner = spare.runner
        tools = self.tool_seed is not None and (o.sanitize or (o.ncu and res.correct and not res.violations))
        dirs = [self.job_dir] + ([spare.stage] if spare is not None else [])
        # a long-lived judge lets the runner exit behind it (timing and baselines wait for it);
        # only where the sandbox keeps the solution's files read-only, so the late check below
        # cannot miss a change
        if runner is not None and spares.on and not tools and runner.plan.root_readonly:
            spares.closing.close(runner, *dirs)
            dirs, runner = [], None
        if runner is not None:
            runner.close()
        # provided files changed while the candidate ran (hashed before, compared after)
        seen = {(v.rule, v.where) for v in res.violations}
        late = [v for v in _protected(self.sol_dir, self.task) if (v.rule, v.where) not in seen]
        if late:
            res.violations += late
            res.correct = False
            res.error = _explain(res.violations)
        if tools:
            if o.ncu:  # its counters (durations, throughputs) are measurements
                self.exclusive()
            _gpu_tools(o, self.job_dir, self.tool_seed, self.sol_file, self.kdir, self.env, res)
            self.lap("tools")
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.lap("close")

    def time_baselines(self) -> None:
        """Eager and torch.compile, same recipe (cached per task, device and torch version)."""
        o, res = self.o, self.res
        base = baselines.get(self.task, o.device, o.recipe, self.n_rot, compile=o.compile_baseline,
                             timeout=o.time_timeout, under=self.under, quiet=self.exclusive, since=self.timed_at)
        res.t_eager_ms = base.get("eager_ms")
        res.t_compile_ms = base.get("compile_ms")
        if base.get("error"):
            res.error = f"baseline: {base['error']}"
        else:
            source = "cached" if base.get("cached") else "shared" if base.get("shared") else "measured"
            res.baselines = {"source": source, "conditions": base.get("conditions"), "under": self.under,
                             **({"compilers": base["compilers"]} if source == "measured" and base.get("compilers") else {})}
            if base.get("remeasured"):  # say why the baselines differ from the last check's
                by = " (by another check that waited for the device with it)" if source == "shared" else ""
                res.warnings.append(f"baselines measured again after this candidate's timing{by}: the cached ones were "
                                    f"taken under other load (then {base.get('cached_conditions')}, now {self.under})")
            if source != "cached" and base.get("stable") is False:
                # never cached: the next check measures again, and its speedups may differ from these
                n = {k: base.get(k + "_attempts") for k in ("eager", "compile") if k + "_ms" in base}
                tries = ", ".join(f"{k} {v} {'try' if v == 1 else 'tries'}" for k, v in n.items())
                res.warnings.append(f"{baselines.UNSTABLE}: no two timings agreed within {baselines.AGREE:.0%} ({tries}; "
                                    f"a busy machine?); not cached, the next check measures again")
        if res.t_gen_ms and res.t_eager_ms:
            res.speedup_eager = res.t_eager_ms / res.t_gen_ms
        if res.t_gen_ms and res.t_compile_ms:
            res.speedup_compile = res.t_compile_ms / res.t_gen_ms
        self.lap("baselines")

    # the phase each stage books its time to when it ends the check before its own lap (a hang's
    # seconds belong to the round that hung, not to closing the job)
    PHASE_OF = {compile: "build", reference_outputs: "reference", load: "start", main_round: "verify",
                extra_round: "extra", time_candidate: "timing"}


UNCOUNTED_LANGUAGES = ("tilelang", "cutlass", "numba")


def _uncounted_kernels(sol_file: Path) -> bool:
    """The solution launches kernels in a language whose calls the runner does not count (it
    counts extensions, workspace ops, Triton and CuPy): the strict no-custom-code rule cannot
    judge it."""
    import re

    try:
        text = sol_file.read_text(errors="replace")
    except OSError:
        return False
    return bool(re.search(r"^\s*(import|from)\s+(" + "|".join(UNCOUNTED_LANGUAGES) + r")\b", text, re.M))


def _gpu_tools(o: CheckOptions, job_dir: Path, seed: int, sol_file: Path, kdir: Path | None, env: dict,
               res: CheckResult) -> None:
    """compute-sanitizer tools, then ncu, each on one forward in a sandbox of its own (the job's
    files are still in place).  Feedback, except that a memcheck error fails the check."""
    files = [sol_file] + (sorted(p for p in kdir.iterdir() if p.is_file()) if kdir is not None else [])
    job = job_dir / "job.json"
    for tool in o.sanitize:
        rep = sanitizer.run(tool, job, seed, {p.name for p in files}, env=env, limits=o.limits,
                            timeout=o.verify_timeout)
        res.sanitizer.append(rep)
        if tool == "memcheck" and rep.ran and rep.errors:
            f = rep.findings[0] if rep.findings else None
            res.violations.append(Violation(
                "memcheck-error", f"compute-sanitizer memcheck found {rep.errors} memory error(s) in one forward on the "
                f"first input set" + (f" ({f.kind}" + (f" in {f.kernel}" if f.kernel else "") + ")" if f else "")
                + ": a kernel reads or writes outside its buffers, even if the numbers came out right",
                f.where if f else ""))
            res.correct = False
            res.error = _explain(res.violations)
    if o.ncu and res.correct and not res.violations:
        text = "\n".join(p.read_text(errors="replace") for p in files)
        try:
            pk = roofline.peaks(o.device)
        except Exception:  # noqa: BLE001 - the table goes without rooflines
            pk = None
        res.ncu = ncu.profile(job, seed, text, env=env, limits=o.limits, timeout=o.time_timeout, peaks=pk)


def _timing_hang_budget(o: CheckOptions, ref_s: float) -> tuple[float, str]:
    """The timing loop runs for its own budget (warm-up, samples until ``budget_s``) plus at
    least ``min_samples`` samples, the spot checks and the wall-clock run: that many calls."""
    r = o.recipe
    calls = 6 + r.min_samples + r.round_size + 4 * o.spot_checks + 2 + 20
    return hang_budget(o, ref_s, calls, r.warmup_ms / 1e3 + 1.5 * r.budget_s)


def _first_output_digest(f: Path) -> str:
    import torch

    outs = torch.load(f, weights_only=True)
    if not outs or not isinstance(outs[0], torch.Tensor):
        return "none"
    t = outs[0].detach().contiguous().reshape(-1)
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        return f"non-finite {f.name}"  # NaN outputs are reported by the comparison, not as constant
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def _refs_differ(refs: list[list]) -> bool:
    """The reference's first output changes across input sets beyond FP32 round-off."""
    import torch

    firsts = [r[0] for r in refs if r and isinstance(r[0], torch.Tensor) and r[0].is_floating_point()]
    if len(firsts) < 2:
        return False
    a = firsts[0].double()
    for b in firsts[1:]:
        b = b.double()
        if a.shape != b.shape:
            return True
        scale = max(float(a.norm()), float(b.norm()), 1e-30)
        if float((a - b).norm()) / scale > 1e-4:
            return True
    return False



def rotation_sets(set_bytes: int, device: str) -> int:
    """How many input sets the timing loop rotates over: enough to exceed L2 three times."""
    if device != "cuda":
        return 2
    import torch

    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 50 << 20)
    return max(2, min(16, math.ceil(3 * l2 / max(set_bytes, 1))))
