"""compare.py: shapes, dtypes, finiteness, tolerance boundaries, the relative-L2 rule, exact ints."""

from __future__ import annotations

import math

import pytest
import torch

from cuda_agent.sandbox.compare import TOLERANCES, compare, tolerances


def ref(n=1000, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g).to(dtype)


def test_identical_passes_with_zero_error():
    b = ref()
    c = compare([b.clone()], [b])
    assert c.ok and c.error is None
    assert c.max_abs_err == 0.0 and c.max_rel_err == 0.0
    assert (c.atol, c.rtol) == TOLERANCES[torch.float32] == (1e-2, 1e-2)


def test_output_count_mismatch():
    b = ref()
    c = compare([b, b], [b])
    assert not c.ok and "returned 2 outputs, the reference returns 1" in c.error


def test_shape_mismatch():
    b = ref().view(10, 100)
    c = compare([b.reshape(100, 10)], [b])
    assert not c.ok and c.error == "the output has shape (100, 10), expected (10, 100)"


def test_dtype_mismatch():
    b = ref()
    c = compare([b.double()], [b])
    assert not c.ok and "dtype torch.float64, expected torch.float32" in c.error
    c = compare([b.half()], [b])
    assert not c.ok and "dtype torch.float16" in c.error


def test_output_names_for_several_outputs():
    b = ref()
    c = compare([b, b * 2], [b, b])
    assert not c.ok and c.error.startswith("output 1:")


def test_not_a_tensor():
    c = compare(["hello"], [ref()])
    assert not c.ok and "is not a tensor" in c.error


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_never_pass(bad):
    b = ref()
    a = b.clone()
    a[3] = bad
    a[7] = bad
    # even with huge tolerances
    c = compare([a], [b], atol=1e9, rtol=1e9)
    assert not c.ok and "has 2 NaN/Inf values" in c.error


def test_nan_in_reference_is_a_broken_task():
    b = ref()
    b[0] = math.nan
    c = compare([b.clone()], [b])
    assert not c.ok and "is not finite: the task is broken" in c.error


def test_tolerance_boundary_elementwise():
    # |a - b| <= atol + rtol*|b| passes; one ulp-ish beyond fails.  float64 keeps the arithmetic exact.
    b = torch.full((1000,), 2.0, dtype=torch.float64)
    atol, rtol = 1e-3, 1e-3
    limit = atol + rtol * 2.0  # 0.003
    a = b.clone()
    a[0] += limit * 0.999
    c = compare([a], [b], atol=atol, rtol=rtol)
    assert c.ok, c.error
    assert c.max_abs_err == pytest.approx(limit * 0.999)
    assert c.max_rel_err == pytest.approx(limit * 0.999 / 2.0)
    a[5] = 2.0 + limit * 1.01
    c = compare([a], [b], atol=atol, rtol=rtol)
    assert not c.ok
    assert "1 of 1000 elements outside atol=0.001, rtol=0.001" in c.error
    assert "first at [5]" in c.error and "expected 2" in c.error


def test_float32_default_tolerance_is_1e_2():
    b = torch.ones(100)
    a = b.clone()
    a[0] += 0.019  # 0.019 <= 0.01 + 0.01*1 (and relative L2 0.0019)
    ok = compare([a], [b])
    assert ok.ok, ok.error
    a[0] = 1.021
    bad = compare([a], [b])
    assert not bad.ok and "1 of 100 elements outside atol=0.01, rtol=0.01" in bad.error


def test_relative_l2_rule_is_stricter_than_allclose_for_uniform_error():
    # documented in compare.py: beyond allclose, ||a-b||/||b|| <= rtol.  A uniform 1.9% error
    # passes allclose (atol + rtol*|b| = 2%) but not the L2 rule.
    b = torch.ones(100)
    c = compare([b + 0.019], [b])
    assert not c.ok and "relative L2 error 0.019 exceeds 0.01" in c.error
    assert compare([b + 0.009], [b]).ok


def test_explicit_tolerances_override_defaults():
    assert tolerances(torch.float32) == (1e-2, 1e-2)
    assert tolerances(torch.float32, atol=1e-4) == (1e-4, 1e-2)
    assert tolerances(torch.bfloat16) == (2e-2, 2e-2)
    assert tolerances(torch.int32) == (0.0, 0.0)
    b = torch.ones(100)
    assert not compare([b + 1e-3], [b], atol=1e-4, rtol=1e-4).ok


def test_all_zeros_fail_where_true_values_are_small():
    # every element is within atol (values ~1e-3 << 1e-2), but the output carries no information
    b = ref() * 1e-3
    assert float(b.abs().max()) < 1e-2
    c = compare([torch.zeros_like(b)], [b])
    assert not c.ok
    assert "relative L2 error" in c.error and "zeros" in c.error
    # a genuinely close answer of the same small values passes
    assert compare([b * (1 + 1e-4)], [b]).ok


def test_zero_reference_and_zero_output_pass():
    b = torch.zeros(10)
    assert compare([torch.zeros(10)], [b]).ok
    assert compare([torch.full((10,), 1e-3)], [b]).ok  # within atol, reference norm 0: L2 rule n/a


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.uint8])
def test_integer_outputs_must_match_exactly(dtype):
    b = torch.arange(20).to(dtype) if dtype != torch.bool else torch.arange(20) % 2 == 0
    assert compare([b.clone()], [b]).ok
    a = b.clone()
    a[4] = (~a[4]) if dtype == torch.bool else a[4] + 1
    c = compare([a], [b], atol=10.0, rtol=10.0)  # tolerances do not apply to integers
    assert not c.ok and f"1 of 20 elements differ (exact match required for {dtype})" in c.error


def test_scalar_reference_and_python_number():
    c = compare([torch.tensor(3.0)], [3.0])
    assert c.ok, c.error
    c = compare([torch.tensor(4.0)], [3.0])
    assert not c.ok


def test_max_errors_accumulate_over_outputs():
    b1, b2 = torch.ones(10), torch.ones(10)
    c = compare([b1 + 0.001, b2 + 0.004], [b1, b2])
    assert c.ok
    assert c.max_abs_err == pytest.approx(0.004, rel=1e-3)
    assert c.max_rel_err == pytest.approx(0.004, rel=1e-3)


def test_empty_tensors():
    assert compare([torch.empty(0, 3)], [torch.empty(0, 3)]).ok


def test_precision_honesty_against_float64():
    """FP32 outputs are held to the FP32 reference's own error vs float64, times a factor:
    FP16-rounded inputs pass the 1e-2 tolerance but not the precision check."""
    torch.manual_seed(0)
    a = torch.randn(256, 64, dtype=torch.float64)
    b = torch.randn(64, 128, dtype=torch.float64)
    r64 = a @ b
    r32 = a.float() @ b.float()
    honest = (a.float().flip(1) @ b.float().flip(0))  # another summation order: still FP32
    low = a.half().float() @ b.half().float()  # FP16 inputs, FP32 accumulate: within 1e-2
    ok = compare([honest], [r32], refs64=[r64])
    assert ok.ok and ok.precision_ratio is not None and ok.precision_ratio < 10
    bad = compare([low], [r32], refs64=[r64])
    assert not bad.ok and bad.exploit_class == 8 and "float64" in bad.error and bad.precision_ratio > 10
    assert compare([low], [r32], refs64=[r64], precision_factor=None).ok  # the check can be turned off
    assert compare([low], [r32]).ok  # without a float64 run there is nothing to hold it to


def test_nan_and_zero_failures_name_their_exploit_class():
    ref = torch.full((1000,), 1e-3)
    assert compare([torch.zeros(1000)], [ref]).exploit_class == 6
    nan = ref.clone()
    nan[3] = float("nan")
    assert compare([nan], [ref]).exploit_class == 6
    assert compare([ref * 3], [torch.full((1000,), 1.0)]).exploit_class is None  # plainly wrong


def test_numerical_error_report_against_float64_and_the_reference_own():
    """rel L2 of the candidate and the FP32 reference's own error, both against the float64 run."""
    torch.manual_seed(0)
    x = torch.randn(4096, dtype=torch.float64)
    truth = x.exp()
    ref32 = x.float().exp()  # the FP32 reference: off from the truth by round-off only
    cand = (truth * (1 + 1e-7)).float()
    c = compare([cand], [ref32], refs64=[truth])
    assert c.ok
    own = float((ref32.double() - truth).norm() / truth.norm())
    assert c.ref_rel_l2 == pytest.approx(own) and 0 < c.ref_rel_l2 < 1e-6
    assert c.ref_max_abs == pytest.approx(float((ref32.double() - truth).abs().max()))
    assert c.rel_l2 == pytest.approx(float((cand.double() - truth).norm() / truth.norm()))
    plain = compare([cand], [ref32])  # no float64 run: no reference error to report
    assert plain.ok and plain.ref_rel_l2 is None and plain.rel_l2 is not None
