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

from dataclasses import dataclass, field

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
    w = _Worst(used=(atol or 0.0, rtol or 0.0))
    if len(outs) != len(refs):
        return w.fail(f"forward returned {len(outs)} outputs, the reference returns {len(refs)}")
    for i, (a, b) in enumerate(zip(outs, refs)):
        name = f"output {i}" if len(refs) > 1 else "the output"
        if not isinstance(b, torch.Tensor):
            b = torch.tensor(b)
        r64 = refs64[i] if refs64 is not None and i < len(refs64) else None
        failed = _form_failure(name, a, b, w, atol, rtol, protocol)
        if failed is None and (b.is_floating_point() or b.is_complex()):
            failed = _value_failure(name, a, b, r64, w, precision_factor, protocol)
        if failed is not None:
            return failed
    return Comparison(True, None, w.max_abs, w.max_rel, *w.used, precision_ratio=w.ratio,
                      rel_l2=w.l2s.get("rel_l2"), ref_rel_l2=w.l2s.get("ref_rel_l2"),
                      ref_max_abs=w.l2s.get("ref_max_abs"))


@dataclass
class _Worst:
    """What ``compare`` carries from one output to the next: the worst errors so far and the
    tolerances in use (reported with a failure)."""
    used: tuple[float, float]
    max_abs: float = 0.0
    max_rel: float = 0.0
    ratio: float | None = None
    l2s: dict[str, float] = field(default_factory=dict)  # worst rel_l2 / ref_rel_l2 / ref_max_abs

    def worst(self, k: str, v: float) -> None:
        self.l2s[k] = max(self.l2s.get(k, 0.0), v)

    def fail(self, error: str, exploit_class: int | None = None, **kw) -> Comparison:
        return Comparison(False, error, kw.pop("max_abs", self.max_abs), self.max_rel, *self.used,
                          exploit_class, **kw)


def _form_failure(name: str, a, b: torch.Tensor, w: _Worst, atol: float | None, rtol: float | None,
                  protocol: str) -> Comparison | None:
    """Type, shape, dtype, exact equality of integer outputs, finite values; the first that
    fails (None: the values are to be compared).  Sets the output's tolerances in ``w``."""
    if not isinstance(a, torch.Tensor):
        return w.fail(f"{name} is not a tensor")
    if tuple(a.shape) != tuple(b.shape):
        return w.fail(f"{name} has shape {tuple(a.shape)}, expected {tuple(b.shape)}")
    if a.dtype != b.dtype:
        return w.fail(f"{name} has dtype {a.dtype}, expected {b.dtype}")
    w.used = tolerances(b.dtype, atol, rtol, protocol)
    if not (b.is_floating_point() or b.is_complex()):
        if not torch.equal(a, b):
            n = int((a != b).sum())
            return w.fail(f"{name}: {n} of {b.numel()} elements differ (exact match required for {b.dtype})")
        return None
    if not bool(torch.isfinite(b).all()):
        return w.fail(f"the reference's {name} is not finite: the task is broken")
    a_fin = torch.isfinite(a)
    if not bool(a_fin.all()):
        n = int((~a_fin).sum())
        return w.fail(f"{name} has {n} NaN/Inf values (elements a kernel leaves unwritten are NaN-poisoned "
                      f"during verification)", 6)
    return None


def _value_failure(name: str, a: torch.Tensor, b: torch.Tensor, r64, w: _Worst, precision_factor: float | None,
                   protocol: str) -> Comparison | None:
    """A floating-point output's values against the reference's (and its float64 run ``r64``):
    allclose under KernelBench's protocol, else each element within tolerance; then the
    relative L2 error and, for FP32 tasks, precision honesty."""
    at, rt = w.used
    if protocol == "kernelbench" and not torch.allclose(a, b, atol=at, rtol=rt):
        d = (a.double() - b.double()).abs()
        n = int((d > at + rt * b.double().abs()).sum())
        return w.fail(f"{name}: {n} of {b.numel()} elements differ from the FP32 reference beyond "
                      f"allclose(atol={at:g}, rtol={rt:g}) (KernelBench's protocol); max abs "
                      f"difference {float(d.max()):.3g}", max_abs=float(d.max()))
    a64, b64 = a.double(), b.double()
    own_l2 = None
    if (b.dtype in (torch.float32, torch.float16, torch.bfloat16) and isinstance(r64, torch.Tensor)
            and r64.dtype == torch.float64 and r64.shape == b.shape and bool(torch.isfinite(r64).all())):
        own = float((b64 - r64).abs().max()) if b.numel() else 0.0
        r64_norm = float(r64.norm())
        w.worst("ref_max_abs", own)
        if r64_norm > 0:
            w.worst("ref_rel_l2", float((b64 - r64).norm()) / r64_norm)
        if b.dtype == torch.float32 and r64_norm > 0:  # precision honesty: FP32 tasks only
            own_l2 = float((b64 - r64).norm()) / r64_norm
        if protocol != "kernelbench":  # there the FP32 reference is the measure, as KernelBench's
            at = max(at, 2.0 * own)
            b64 = r64
        w.used = (at, rt)
    diff = (a64 - b64).abs()
    ma = float(diff.max()) if diff.numel() else 0.0
    mr = float((diff / b64.abs().clamp_min(1e-12)).max()) if diff.numel() else 0.0
    w.max_abs, w.max_rel = max(w.max_abs, ma), max(w.max_rel, mr)
    bad = diff > (at + rt * b64.abs())
    if protocol != "kernelbench" and bool(bad.any()):
        n = int(bad.sum())
        idx = tuple(int(j) for j in torch.nonzero(bad)[0])
        return w.fail(f"{name}: {n} of {b.numel()} elements outside atol={at:g}, rtol={rt:g}; max abs error "
                      f"{ma:.3g}; first at {list(idx)}: got {float(a64[idx]):.6g}, expected {float(b64[idx]):.6g}")
    ref_norm = float(b64.norm())
    if ref_norm <= 0:
        return None
    rel_l2 = float((a64 - b64).norm()) / ref_norm
    w.worst("rel_l2", rel_l2)
    # never below what the FP32 reference itself misses by (cancellation-heavy outputs)
    if rel_l2 > max(rt, (precision_factor or 1.0) * (own_l2 or 0.0)):
        return w.fail(f"{name}: relative L2 error {rel_l2:.3g} exceeds {rt:g} although each element is within "
                      f"atol (outputs such as zeros where the true values are small do not pass)", 6)
    if own_l2 is not None and precision_factor:
        if protocol == "kernelbench":  # measured against the float64 truth all the same
            rel_l2 = float((a64 - r64).norm()) / float(r64.norm())
        base = max(own_l2, PRECISION_FLOOR)
        r = rel_l2 / base
        w.ratio = r if w.ratio is None else max(w.ratio, r)
        if r > precision_factor:
            return w.fail(f"{name}: relative L2 error vs a float64 run is {rel_l2:.3g}, {r:.0f}x the FP32 "
                          f"reference's own ({base:.2g}); at most {precision_factor:g}x is allowed: an FP32 task "
                          f"needs FP32 accuracy (no TF32/FP16/BF16 arithmetic or cruder approximations)", 8,
                          precision_ratio=w.ratio)
    return None
