"""The small typed objects that flow out of the sandbox: build, verdict, timing, check.

All are dataclasses that round-trip through JSON (``to_dict`` / ``from_dict``), since
they cross process boundaries (candidate -> judge -> pool -> agent/eval/train).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from .. import reward as rewards


class _JSON:
    _nested: ClassVar[dict[str, type]] = {}
    """Fields that hold another of these objects (or a list of them): field -> its class."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        """Inverse of :meth:`to_dict`; unknown keys (from another version) are dropped."""
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        kw = {k: v for k, v in d.items() if k in names}
        for k, sub in cls._nested.items():
            v = kw.get(k)
            if isinstance(v, list):
                kw[k] = [sub.from_dict(x) for x in v]  # type: ignore[attr-defined]
            elif v:
                kw[k] = sub.from_dict(v)  # type: ignore[attr-defined]
        return cls(**kw)


@dataclass
class Violation(_JSON):
    """A broken rule: the candidate did something the rules profile forbids."""

    rule: str
    """Short rule id, e.g. ``torch-op-in-forward``, ``input-mutated``, ``protected-file-changed``."""
    message: str
    """One sentence for the agent/user."""
    where: str = ""
    """``file:line`` or op name where it happened."""
    exploit_class: int | None = None
    """Number of the class in notes/exploits.md this defends against, if any."""


@dataclass
class BuildResult(_JSON):
    """Outcome of compiling a solution's sources into one extension."""

    ok: bool
    so_path: str | None = None
    """The built shared library (content-addressed, inside the build cache)."""
    log: str = ""
    """Trimmed compiler diagnostics: the first errors with file:line (empty on success)."""
    seconds: float = 0.0
    compiled: list[str] = field(default_factory=list)
    """Sources that were actually compiled (the rest came from the object cache)."""
    cached: list[str] = field(default_factory=list)
    """Sources whose object file came from the cache."""


@dataclass
class Verdict(_JSON):
    """Correctness of a candidate against the reference on several random input sets."""

    correct: bool
    error: str | None = None
    """Why it is not correct (first failing check), or why it could not run."""
    stage: str = "verify"
    """Where it stopped: ``load``, ``init``, ``weights``, ``forward``, ``compare``, ``timeout``, ``crash``."""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    n_sets: int = 0
    """Input sets that passed."""
    violations: list[Violation] = field(default_factory=list)
    exploit_class: int | None = None
    """The exploits.md class this failure is typical of (6 NaN/zeros, 7 other shape, 8 precision...)."""
    round: str = "main"
    """Which round failed or passed last: ``main``, ``shape`` (other sizes/seeds), ``timing-spot``."""
    precision_ratio: float | None = None
    """Worst relative-L2 error of the candidate vs float64, over the FP32 reference's own (FP32 tasks)."""

    _nested = {"violations": Violation}


@dataclass
class Timing(_JSON):
    """A runtime measurement (one recipe for candidate and baselines: see timing.py)."""

    median_ms: float
    spread: float
    """Relative inter-quartile range of the per-call times (IQR / median)."""
    n: int
    """Number of timed samples behind the median."""
    method: str
    """``cuda-events`` or ``host-clock``, plus the recipe's parameters."""
    calls_per_sample: int = 1
    min_ms: float | None = None
    wall_ms: float | None = None
    """Device-synchronized wall time per call over back-to-back calls (the cross-check)."""
    roofline_ms: float | None = None
    """Time to read the inputs once at the device's peak memory bandwidth (a lower bound)."""


@dataclass
class Roofline(_JSON):
    """Achieved bytes/s and FLOP/s against the device's peaks (sandbox/roofline.py)."""

    scope: str
    """``forward`` (the whole call: inputs, weights and outputs moved once, the reference's
    counted FLOPs) or a kernel name (DRAM bytes and FP instructions read by Nsight Compute)."""
    time_ms: float
    bytes: float
    flops: float
    peak_bytes_s: float | None
    peak_flops_s: float | None
    """FP32 CUDA-core peak (tensor cores not counted); None where unknown (CPU)."""
    achieved_bytes_s: float = 0.0
    achieved_flops_s: float = 0.0
    bound: str = "memory"
    """``memory`` or ``compute``: which roof is lower at this arithmetic intensity."""
    pct_of_roof: float | None = None
    """Time the roof allows over the time measured, in % (100 = at the roofline)."""
    peak_source: str = ""
    """Where the peaks come from: ``device properties``, ``measured copy``, ``data sheet``."""


@dataclass
class KernelProfile(_JSON):
    """Nsight Compute's counters of one kernel launch (sandbox/ncu.py)."""

    name: str
    yours: bool
    """The kernel's name appears in the solution's sources (else a library's: cuBLAS, torch...)."""
    duration_us: float | None = None
    grid: str = ""
    block: str = ""
    occupancy_pct: float | None = None
    """Achieved occupancy: sm__warps_active.avg.pct_of_peak_sustained_active."""
    theoretical_occupancy_pct: float | None = None
    dram_pct: float | None = None
    l2_pct: float | None = None
    l1_pct: float | None = None
    sm_pct: float | None = None
    """SM throughput (% of peak sustained), the compute side of the speed of light."""
    tensor_pct: float | None = None
    registers: int | None = None
    smem_bytes: int | None = None
    """Static + dynamic shared memory per block."""
    stalls: list[list] = field(default_factory=list)
    """Top warp-stall reasons: [reason, cycles per issued instruction]."""
    dram_bytes: float | None = None
    flops: float | None = None
    roofline: Roofline | None = None

    _nested = {"roofline": Roofline}


@dataclass
class NcuReport(_JSON):
    """The kernels of one forward of the candidate, as Nsight Compute read them."""

    kernels: list[KernelProfile] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    isolation: str = ""

    _nested = {"kernels": KernelProfile}


@dataclass
class SanitizerFinding(_JSON):
    """One kind of error compute-sanitizer reported (identical reports merged)."""

    tool: str
    kind: str
    """First line of the report, e.g. ``Invalid __global__ write of size 4 bytes``."""
    kernel: str = ""
    where: str = ""
    """``file:line`` where the build has line info (else the kernel and its offset)."""
    count: int = 1
    detail: str = ""
    """Second line of interest: the address relative to the nearest allocation, the other access."""


@dataclass
class SanitizerReport(_JSON):
    """What one compute-sanitizer tool found on one forward of the candidate."""

    tool: str
    ran: bool = False
    errors: int = 0
    """The tool's own ``ERROR SUMMARY`` / ``RACECHECK SUMMARY`` count."""
    findings: list[SanitizerFinding] = field(default_factory=list)
    error: str | None = None
    """Why the tool could not run (not a finding)."""
    seconds: float = 0.0

    _nested = {"findings": SanitizerFinding}


@dataclass
class DeviceHold(_JSON):
    """One stretch of a check holding its device's lock (sandbox/devicelock.py), wall clock."""

    mode: str
    """``shared`` (computing: nothing timed) or ``exclusive`` (measuring: no other judge on it)."""
    device: str
    """The physical device: ``gpu-<uuid>`` or ``cpu-<host>``."""
    start: float
    end: float


@dataclass
class CheckResult(_JSON):
    """Everything one check says about a solution; the JSON of ``cuda-agent check``."""

    task_id: str
    task_sha: str
    device: str
    rules: str
    compiled: bool = False
    correct: bool = False
    error: str | None = None
    violations: list[Violation] = field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    t_gen_ms: float | None = None
    t_eager_ms: float | None = None
    t_compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    baselines: dict[str, Any] = field(default_factory=dict)
    """Where ``t_eager_ms``/``t_compile_ms`` came from (timed checks): ``source`` is ``cached`` (taken
    on a machine comparable to this timing's), ``shared`` (measured by another judge after this
    timing) or ``measured`` (now); ``conditions``, the load they were taken under and ``under``,
    the load around this candidate's timing (sandbox/baselines.py); ``compilers``, for a
    measurement with torch.compile: ``reused`` when the task's kept compiler caches answered every
    graph, else ``compiled``."""
    reward: float | None = None
    reward_scheme: str | None = None
    build: BuildResult | None = None
    verdict: Verdict | None = None
    timing: Timing | None = None
    seconds: float = 0.0
    exploit_classes: list[int] = field(default_factory=list)
    """exploits.md classes of every rejection (violations and verdict); see sandbox/exploits.py."""
    warnings: list[str] = field(default_factory=list)
    """Things the user should know that do not change the verdict (e.g. isolation unavailable)."""
    isolation: str = ""
    """What the candidate process ran under (namespaces, limits)."""
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds spent in each stage (build, reference, start, verify, extra, timing, baselines),
    and ``gpu_wait``: waiting for the device's lock (another judge's timing), no stage's time."""
    holds: list[DeviceHold] = field(default_factory=list)
    """When the check held its device shared or exclusive (the pool's audit reads them)."""
    extensions: list[dict] = field(default_factory=list)
    """Every extension a single-file solution built while it was imported (``load_inline``/``load``):
    name, ok, cached, seconds, error - a failed build is listed even when the solution caught it -
    and ``pch``: what gcc made of the shared precompiled torch/extension.h (``used``, ``not used``,
    ``offered`` under ``-w``; absent: none offered), ``pch_seconds`` when this build first made it."""
    custom_calls: int | None = None
    """Calls of the solution's own code (extension functions, workspace ops, Triton and CuPy kernels) during
    the verification forwards; 0: only torch ran.  None: not verified."""
    weights: str = ""
    """How ModelNew got its parameters: ``seeded`` (constructed after the reference's seed),
    ``seeded, then copied by name (N)`` (the fallback), ``copied`` (all by name)."""
    precision_route: str = ""
    """How the FP32 reference's own error was measured: ``float64 copy``, ``float64 rebuild``, or
    ``unavailable: why`` (then the precision-honesty check could not run, and a warning says so)."""
    rel_l2_err: float | None = None
    """Worst relative L2 error ||out - truth|| / ||truth|| over outputs and input sets (truth: a
    float64 run of the reference where it exists, else the reference)."""
    ref_rel_l2_err: float | None = None
    """The FP32/FP16/BF16 reference's own relative L2 error against its float64 run: what the
    task's precision itself achieves, to read ``rel_l2_err`` against."""
    ref_max_abs_err: float | None = None
    roofline: Roofline | None = None
    """The whole forward against the device's peaks (timed checks)."""
    ncu: NcuReport | None = None
    """Nsight Compute's counters per kernel (``profile --ncu``)."""
    sanitizer: list[SanitizerReport] = field(default_factory=list)
    """compute-sanitizer tools run on the first input set (``sanitize``, ``check --sanitize``)."""

    _nested = {"violations": Violation, "build": BuildResult, "verdict": Verdict, "timing": Timing,
               "roofline": Roofline, "ncu": NcuReport, "sanitizer": SanitizerReport, "holds": DeviceHold}

    @classmethod
    def failed(cls, task, message: str, *, device: str, rules: str, reward_scheme: str | None = None,
               stage: str | None = None, compiled: bool = False,
               exploit_class: int | None = None) -> "CheckResult":
        """The result of a check that could not deliver a verdict on the candidate's code (the
        pool lost it, a worker died, the evaluator raised): ``error`` says why; with a
        ``stage`` a failed verdict says it too; with a ``reward_scheme`` the reward is that
        scheme's for a failure (None when the scheme is unknown)."""
        res = cls(task_id=task.id, task_sha=task.sha, device=device, rules=rules,
                  reward_scheme=reward_scheme, compiled=compiled, error=message)
        if stage is not None:
            res.verdict = Verdict(correct=False, error=message, stage=stage, exploit_class=exploit_class)
        if exploit_class is not None:
            res.exploit_classes = [exploit_class]
        if reward_scheme is not None:
            try:
                res.reward = rewards.compute(reward_scheme, rewards.Outcome(compiled=compiled, correct=False))
            except KeyError:
                res.reward = None
        return res


def rank(r) -> tuple:
    """Order of "better" among candidates (a CheckResult, or a row with the same fields such as
    eval's ``ResultRow``): correct first, then speedup vs torch.compile, then vs eager, then reward."""
    return (bool(r.correct and r.compiled), r.speedup_compile or 0.0, r.speedup_eager or 0.0,
            r.reward if r.reward is not None else float("-inf"))
