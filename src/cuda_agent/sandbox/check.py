"""``check(task, solution, options) -> CheckResult``: the one door to the evaluator.

build (cached) -> verify (candidate in its own process, reference and comparison here)
-> time (same recipe for candidate and baselines; baselines cached) -> reward.
The CLI's ``check``/``compile``/``verify``/``profile``, the agent, eval and training all
come through here.  Bad input of any kind ends in a CheckResult with ``error`` set.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import shutil
import sys
import tempfile
import time
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

from .. import reward as rewards
from ..tasks import Task, TaskError, validate_source
from . import baselines
from .build import build, kernel_sources
from .compare import compare
from .process import RunnerDied, RunnerProcess
from .results import BuildResult, CheckResult, Timing, Verdict, Violation
from .timing import Recipe


@dataclass
class CheckOptions:
    """How to check a solution."""

    device: str = "cuda"
    """``cuda`` or ``cpu``."""
    rules: str = "strict"
    """``strict`` (no torch compute in forward) or ``kernelbench`` (torch ops allowed)."""
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
    build_timeout: float = 300.0
    verify_timeout: float = 300.0
    time_timeout: float = 300.0
    recipe: Recipe = field(default_factory=Recipe)


def _module_from_source(source: str, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = f"<{name}>"
    sys.modules[name] = mod
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def _flatten(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    return [] if out is None else [out]


def _inputs(mod, seed: int, device: str) -> list:
    import torch

    torch.manual_seed(seed)
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]


def _job_root() -> Path:
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=base))


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
        from .static_rules import check_sources
    except ImportError:
        return []
    target = sol_dir if sol_file.name == "model_new.py" and sol_file.parent == sol_dir else sol_file
    try:
        return list(check_sources(target, task_source=task.source, profile=rules))
    except Exception as e:  # a bug in a rule must not lose the result
        return [Violation("static-check-error", f"static checks failed: {e}", "")]


def _protected(sol_dir: Path, task: Task) -> list[Violation]:
    ref = sol_dir / "model.py"
    if ref.is_file() and ref.read_text() != task.source:
        return [Violation("protected-file-changed", "model.py (the reference) was modified; the evaluator "
                          "always uses the task's original", "model.py", exploit_class=16)]
    return []


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
    res.reward = rewards.compute(o.reward, rewards.Outcome(
        compiled=res.compiled, correct=res.correct, t_gen=res.t_gen_ms, t_eager=res.t_eager_ms,
        t_compile=res.t_compile_ms))
    res.seconds = round(time.perf_counter() - t0, 3)
    return res


def _check(task: Task, solution: str | Path, o: CheckOptions, res: CheckResult) -> None:
    import torch

    rewards.get(o.reward)  # unknown scheme -> KeyError early (CLI turns it into a usage error)
    if o.device == "cuda" and not torch.cuda.is_available():
        raise TaskError("--device cuda but no CUDA GPU is visible (use --device cpu for the CPU backend)")
    validate_source(task.source, what=f"task {task.id}")
    sol_dir, sol_file, kdir = resolve_solution(solution)
    validate_source(sol_file.read_text(), required=("ModelNew",), what=sol_file.name)
    res.violations += _protected(sol_dir, task) + _static_violations(sol_dir, sol_file, task, o.rules)

    # 1. build
    if kdir is not None:
        b = build(kdir, o.device, timeout=o.build_timeout)
    else:
        b = BuildResult(ok=True)
    res.build = b
    res.compiled = b.ok
    if not b.ok:
        res.error = "build failed:\n" + b.log
        return
    if not o.verify:
        return

    # 2. verify
    job_dir = _job_root()
    runner = None
    try:
        task_file = job_dir / "reference.py"
        task_file.write_text(task.source)
        init_seed = secrets.randbits(31) if o.seed is None else o.seed
        job = {"device": o.device, "task_file": str(task_file), "solution_file": str(sol_file.resolve()),
               "solution_dir": str(sol_dir.resolve()), "extension": b.so_path, "rules": o.rules,
               "init_seed": init_seed, "weights_file": str(job_dir / "weights.pt"), "class_name": "ModelNew"}
        (job_dir / "job.json").write_text(json.dumps(job))
        env = {"CUDA_AGENT_DEVICE": o.device, "PYTHONDONTWRITEBYTECODE": "1"}
        runner = RunnerProcess(job_dir / "job.json", env=env)  # starts importing torch while we work

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        ref_mod = _module_from_source(task.source, f"cuda_agent_task_{task.sha}")
        torch.manual_seed(init_seed)
        ref_model = ref_mod.Model(*ref_mod.get_init_inputs()).to(o.device)
        torch.save(ref_model.state_dict(), job_dir / "weights.pt")
        rng = secrets.SystemRandom() if o.seed is None else __import__("random").Random(o.seed)
        seeds = [rng.randrange(1, 2**31) for _ in range(o.n_sets)]
        refs: dict = {}
        refs64: dict = {}
        set_bytes = 0
        model64 = _float64_twin(ref_model)
        with torch.no_grad():
            for s in seeds:
                xs = _inputs(ref_mod, s, o.device)
                set_bytes = sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))
                refs[s] = [r.detach().clone() if isinstance(r, torch.Tensor) else r
                           for r in _flatten(ref_model(*xs))]
                if model64 is not None:
                    refs64[s] = _run64(model64, xs)
                del xs

        def fail(stage: str, error: str, violations=()) -> None:
            res.verdict = Verdict(correct=False, error=error, stage=stage, violations=list(violations))
            res.error = error

        try:
            rep = runner.request({"cmd": "load"}, o.verify_timeout)
            if not rep["ok"]:
                return fail(rep.get("stage", "load"), rep["error"])
            rep = runner.request({"cmd": "run", "seeds": seeds, "out_dir": str(job_dir)}, o.verify_timeout)
        except RunnerDied as e:
            return fail(e.stage, str(e))
        run_violations = [Violation.from_dict(v) for v in rep.get("violations", [])]
        res.violations += run_violations
        if not rep["ok"]:
            return fail(rep.get("stage", "forward"), rep["error"], run_violations)
        max_abs = max_rel = 0.0
        for k, s in enumerate(seeds):
            outs = torch.load(job_dir / f"out_{s}.pt", weights_only=True, map_location=o.device)
            (job_dir / f"out_{s}.pt").unlink()
            cmp = compare(outs, refs[s], o.atol, o.rtol, refs64=refs64.get(s))
            max_abs, max_rel = max(max_abs, cmp.max_abs_err), max(max_rel, cmp.max_rel_err)
            res.max_abs_err, res.max_rel_err = max_abs, max_rel
            if not cmp.ok:
                res.verdict = Verdict(False, f"input set {k + 1}/{len(seeds)}: {cmp.error}", "compare",
                                      max_abs, max_rel, cmp.atol, cmp.rtol, k, run_violations)
                res.error = res.verdict.error
                return
        res.verdict = Verdict(True, None, "compare", max_abs, max_rel, cmp.atol, cmp.rtol, len(seeds),
                              run_violations)
        res.correct = True
        if res.violations:
            res.error = "rules violated: " + "; ".join(
                f"{v.message}" + (f" [{v.where}]" if v.where else "") for v in res.violations[:5])
            return
        del refs, ref_model

        # 3. time
        if not o.timing:
            return
        n_rot = rotation_sets(set_bytes, o.device)
        tseeds = [secrets.randbits(31) for _ in range(n_rot)]
        try:
            rep = runner.request({"cmd": "time", "seeds": tseeds, "recipe": o.recipe.__dict__}, o.time_timeout)
        except RunnerDied as e:
            res.error = f"timing failed: {e}"
            return
        if not rep["ok"]:
            res.error = f"timing failed: {rep['error']}"
            return
        res.timing = Timing(rep["median_ms"], rep["spread"], rep["n"], rep["method"], rep["calls_per_sample"],
                            rep["min_ms"])
        res.t_gen_ms = rep["median_ms"]
    finally:
        if runner is not None:
            runner.close()
        shutil.rmtree(job_dir, ignore_errors=True)

    if o.baselines:
        base = baselines.get(task, o.device, o.recipe, n_rot, compile=o.compile_baseline,
                             timeout=o.time_timeout)
        res.t_eager_ms = base.get("eager_ms")
        res.t_compile_ms = base.get("compile_ms")
        if base.get("error"):
            res.error = f"baseline: {base['error']}"
        if res.t_gen_ms and res.t_eager_ms:
            res.speedup_eager = res.t_eager_ms / res.t_gen_ms
        if res.t_gen_ms and res.t_compile_ms:
            res.speedup_compile = res.t_compile_ms / res.t_gen_ms


def _float64_twin(model):
    """A float64 copy of an FP32 reference (the 'truth' for FP32 outputs), or None."""
    import copy

    import torch

    params = list(model.parameters()) + list(model.buffers())
    if any(p.is_floating_point() and p.dtype != torch.float32 for p in params):
        return None
    try:
        return copy.deepcopy(model).double()
    except Exception:
        return None


def _run64(model64, xs) -> list | None:
    """Outputs of the float64 twin on upcast inputs; None when the task cannot run in float64."""
    import torch

    try:
        xs64 = [x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x for x in xs]
        return [r.detach() if isinstance(r, torch.Tensor) else r for r in _flatten(model64(*xs64))]
    except Exception:
        return None


def rotation_sets(set_bytes: int, device: str) -> int:
    """How many input sets the timing loop rotates over: enough to exceed L2 three times."""
    if device != "cuda":
        return 2
    import torch

    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 50 << 20)
    return max(2, min(16, math.ceil(3 * l2 / max(set_bytes, 1))))
