"""Single-file solutions in CuPy and Triton on the GPU: the launches of their kernels are counted
as the solution's own code, so `--rules strict` (which needs some to run) passes them, and the
result counts their launches."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CORPUS = Path(__file__).resolve().parents[1] / "kb_corpus" / "cuda"


@pytest.mark.parametrize("lang,file", [("cupy", "cupy_l1_12_diag_mul.py"), ("triton", "triton_l1_12_diag_mul.py")])
def test_kernel_language_counts_under_strict(task, lang, file):
    from cuda_agent.sandbox.check import CheckOptions, check

    if importlib.util.find_spec(lang) is None:
        pytest.skip(f"{lang} is not installed")
    res = check(task, CORPUS / file, CheckOptions(device="cuda", rules="strict", timing=False, baselines=False))
    assert res.correct, (res.error, res.violations)
    assert res.custom_calls and res.custom_calls > 0, res.custom_calls
    assert "no-custom-code" not in {v.rule for v in res.violations}
