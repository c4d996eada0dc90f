"""Compare a candidate's outputs with the reference's: shapes, dtypes, finiteness, tolerances.

Beyond ``allclose`` (|a - b| <= atol + rtol |b|), the relative L2 error
||a - b|| / ||b|| must stay under ``rtol``: an output of zeros (or any output that is only
right where the true values are tiny) fails even when every element is within ``atol``.

Precision honesty (FP32 outputs with a float64 run of the reference): the candidate's
relative-L2 error against float64 may be at most ``precision_factor`` times the FP32
reference's own (floored at ``PRECISION_FLOOR``), so TF32/FP16/BF16 arithmetic in an FP32
task fails even where the 1e-2 tolerance would accept it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# KernelBench's protocol (--rules kernelbench): torch.allclose against the FP32 reference at
# these tolerances (its pinned commit; its v0/v0.1 results used 1e-2 for fp32: --tolerance)
KERNELBENCH_TOLERANCES = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}

# dtype -> (atol, rtol); float32 matches KernelBench / the CUDA Agent harness (1e-2)
TOLERANCES = {
    torch.float64: (1e-5, 1e-5),
    torch.float32: (1e-2, 1e-2),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


PRECISION_FACTOR = 10.0
PRECISION_FLOOR = 1e-6
"""Relative-L2 error floor of the FP32 reference (about 16 units of FP32 round-off)."""


@dataclass
class Comparison:
    ok: bool
    error: str | None
    max_abs_err: float
    max_rel_err: float
    atol: float
    rtol: float
    exploit_class: int | None = None
    precision_ratio: float | None = None
    rel_l2: float | None = None
    """Worst relative L2 error over the outputs (against float64 where it ran)."""
    ref_rel_l2: float | None = None
    """Worst relative L2 error of the low-precision reference itself against its float64 run."""
    ref_max_abs: float | None = None


def tolerances(dtype: torch.dtype, atol: float | None = None, rtol: float | None = None,
               protocol: str = "evaluator") -> tuple[float, float]:
    if protocol == "kernelbench":
        t = KERNELBENCH_TOLERANCES.get(dtype, 0.0)
        a, r = (t, t) if dtype.is_floating_point else (0.0, 0.0)
    else:
        a, r = TOLERANCES.get(dtype, (0.0, 0.0))
    return (a if atol is None else atol, r if rtol is None else rtol)


def compare(outs: list, refs: list, atol: float | None = None, rtol: float | None = None,
            refs64: list | None = None, precision_factor: float | None = PRECISION_FACTOR,
            protocol: str = "evaluator") -> Comparison:
    """``protocol="kernelbench"``: an output passes where KernelBench's ``torch.allclose`` against
    the FP32 reference passes, at its tolerances; beyond that only the named hacks fail (NaN,
    outputs such as zeros that pass only where true values are tiny, reduced precision).

    ``refs64``: the same reference run in float64.  For float32/float16/bfloat16 outputs it
    is the truth the candidate is compared with, and ``atol`` grows to twice the reference's
    own worst error against it, so an honest kernel is never failed for rounding the
    reference also does (cancellation near zero; a library choosing a cruder algorithm at
    odd sizes), while zeros or a wrong function still fail."""
    max_abs = max_rel = 0.0
    ratio: float | None = None
    l2s: dict[str, float] = {}  # worst rel_l2 / ref_rel_l2 / ref_max_abs over the outputs

    def worst(k: str, v: float) -> None:
        l2s[k] = max(l2s.get(k, 0.0), v)

    used = (atol or 0.0, rtol or 0.0)
    if len(outs) != len(refs):
        return Comparison(False, f"forward returned {len(outs)} outputs, the reference returns {len(refs)}",
                          0.0, 0.0, *used)
    for i, (a, b) in enumerate(zip(outs, refs)):
        name = f"output {i}" if len(refs) > 1 else "the output"
        if not isinstance(b, torch.Tensor):
            b = torch.tensor(b)
        if not isinstance(a, torch.Tensor):
            return Comparison(False, f"{name} is not a tensor", max_abs, max_rel, *used)
        if tuple(a.shape) != tuple(b.shape):
            return Comparison(False, f"{name} has shape {tuple(a.shape)}, expected {tuple(b.shape)}",
                              max_abs, max_rel, *used)
        if a.dtype != b.dtype:
            return Comparison(False, f"{name} has dtype {a.dtype}, expected {b.dtype}", max_abs, max_rel, *used)
        at, rt = tolerances(b.dtype, atol, rtol, protocol)
        used = (at, rt)
        if not (b.is_floating_point() or b.is_complex()):
            if not torch.equal(a, b):
                n = int((a != b).sum())
                return Comparison(False, f"{name}: {n} of {b.numel()} elements differ (exact match required "
                                         f"for {b.dtype})", max_abs, max_rel, at, rt)
            continue
        b_fin = torch.isfinite(b)
        if not bool(b_fin.all()):
            return Comparison(False, f"the reference's {name} is not finite: the task is broken", max_abs,
                              max_rel, at, rt)
        a_fin = torch.isfinite(a)
        if not bool(a_fin.all()):
            n = int((~a_fin).sum())
            return Comparison(False, f"{name} has {n} NaN/Inf values (elements a kernel leaves unwritten are "
                                     f"NaN-poisoned during verification)", max_abs, max_rel, at, rt, 6)
        if protocol == "kernelbench" and not torch.allclose(a, b, atol=at, rtol=rt):
            d = (a.double() - b.double()).abs()
            n = int((d > at + rt * b.double().abs()).sum())
            return Comparison(False, f"{name}: {n} of {b.numel()} elements differ from the FP32 reference beyond "
                                     f"allclose(atol={at:g}, rtol={rt:g}) (KernelBench's protocol); max abs "
                                     f"difference {float(d.max()):.3g}", float(d.max()), max_rel, at, rt)
        a64, b64 = a.double(), b.double()
        r64 = refs64[i] if refs64 is not None and i < len(refs64) else None
        own_l2 = None
        if (b.dtype in (torch.float32, torch.float16, torch.bfloat16) and isinstance(r64, torch.Tensor)
                and r64.dtype == torch.float64 and r64.shape == b.shape and bool(torch.isfinite(r64).all())):
            own = float((b64 - r64).abs().max()) if b.numel() else 0.0
            r64_norm = float(r64.norm())
            worst("ref_max_abs", own)
            if r64_norm > 0:
                worst("ref_rel_l2", float((b64 - r64).norm()) / r64_norm)
            if b.dtype == torch.float32 and r64_norm > 0:  # precision honesty: FP32 tasks only
                own_l2 = float((b64 - r64).norm()) / r64_norm
            if protocol != "kernelbench":  # there the FP32 reference is the measure, as KernelBench's
                at = max(at, 2.0 * own)
                b64 = r64
            used = (at, rt)
        diff = (a64 - b64).abs()
        ma = float(diff.max()) if diff.numel() else 0.0
        mr = float((diff / b64.abs().clamp_min(1e-12)).max()) if diff.numel() else 0.0
        max_abs, max_rel = max(max_abs, ma), max(max_rel, mr)
        bad = diff > (at + rt * b64.abs())
        if protocol != "kernelbench" and bool(bad.any()):
            n = int(bad.sum())
            idx = tuple(int(j) for j in torch.nonzero(bad)[0])
            return Comparison(False, f"{name}: {n} of {b.numel()} elements outside atol={at:g}, rtol={rt:g}; "
                                     f"max abs error {ma:.3g}; first at {list(idx)}: got {float(a64[idx]):.6g}, "
                                     f"expected {float(b64[idx]):.6g}", max_abs, max_rel, at, rt)
        ref_norm = float(b64.norm())
        if ref_norm > 0:
            rel_l2 = float((a64 - b64).norm()) / ref_norm
            worst("rel_l2", rel_l2)
            # never below what the FP32 reference itself misses by (cancellation-heavy outputs)
            if rel_l2 > max(rt, (precision_factor or 1.0) * (own_l2 or 0.0)):
                return Comparison(False, f"{name}: relative L2 error {rel_l2:.3g} exceeds {rt:g} although each "
                                         f"element is within atol (outputs such as zeros where the true values "
                                         f"are small do not pass)", max_abs, max_rel, at, rt, 6)
            if own_l2 is not None and precision_factor:
                if protocol == "kernelbench":  # measured against the float64 truth all the same
                    rel_l2 = float((a64 - r64).norm()) / float(r64.norm())
                base = max(own_l2, PRECISION_FLOOR)
                r = rel_l2 / base
                ratio = r if ratio is None else max(ratio, r)
                if r > precision_factor:
                    return Comparison(False, f"{name}: relative L2 error vs a float64 run is {rel_l2:.3g}, {r:.0f}x "
                                             f"the FP32 reference's own ({base:.2g}); at most {precision_factor:g}x "
                                             f"is allowed: an FP32 task needs FP32 accuracy (no TF32/FP16/BF16 "
                                             f"arithmetic or cruder approximations)", max_abs, max_rel, at, rt, 8,
                                      ratio)
    return Comparison(True, None, max_abs, max_rel, *used, precision_ratio=ratio, rel_l2=l2s.get("rel_l2"),
                      ref_rel_l2=l2s.get("ref_rel_l2"), ref_max_abs=l2s.get("ref_max_abs"))
