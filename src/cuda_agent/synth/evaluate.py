"""The four filters, as run inside an evaluation process on one task source.

Order (cheapest first; the first failure is the verdict): load -> static stochastic scan ->
eager run -> non-trivial (finite, not constant, input-dependent) -> deterministic (two runs on
the same model and inputs identical, and a rebuild with the same seed identical) -> runtime band
-> torch.compile (runs and matches eager).  Every rejection has a short ``code`` (for counting)
and a one-line ``reason``.  This module imports torch lazily: the process that runs it
(:mod:`cuda_agent.synth.runner`) sets its environment first.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

STOCHASTIC = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout", "dropout",
              "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "RReLU", "rrelu",
              "bernoulli", "bernoulli_", "multinomial", "normal", "normal_", "rand", "randn", "randint", "rand_like",
              "randn_like", "randint_like", "randperm", "gumbel_softmax", "FractionalMaxPool2d",
              "FractionalMaxPool3d", "uniform_", "exponential_", "poisson", "geometric_", "cauchy_", "log_normal_"}


@dataclass
class FilterConfig:
    """Filter settings (device, runtime band, compile)."""

    device: str = "cpu"
    band_ms: tuple[float, float] | None = None
    """Eager runtime band in ms; default (1, 100) on cuda, (0.1, 5000) on cpu."""
    compile: bool = True
    compile_backend: str = "inductor"
    compile_rtol: float = 1e-2
    compile_atol: float = 1e-2
    warmup: int = 2
    reps: int = 5
    timeout_s: float = 120.0
    """Wall limit for everything but the compile step."""
    compile_timeout_s: float = 300.0
    """Wall limit for the compile step alone (inductor on the CPU compiles C++)."""
    threads: int = 1
    """torch CPU threads inside an evaluation process."""
    timing_lock: str | None = None
    """Path prefix of a lock file held while timing (``<prefix>.<CUDA_VISIBLE_DEVICES>``), so that
    several evaluation processes sharing one GPU never time at the same moment."""

    @property
    def band(self) -> tuple[float, float]:
        if self.band_ms is not None:
            return (float(self.band_ms[0]), float(self.band_ms[1]))
        return (1.0, 100.0) if self.device.startswith("cuda") else (0.1, 5000.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Verdict:
    """The outcome of filtering one task."""

    ok: bool
    code: str = ""
    """Short rejection class: load, stochastic, eager, oom, output, non_finite, constant, input_independent,
    nondeterministic, too_fast, too_slow, compile_error, compile_mismatch, compile_timeout, timeout, crash."""
    reason: str = ""
    eager_ms: float | None = None
    compile_ms: float | None = None
    out_shapes: list[list[int]] = field(default_factory=list)
    phase_s: dict[str, float] = field(default_factory=dict)
    """Seconds spent in each filter phase (load, eager, determinism, time, compile) up to the verdict."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reject(code: str, reason: str, **kw: Any) -> Verdict:
    if code in ("eager", "compile_error") and "OutOfMemoryError" in reason:
        code = "oom"  # out of device memory (often other processes' share): not the task's fault alone
    return Verdict(ok=False, code=code, reason=reason[:500], **kw)


def stochastic_names(source: str) -> list[str]:
    """Stochastic operator names used by ``Model``'s methods other than ``__init__`` (seeded weight
    initialization and ``get_inputs`` may draw random numbers freely)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            body = [f for f in node.body if not (isinstance(f, ast.FunctionDef) and f.name == "__init__")]
            # Stochastic *modules* are named in __init__ (nn.Dropout(...)); stochastic *calls* anywhere else.
            init = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
            for sub in [s for f in init for s in ast.walk(f) if isinstance(s, ast.Attribute) and s.attr[:1].isupper()]:
                if sub.attr in STOCHASTIC and sub.attr not in found:
                    found.append(sub.attr)
            for sub in (s for f in body for s in ast.walk(f)):
                name = sub.attr if isinstance(sub, ast.Attribute) else sub.id if isinstance(sub, ast.Name) else None
                if name in STOCHASTIC and name not in found:
                    found.append(name)
    return found


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}"


def _flat(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        res = []
        for o in out:
            res += _flat(o)
        return res
    raise TypeError(f"forward returned {type(out).__name__}, not tensors")


def _load(source: str, workdir: Path) -> Any:
    path = Path(tempfile.mkstemp(suffix=".py", prefix="task_", dir=workdir)[1])
    path.write_text(source)
    name = f"synth_task_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    for n in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, n):
            raise AttributeError(f"task does not define {n}")
    return mod


def _inputs(mod: Any, device: str) -> list[Any]:
    """``get_inputs()`` on ``device``.  On a GPU the tensors are drawn there directly (under
    ``torch.device``): drawing a 2^30-element input on one CPU thread takes seconds, three times
    per task.  A task whose ``get_inputs`` cannot run that way gets CPU tensors moved over."""
    import torch

    if device.startswith("cuda"):
        state = torch.random.get_rng_state(), torch.cuda.get_rng_state_all()
        try:
            with torch.device(device):
                xs = mod.get_inputs()
            return [x.to(device) if isinstance(x, torch.Tensor) else x for x in xs]
        except Exception:  # noqa: BLE001 - fall back to the task's own CPU generation
            torch.random.set_rng_state(state[0])
            torch.cuda.set_rng_state_all(state[1])
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]


def _build(mod: Any, device: str, seed: int) -> tuple[Any, list[Any]]:
    import torch

    torch.manual_seed(seed)
    if device.startswith("cuda"):
        try:  # weights initialized on the GPU (same reason as the inputs)
            with torch.device(device):
                model = mod.Model(*mod.get_init_inputs()).to(device)
        except Exception:  # noqa: BLE001
            torch.manual_seed(seed)
            model = mod.Model(*mod.get_init_inputs()).to(device)
    else:
        model = mod.Model(*mod.get_init_inputs()).to(device)
    return model, _inputs(mod, device)


def timing_lock_file(cfg: FilterConfig, env: dict[str, str] | None = None) -> str:
    """The timing lock of the device a process with ``env`` (over ours) uses."""
    import os

    dev = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "all"))
    return f"{cfg.timing_lock}.{dev}"


@contextlib.contextmanager
def _timing_lock(cfg: FilterConfig) -> Iterator[None]:
    if not cfg.timing_lock:
        yield
        return
    import fcntl

    # read-only: the evaluation process sees a read-only tree; its parent created the file
    with open(timing_lock_file(cfg)) as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time_ms(fn: Callable[[], Any], device: str, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    budget = time.perf_counter() + 5.0
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
        if time.perf_counter() > budget:
            break
    return statistics.median(times)


def _same(a: list[Any], b: list[Any]) -> bool:
    import torch

    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def _close(a: list[Any], b: list[Any], rtol: float, atol: float) -> tuple[bool, str]:
    import torch

    if len(a) != len(b):
        return False, f"{len(b)} outputs instead of {len(a)}"
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return False, f"shape {tuple(y.shape)} instead of {tuple(x.shape)}"
        if x.is_floating_point() or x.is_complex():
            if not torch.allclose(x.float(), y.float(), rtol=rtol, atol=atol, equal_nan=True):
                err = (x.float() - y.float()).abs().nan_to_num(float("inf")).max().item()
                return False, f"max abs error {err:.3g}"
        else:
            bad = (x != y).float().mean().item()
            if bad > 1e-3:
                return False, f"{bad:.2%} of integer/bool outputs differ"
    return True, ""


def run_filters(source: str, cfg: FilterConfig, workdir: Path,
                phase: Callable[[str], None] = lambda p: None) -> Verdict:
    """All filters on ``source`` in this process (the caller isolates it)."""
    warnings.filterwarnings("ignore")
    spent: dict[str, float] = {}
    clock = [time.perf_counter(), "load"]

    def enter(name: str) -> None:
        now = time.perf_counter()
        spent[clock[1]] = spent.get(clock[1], 0.0) + now - clock[0]
        clock[0], clock[1] = now, name

    try:
        v = _run_filters(source, cfg, workdir, phase, enter)
    finally:  # the task's module (and any tensor it holds) goes with its verdict
        for name in [k for k in sys.modules if k.startswith("synth_task_")]:
            del sys.modules[name]
    enter("")
    v.phase_s = {k: round(x, 4) for k, x in spent.items()}
    return v


def _run_filters(source: str, cfg: FilterConfig, workdir: Path, phase: Callable[[str], None],
                 enter: Callable[[str], None]) -> Verdict:
    import torch

    names = stochastic_names(source)
    if names:
        return reject("stochastic", f"stochastic operator(s) in Model: {', '.join(names)}")
    dev = cfg.device
    try:
        mod = _load(source, workdir)
    except BaseException as e:  # noqa: BLE001 - task code may raise anything
        return reject("load", f"task does not load: {_one_line(e)}")
    enter("eager")
    try:
        model, inputs = _build(mod, dev, 0)
        with torch.no_grad():
            out1 = _flat(model(*inputs))
    except BaseException as e:  # noqa: BLE001
        return reject("eager", f"eager run failed: {_one_line(e)}")
    shapes = [list(o.shape) for o in out1]
    if not out1 or any(o.numel() == 0 for o in out1):
        return reject("output", "empty output", out_shapes=shapes)
    # non-trivial
    for o in out1:
        if (o.is_floating_point() or o.is_complex()) and not bool(torch.isfinite(o).all()):
            return reject("non_finite", "output contains NaN or Inf", out_shapes=shapes)
    if all(o.numel() > 1 and bool((o == o.reshape(-1)[0]).all()) for o in out1):
        return reject("constant", "output is constant", out_shapes=shapes)
    try:
        torch.manual_seed(1)
        inputs2 = _inputs(mod, dev)
        with torch.no_grad():
            out_other = _flat(model(*inputs2))
    except BaseException as e:  # noqa: BLE001
        return reject("eager", f"eager run on a second input set failed: {_one_line(e)}")
    independent = _close(out1, out_other, rtol=1e-5, atol=1e-7)[0]
    del out_other, inputs2  # free before the next runs: peak device memory decides OOMs on a shared GPU
    if independent:
        return reject("input_independent", "output does not change with the inputs", out_shapes=shapes)
    # deterministic
    enter("determinism")
    try:
        with torch.no_grad():
            out2 = _flat(model(*inputs))
        same = _same(out1, out2)
        del out2
        if not same:
            return reject("nondeterministic", "two runs on the same model and inputs differ", out_shapes=shapes)
        model_b, inputs_b = _build(mod, dev, 0)
        with torch.no_grad():
            out3 = _flat(model_b(*inputs_b))
        del model_b, inputs_b
        same = _same(out1, out3)
        del out3
    except BaseException as e:  # noqa: BLE001
        return reject("eager", f"repeated eager run failed: {_one_line(e)}")
    if not same:
        return reject("nondeterministic", "a rebuild with the same seed gives different outputs", out_shapes=shapes)
    # runtime band
    lo, hi = cfg.band
    phase("time")
    enter("time")
    # The model already ran three times on these inputs (out1, out_other, out2): those runs are
    # the first warm-up runs, so only the rest of ``cfg.warmup`` is run here.
    with torch.no_grad(), _timing_lock(cfg):
        ms = _time_ms(lambda: model(*inputs), dev, max(0, cfg.warmup - 2), cfg.reps)
    if ms < lo:
        return reject("too_fast", f"eager {ms:.4g} ms < {lo} ms", eager_ms=ms, out_shapes=shapes)
    if ms > hi:
        return reject("too_slow", f"eager {ms:.4g} ms > {hi} ms", eager_ms=ms, out_shapes=shapes)
    # torch.compile
    cms = None
    if cfg.compile:
        phase("compile")
        enter("compile")
        try:
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=cfg.compile_backend)
            t0 = time.perf_counter()
            with torch.no_grad():
                outc = _flat(compiled(*inputs))
            _sync(dev)
            cms = (time.perf_counter() - t0) * 1e3
        except BaseException as e:  # noqa: BLE001
            return reject("compile_error", f"torch.compile failed: {_one_line(e)}", eager_ms=ms, out_shapes=shapes)
        good, why = _close(out1, outc, cfg.compile_rtol, cfg.compile_atol)
        if not good:
            return reject("compile_mismatch", f"torch.compile output differs from eager: {why}", eager_ms=ms,
                          out_shapes=shapes)
    return Verdict(ok=True, eager_ms=ms, compile_ms=cms, out_shapes=shapes)


def safe_run_filters(source: str, cfg: FilterConfig, workdir: Path,
                     phase: Callable[[str], None] = lambda p: None) -> Verdict:
    try:
        return run_filters(source, cfg, workdir, phase)
    except BaseException as e:  # noqa: BLE001 - a verdict, never a dead evaluator
        tb = traceback.format_exc(limit=2).strip().splitlines()[-1]
        return reject("eager", f"filter raised {_one_line(e)} ({tb})")
    finally:
        try:
            import torch

            if cfg.device.startswith("cuda"):
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass


__all__ = ["FilterConfig", "Verdict", "run_filters", "safe_run_filters", "stochastic_names", "reject",
           "timing_lock_file"]
