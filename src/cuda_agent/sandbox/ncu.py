"""Nsight Compute on one forward of a candidate: the few counters that explain a kernel's speed.

``ncu`` wraps the runner inside the same sandbox as a check (process.run_under); the runner
runs one warm-up forward, then one forward between cudaProfilerStart/Stop on the task's first
input set, so ``--profile-from-start off`` reads only the candidate's forward.  ncu's own
sections (SpeedOfLight, Occupancy, LaunchStats, WarpStateStats, ComputeWorkloadAnalysis) plus
the DRAM byte and FP instruction counts of the roofline are printed as the raw page in CSV
(``--csv --page raw --print-units base``) into a file in the job directory, parsed here into
:class:`KernelProfile` rows, and summarised in a table an LLM reads in a few hundred tokens.

The raw page's CSV: one header row of metric names (``"ID","Process ID",...,"Kernel Name",
...,"gpu__time_duration.sum",...``), one row of units (its ``ID`` empty), then one row per
kernel launch; numbers may carry thousands separators; a metric the device lacks reads ``n/a``.
"""

from __future__ import annotations

import csv
import os
import re
import time
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

from . import inline_build
from . import roofline as rl
from .isolation import Limits
from .process import find_cuda_tool, keep_log, run_under
from .results import KernelProfile, NcuReport

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "ComputeWorkloadAnalysis")
_FP = {"f": "fp32", "d": "fp64", "h": "fp16"}
FLOP_METRICS = tuple(f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum" for p in _FP
                     for op in ("add", "mul", "fma"))
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", *FLOP_METRICS)
MAX_LAUNCHES = 64
"""Kernel launches profiled in one forward (each is replayed once per counter pass)."""

TIME = "gpu__time_duration.sum"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL = "sm__maximum_warps_per_active_cycle_pct"
DRAM = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
L2 = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
L1 = "l1tex__throughput.avg.pct_of_peak_sustained_active"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
TENSOR = re.compile(r"^sm__(?:inst_executed_)?pipe_tensor\w*\.avg\.pct_of_peak_sustained_active$")
STALL = re.compile(r"^smsp__average_warps?_(?:latency_)?issue_stalled_(\w+?)_per_issue_active\.ratio$")
STALL_SAMPLES = re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+?)(_not_issued)?$")
NOT_STALLS = {"selected"}
TENSOR_BUSY_PCT = 5.0
"""Tensor-pipe % from which a kernel counts as running on tensor cores (its MMA FLOPs are not among
the counted instructions, so it gets no roofline).  Not 0 or 1: half-precision FMAs issue to the
same pipe, and nvcc moves constants with ``HFMA2.MMA``, so kernels with no MMA read ~1% (H200,
recorded: channel_stats of examples/l3_8 1.04%, bn_relu 0.95%; tests/fixtures/gputools)."""

STALL_MEANING = {
    "long_scoreboard": "waiting on global/local memory",
    "short_scoreboard": "waiting on shared memory or special math",
    "barrier": "waiting at __syncthreads",
    "membar": "waiting on memory fences",
    "mio_throttle": "shared-memory/special-math queue full",
    "lg_throttle": "too many global loads/stores in flight (vectorize)",
    "math_pipe_throttle": "math pipe busy",
    "tex_throttle": "texture/L1 queue full",
    "wait": "fixed-latency dependencies",
    "not_selected": "eligible but another warp issued (enough parallelism)",
    "no_instruction": "instruction cache misses",
    "imc_miss": "constant cache misses",
    "branch_resolving": "resolving branches",
    "dispatch_stall": "dispatch stalls",
    "drain": "draining memory at exit",
    "sleeping": "sleeping",
}


# --- the command ------------------------------------------------------------------------------

def find_ncu() -> str | None:
    return find_cuda_tool("ncu")


def command(exe: str, log_file: Path, launches: int = MAX_LAUNCHES) -> list[str]:
    """``--clock-control none``: the GPU keeps its clocks (locking them to base would make every
    duration disagree with the timings of the check)."""
    sections = [a for s in SECTIONS for a in ("--section", s)]
    return [exe, "--profile-from-start", "off", "--target-processes", "all", "--clock-control", "none",
            *sections, "--metrics", ",".join(METRICS), "--launch-count", str(launches),
            "--csv", "--page", "raw", "--print-units", "base", "--log-file", str(log_file)]


def counters_admin_only(params: Path = Path("/proc/driver/nvidia/params")) -> bool:
    """The driver restricts GPU counters to CAP_SYS_ADMIN (its default, RmProfilingAdminOnly: 1)."""
    try:
        m = re.search(r"^RmProfilingAdminOnly:\s*(\d+)", params.read_text(), re.M)
    except OSError:
        return False
    return bool(m and m.group(1) != "0")


# --- parsing ncu's raw CSV --------------------------------------------------------------------

_PREFIX = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_UNIT = re.compile(r"^(n|u|m|K|k|M|G|T)?(second|byte|s|B)(/.*)?$")


def unit_scale(unit: str) -> float:
    """Factor from ``unit`` to seconds or bytes (``msecond`` 1e-3, ``Kbyte`` 1e3); 1 otherwise."""
    m = _UNIT.match(unit.strip())
    return _PREFIX[m.group(1) or ""] if m else 1.0


def number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def parse_raw_csv(text: str) -> list[dict[str, tuple[str, str]]]:
    """One dict per kernel launch: metric name -> (value text, unit).  Lines of ncu's own
    (``==PROF==``, ``==WARNING==``) are skipped; every CSV line starts with a quote."""
    rows = list(csv.reader(line for line in text.splitlines() if line.startswith('"')))
    out: list[dict[str, tuple[str, str]]] = []
    header: list[str] | None = None
    units: dict[str, str] = {}
    for r in rows:
        if r and r[0] == "ID":
            header, units = r, {}
            continue
        if header is None or len(r) != len(header):
            continue
        if not r[0].strip():
            units = dict(zip(header, r))
            continue
        out.append({h: (v, units.get(h, "")) for h, v in zip(header, r)})
    return out


def _get(row: dict, name: str, scale: bool = True) -> float | None:
    if name not in row:
        return None
    v, unit = row[name]
    x = number(v)
    return None if x is None else x * (unit_scale(unit) if scale else 1.0)


def _first(row: dict, names) -> float | None:
    for n in names:
        x = _get(row, n)
        if x is not None:
            return x
    return None


def base_name(kernel: str) -> str:
    """``void ns::k<4, float>(const float *, int)`` -> ``k``."""
    s = re.sub(r"^\s*void\s+", "", kernel)
    depth, cut = 0, len(s)
    for i, c in enumerate(s):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            cut = i
            break
    s = s[:cut]
    while "<" in s:  # drop template arguments, innermost first
        s2 = re.sub(r"<[^<>]*>", "", s)
        if s2 == s:
            break
        s = s2
    return s.split("::")[-1].strip() or kernel[:60]


def _by_reason(row: dict, pattern: re.Pattern) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in row:
        m = pattern.match(k)
        x = _get(row, k, scale=False) if m and m.group(1) not in NOT_STALLS else None
        if x is not None:
            out[m.group(1)] = out.get(m.group(1), 0.0) + x
    return out


def stalls(row: dict, top: int = 3) -> list[list]:
    """The ``top`` warp-stall reasons: cycles per issued instruction (WarpStateStats), or the
    share of PC samples where only sampling metrics were collected."""
    found = _by_reason(row, STALL)
    if not found:
        samples = _by_reason(row, STALL_SAMPLES)
        total = sum(samples.values())
        found = {k: 100.0 * v / total for k, v in samples.items()} if total else {}
    best = sorted(found.items(), key=lambda kv: -kv[1])[:top]
    return [[k, round(v, 2)] for k, v in best if v > 0]


def kernel_profile(row: dict, sources_text: str = "") -> KernelProfile:
    name = row.get("Kernel Name", ("?", ""))[0]
    base = base_name(name)
    tensor = [x for k in row if TENSOR.match(k) for x in [_get(row, k)] if x is not None]
    smem = [_get(row, k) for k in ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic")]
    dram = [_get(row, k) for k in ("dram__bytes_read.sum", "dram__bytes_write.sum")]
    fl = [(_get(row, m), 2.0 if m.endswith("fma_pred_on.sum") else 1.0) for m in FLOP_METRICS]
    t = _get(row, TIME)
    regs = _get(row, "launch__registers_per_thread")
    grid, block = _get(row, "launch__grid_size"), _get(row, "launch__block_size")
    return KernelProfile(
        name=base, yours=bool(sources_text) and re.search(rf"\b{re.escape(base)}\b", sources_text) is not None,
        duration_us=None if t is None else round(t * 1e6, 3),
        grid=str(int(grid)) if grid is not None else row.get("Grid Size", ("", ""))[0],
        block=str(int(block)) if block is not None else row.get("Block Size", ("", ""))[0],
        occupancy_pct=_get(row, OCCUPANCY), theoretical_occupancy_pct=_get(row, THEORETICAL),
        dram_pct=_first(row, DRAM), l2_pct=_get(row, L2), l1_pct=_get(row, L1), sm_pct=_get(row, SM),
        tensor_pct=max(tensor) if tensor else None, registers=None if regs is None else int(regs),
        smem_bytes=int(sum(x for x in smem if x)) if any(x is not None for x in smem) else None,
        stalls=stalls(row),
        dram_bytes=sum(x for x in dram if x) if any(x is not None for x in dram) else None,
        flops=sum(x * w for x, w in fl if x) if any(x is not None for x, _ in fl) else None)


def profiles(text: str, sources_text: str = "", peaks: rl.Peaks | None = None) -> list[KernelProfile]:
    """Every kernel launch in ncu's CSV, with its roofline where the peaks are known."""
    out = []
    for row in parse_raw_csv(text):
        k = kernel_profile(row, sources_text)
        # tensor-core FLOPs are not among the counted instructions: no roofline where they ran
        if peaks is not None and k.duration_us and k.dram_bytes is not None and (k.tensor_pct or 0.0) < TENSOR_BUSY_PCT:
            k.roofline = rl.roofline(k.name, k.duration_us * 1e-3, k.dram_bytes, k.flops or 0.0, peaks)
        out.append(k)
    return out


# --- running it -------------------------------------------------------------------------------

def profile(job_file: Path, seed: int, sources_text: str = "", *, env: dict[str, str] | None = None,
            limits: Limits | None = None, timeout: float = 300.0, peaks: rl.Peaks | None = None) -> NcuReport:
    """ncu on one forward of the job's solution (see the module doc); never raises."""
    t0 = time.perf_counter()
    exe = find_ncu()
    if exe is None:
        return NcuReport(error="ncu (Nsight Compute) is not on the PATH: install the CUDA toolkit's Nsight Compute")
    log = Path(job_file).parent / "ncu.csv"
    lim = limits or Limits()
    keep_caps = counters_admin_only() and os.geteuid() == 0
    lim = replace(lim, loopback=True, drop_caps=lim.drop_caps and not keep_caps)
    try:
        why, runner = run_under(command(exe, log), Path(job_file), seed, env=env, limits=lim, timeout=timeout,
                                warmup=1, profile_range=True, on_build=inline_build.server_for(Path(job_file), timeout))
    except Exception as e:  # noqa: BLE001 - feedback, never a lost result
        return NcuReport(error=f"ncu could not be started: {type(e).__name__}: {e}",
                         seconds=round(time.perf_counter() - t0, 2))
    iso = runner.isolation + (",caps kept (GPU counters are admin-only on this driver)" if keep_caps else "")
    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    keep_log(log)
    kernels = profiles(text, sources_text, peaks)
    error = None
    if not kernels:
        errs = [ln.strip() for ln in text.splitlines() if ln.startswith("==ERROR==")]
        tail = runner.log_tail(600).strip()
        error = (errs[0] if errs else why) or "no kernel ran in the measured forward: nothing for ncu to read"
        if tail and not errs:
            error += f"; last output: {tail[-300:]}"
    elif why:
        error = f"the forward under ncu did not finish cleanly ({why[:300]}); kernels read before that are listed"
    return NcuReport(kernels=kernels, error=error, seconds=round(time.perf_counter() - t0, 2), isolation=iso)


# --- the table --------------------------------------------------------------------------------

def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _group(kernels: list[KernelProfile]) -> list[tuple[KernelProfile, int, float]]:
    """(the slowest launch, launches, total us) per kernel name, slowest total first."""
    groups: OrderedDict[tuple[str, bool], list[KernelProfile]] = OrderedDict()
    for k in kernels:
        groups.setdefault((k.name, k.yours), []).append(k)
    out = []
    for ks in groups.values():
        total = sum(k.duration_us or 0.0 for k in ks)
        out.append((max(ks, key=lambda k: k.duration_us or 0.0), len(ks), total))
    return sorted(out, key=lambda g: -g[2])


def hint(k: KernelProfile) -> str:
    """One sentence on what limits ``k``, from its counters (rules of thumb, not a diagnosis)."""
    d, s, occ, th = k.dram_pct or 0.0, k.sm_pct or 0.0, k.occupancy_pct, k.theoretical_occupancy_pct
    top = k.stalls[0][0] if k.stalls else None
    why = f"; top stall {top} ({STALL_MEANING.get(top, top)})" if top else ""
    if d >= 60 and d >= s:
        return f"DRAM at {d:.0f}% of peak: memory-bound near the roof; only moving fewer bytes helps (fuse, reuse)"
    if s >= 60:
        t = k.tensor_pct
        return (f"SM busy at {s:.0f}%: compute-bound; remove instructions (algebra, cheaper math"
                + (", tensor cores where the precision allows" if not t or t < 10 else "") + ")" + why)
    if th is not None and th < 50:
        return (f"theoretical occupancy {th:.0f}% ({k.registers} registers/thread, {k.smem_bytes} B shared/block): "
                f"resources cap the resident warps" + why)
    if occ is not None and occ < 25:
        return f"achieved occupancy {occ:.0f}%: too few warps (grid {k.grid} x block {k.block})" + why
    return f"neither memory ({d:.0f}%) nor compute ({s:.0f}%) is busy: latency-bound" + why


def table(rep: NcuReport, forward_ms: float | None = None, max_rows: int = 10) -> str:
    """A compact table of ``rep`` (a few hundred tokens for a few kernels; at most ``max_rows``)."""
    if not rep.kernels:
        return f"ncu: {rep.error or 'no kernels'}"
    groups = _group(rep.kernels)
    total = sum(g[2] for g in groups)
    mine = [g for g in groups if g[0].yours]
    head = (f"ncu: {len(rep.kernels)} kernel launch(es) in one forward (first input set), {total:.1f} us on the GPU"
            + (f" of {forward_ms * 1e3:.1f} us timed" if forward_ms else "")
            + f"; yours: {len(mine)} kernel(s), {sum(g[2] for g in mine):.1f} us")
    lines = [head,
             " # kernel                     n      us  occ%/th  dram%  L2%  SM%  TC%  regs  smem_B  roof        top stalls",
             ]
    for i, (k, n, us) in enumerate(groups[:max_rows], 1):
        name = (k.name + ("*" if k.yours else ""))[:26]
        roof = (f"{k.roofline.bound[:3]} {k.roofline.pct_of_roof:.0f}%"
                if k.roofline and k.roofline.pct_of_roof is not None else "-")
        st = ", ".join(f"{r} {v:g}" for r, v in k.stalls[:2]) or "-"
        lines.append(f"{i:>2} {name:<26} {n:>2} {us:>7.1f}  {_pct(k.occupancy_pct):>3}/{_pct(k.theoretical_occupancy_pct):<3}"
                     f"  {_pct(k.dram_pct):>5}  {_pct(k.l2_pct):>3}  {_pct(k.sm_pct):>3}  {_pct(k.tensor_pct):>3}"
                     f"  {k.registers if k.registers is not None else '-':>4}  {k.smem_bytes if k.smem_bytes is not None else '-':>6}"
                     f"  {roof:<10}  {st}")
    if len(groups) > max_rows:
        rest = groups[max_rows:]
        lines.append(f"   ... {len(rest)} more kernel(s), {sum(g[2] for g in rest):.1f} us")
    lines.append("   * = your kernel; occ% achieved/theoretical; dram/L2/SM/TC = % of peak throughput "
                 "(TC: tensor pipes); roof = bound and % of its roofline (none where tensor cores ran); stalls in cycles per issued instruction")
    for k, _, _ in (mine or groups)[:3]:
        lines.append(f"hint {k.name}: {hint(k)}")
    if rep.error:
        lines.append(f"note: {rep.error}")
    return "\n".join(lines)
