"""Rooflines: a lower bound on a call's time to flag impossible speedups (class 13), and the
achieved fraction of the device's peaks as feedback (whole forward and, from ncu, per kernel).

The timing loop flushes L2 and rotates over input sets larger than L2, so every call
must bring its inputs in from device memory: reading them once at the device's peak
bandwidth is a floor no honest kernel beats.  Only input bytes count (weights may stay in
L2 between calls, outputs may sit in L2 as writes).  Measured below half that floor, a
result is flagged: the kernel skipped work, or reused results across calls.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

from .results import Roofline

# peak DRAM bandwidth in bytes/s by device-name substring (vendor data sheets)
PEAK_BANDWIDTH = {
    "H200": 4.8e12,
    "H100 SXM": 3.35e12, "H100 80GB HBM3": 3.35e12, "H100 NVL": 3.9e12, "H100 PCIe": 2.0e12, "H100": 2.0e12,
    "GH200": 4.0e12, "B200": 8.0e12, "B100": 8.0e12,
    "A100-SXM4-80GB": 2.04e12, "A100 80GB PCIe": 1.94e12, "A100": 1.555e12,
    "L40S": 0.864e12, "L40": 0.864e12, "L4": 0.3e12, "A10G": 0.6e12, "A10": 0.6e12,
    "RTX 4090": 1.008e12, "RTX 3090": 0.936e12, "V100": 0.9e12, "T4": 0.32e12,
}
FLAG_FRACTION = 0.5


def peak_bandwidth(device_name: str) -> float | None:
    for key in sorted(PEAK_BANDWIDTH, key=len, reverse=True):
        if key in device_name:
            return PEAK_BANDWIDTH[key]
    return None


def input_bound_ms(input_bytes: int, device_name: str) -> float | None:
    bw = peak_bandwidth(device_name)
    if bw is None or input_bytes <= 0:
        return None
    return input_bytes / bw * 1e3


# --- peaks of the device, asked from the device where it can be asked ----------------------

# FP32 lanes per SM by compute capability (architecture whitepapers): the one thing the device
# does not report.  (major, minor) first, then (major, None).
FP32_LANES = {(7, None): 64, (8, 0): 64, (8, None): 128, (9, None): 128, (10, None): 128, (11, None): 128,
              (12, None): 128}


@dataclass(frozen=True)
class Peaks:
    bytes_s: float | None
    flops_s: float | None
    """FP32 on CUDA cores (FMA = 2 FLOPs); tensor cores not counted."""
    source: str


def fp32_lanes(major: int, minor: int) -> int | None:
    return FP32_LANES.get((major, minor), FP32_LANES.get((major, None)))


@functools.lru_cache(maxsize=8)
def gpu_peaks(index: int = 0) -> Peaks:
    """DRAM bandwidth = 2 (double data rate) x memory clock x bus width; FP32 = 2 x SMs x lanes
    x SM clock (the boost clock the device reports).  A data-sheet bandwidth where the device
    does not report its memory clock."""
    import torch

    p = torch.cuda.get_device_properties(index)
    mem_khz, bus = getattr(p, "memory_clock_rate", 0) or 0, getattr(p, "memory_bus_width", 0) or 0
    if mem_khz and bus:
        bw, src = 2.0 * mem_khz * 1e3 * bus / 8, "device properties"
    else:
        bw, src = peak_bandwidth(p.name), "data sheet"
    clk, lanes = getattr(p, "clock_rate", 0) or 0, fp32_lanes(p.major, p.minor)
    flops = 2.0 * p.multi_processor_count * lanes * clk * 1e3 if clk and lanes else None
    return Peaks(bw, flops, src)


@functools.lru_cache(maxsize=1)
def cpu_peaks(mbytes: int = 256) -> Peaks:
    """Memory bandwidth measured with one large copy (read + write), best of 5 (~0.2 s): the
    CPU reports no memory clock.  No FP32 peak (it depends on the vector units in use)."""
    import torch

    n = (mbytes << 20) // 4
    src, dst = torch.ones(n), torch.empty(n)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return Peaks(2.0 * n * 4 / best, None, "measured copy")


def peaks(device: str) -> Peaks:
    if device == "cuda":
        import torch

        return gpu_peaks(torch.cuda.current_device())
    return cpu_peaks()


# --- the roofline of a measured time ------------------------------------------------------

def roofline(scope: str, time_ms: float, nbytes: float, flops: float, pk: Peaks) -> Roofline:
    """Where ``time_ms`` for moving ``nbytes`` and doing ``flops`` sits under the roofs: the
    roof's time is max(bytes / peak bandwidth, FLOPs / peak FLOP/s); the bound is the larger."""
    t = max(time_ms, 1e-9) * 1e-3
    mem_t = nbytes / pk.bytes_s if pk.bytes_s else 0.0
    cmp_t = flops / pk.flops_s if pk.flops_s and flops else 0.0
    roof_t = max(mem_t, cmp_t)
    return Roofline(scope, time_ms, float(nbytes), float(flops), pk.bytes_s, pk.flops_s, nbytes / t, flops / t,
                    "compute" if cmp_t > mem_t else "memory", round(100.0 * roof_t / t, 2) if roof_t else None,
                    pk.source)


def forward_work(model, xs: list) -> tuple[float, float]:
    """(bytes, FLOPs) one forward must at least cost: inputs, parameters and buffers read once,
    outputs written once; FLOPs as torch's FlopCounterMode counts them on the reference
    (matrix products, convolutions, attention; element-wise work is not counted, so the
    compute roof is a lower bound)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    def size(ts) -> int:
        return sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor))

    state = list(model.parameters()) + list(model.buffers())
    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        with counter:
            out = model(*xs)
    outs = [out] if isinstance(out, torch.Tensor) else [o for o in (out or []) if isinstance(o, torch.Tensor)]
    return float(size(xs) + size(state) + size(outs)), float(counter.get_total_flops())


def forward_roofline(model, xs: list, time_ms: float, device: str) -> Roofline | None:
    """The whole forward's roofline; None where it cannot be had (it is feedback, never a verdict)."""
    try:
        nbytes, flops = forward_work(model, xs)
        return roofline("forward", time_ms, nbytes, flops, peaks(device))
    except Exception:  # noqa: BLE001
        return None


def describe(r: Roofline) -> str:
    """One line: ``41% of the memory roof: 1.97 TB/s of 4.80 TB/s, 0.25 FLOP/B ...``."""
    def rate(x: float | None, unit: str) -> str:
        if not x:
            return "?"
        for k, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
            if x >= f:
                return f"{x / f:.3g} {k}{unit}"
        return f"{x:.3g} {unit}"

    pct = f"{r.pct_of_roof:.0f}% of the {r.bound} roof" if r.pct_of_roof is not None else f"{r.bound}-bound"
    text = f"{pct}: {rate(r.achieved_bytes_s, 'B/s')} of {rate(r.peak_bytes_s, 'B/s')}"
    if r.flops:
        ridge = (r.peak_flops_s / r.peak_bytes_s) if r.peak_flops_s and r.peak_bytes_s else None
        text += (f", {rate(r.achieved_flops_s, 'FLOP/s')}" + (f" of {rate(r.peak_flops_s, 'FLOP/s')} FP32" if
                 r.peak_flops_s else "") + f"; {r.flops / r.bytes:.3g} FLOP/B" + (f" (ridge {ridge:.3g})" if ridge else ""))
    if r.bound == "compute" and (r.pct_of_roof or 0) > 100:
        text += " (above the FP32 CUDA-core peak: tensor cores or lower precision)"
    return text + f" [peaks: {r.peak_source}]"
