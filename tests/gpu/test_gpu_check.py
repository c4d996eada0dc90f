"""GPU tests of the evaluator (run on the device machine: `pytest -m gpu tests/gpu`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
AXPBY = ROOT / "examples" / "cuda_axpby"
KB = Path(os.environ.get("CUDA_AGENT_KERNELBENCH", ROOT.parent / "shared" / "kernelbench" / "kernelbench.jsonl"))


def _check(task, sol, **kw):
    from cuda_agent.sandbox.check import CheckOptions, check

    return check(task, sol, CheckOptions(device="cuda", **kw))


@pytest.fixture(scope="module")
def axpby_task():
    from cuda_agent.tasks import load_file

    return load_file(AXPBY / "task.py")


def _variant(tmp_path: Path, cu_edit=None, py_edit=None) -> Path:
    d = tmp_path / "sol"
    shutil.copytree(AXPBY / "solution", d)
    if cu_edit:
        f = d / "kernels" / "axpby.cu"
        f.write_text(cu_edit(f.read_text()))
    if py_edit:
        f = d / "model_new.py"
        f.write_text(py_edit(f.read_text()))
    return d


def test_axpby_passes_and_is_timed(axpby_task):
    r = _check(axpby_task, AXPBY / "solution")
    assert r.compiled and r.correct, r.error
    assert r.t_gen_ms and r.t_eager_ms and r.t_compile_ms
    assert 0.02 < r.t_gen_ms < 1.0
    assert r.reward in (1.0, 2.0, 3.0)
    assert r.timing.method.startswith("cuda-events")


@pytest.mark.parametrize("ref,sol", [("L1/12", "l1_12_diag_matmul"), ("L2/14", "l2_14_gemm_divide_sum_scaling"),
                                     ("L3/8", "l3_8_resnet_basic_block")])
def test_case_studies_correct(ref, sol):
    if not KB.exists():
        pytest.skip("KernelBench dataset not available")
    from cuda_agent.tasks import resolve

    r = _check(resolve(ref, KB), ROOT / "examples" / sol, timing=False)
    assert r.compiled, r.error
    assert r.correct, r.error


def test_wrong_kernel_is_incorrect(axpby_task, tmp_path):
    sol = _variant(tmp_path, cu_edit=lambda s: s.replace("a * u.x + b * v.x", "a * u.x - b * v.x"))
    r = _check(axpby_task, sol, timing=False)
    assert r.compiled and not r.correct
    assert "outside atol" in r.error


def test_torch_op_in_forward_is_a_violation(axpby_task, tmp_path):
    sol = _variant(tmp_path, py_edit=lambda s: s.replace("return ops.axpby(x, y, self.alpha, self.beta)",
                                                         "return ops.axpby(x, y, self.alpha, 0.0) + self.beta * y"))
    r = _check(axpby_task, sol, timing=False)
    assert not r.correct
    rules = {v.rule for v in r.violations}
    assert "torch-op-in-forward" in rules
    assert any("aten.mul" in v.message or "aten.add" in v.message for v in r.violations)


def test_illegal_address_is_a_crash_verdict_and_next_check_passes(axpby_task, tmp_path):
    sol = _variant(tmp_path, cu_edit=lambda s: s.replace("out[i] = make_float4", "out[i + (1ll << 40)] = make_float4"))
    r = _check(axpby_task, sol, timing=False)
    assert r.compiled and not r.correct
    assert r.verdict.stage in ("forward", "crash"), r.verdict
    assert "illegal" in r.error.lower() or "crash" in r.error.lower() or "killed" in r.error.lower()
    ok = _check(axpby_task, AXPBY / "solution", timing=False)
    assert ok.correct, ok.error


def test_infinite_loop_kernel_times_out(axpby_task, tmp_path):
    sol = _variant(tmp_path, cu_edit=lambda s: s.replace(
        "float4 u = x[i], v = y[i];", "float4 u = x[i], v = y[i]; while (u.x == u.x) { u.y += 1.f; }"))
    r = _check(axpby_task, sol, timing=False, verify_timeout=30)
    assert not r.correct
    assert r.verdict.stage == "timeout"
    ok = _check(axpby_task, AXPBY / "solution", timing=False)
    assert ok.correct, ok.error


def test_rebuild_compiles_only_the_edited_file(tmp_path):
    from cuda_agent.sandbox.build import build

    d = _variant(tmp_path)
    first = build(d / "kernels", "cuda")
    assert first.ok
    f = d / "kernels" / "axpby.cu"
    f.write_text(f.read_text() + "\n// edit\n")
    again = build(d / "kernels", "cuda")
    assert again.ok and again.compiled == ["axpby.cu"]
