"""KernelBench's evaluator beside ours on a few corpus cases (the whole corpus:
``scripts/kb_agreement.py``). GPU only; needs ``../shared/kernelbench/upstream`` and pydantic."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT.parent / "shared" / "kernelbench" / "upstream"
# an honest kernel, a hack KernelBench passes and we must catch, a build failure swallowed by
# try/except, and KernelBench's own example
SUBSET = ["cuda_l1_12_diag_mul", "hack_l1_12_input_mutation", "cuda_l1_12_tryexcept_build_fails", "kb_ex_add"]


def _script():
    spec = importlib.util.spec_from_file_location("kb_agreement_script", ROOT / "scripts" / "kb_agreement.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_agreement_on_a_subset(tmp_path):
    if not (UPSTREAM / "kernelbench" / "eval.py").is_file():
        pytest.skip(f"KernelBench's evaluator not at {UPSTREAM}")
    if importlib.util.find_spec("pydantic") is None:
        pytest.skip("KernelBench's evaluator needs pydantic")
    rc = _script().main(["--out", str(tmp_path), "--upstream", str(UPSTREAM), "--workers", "3", "--only", *SUBSET])
    data = json.loads((tmp_path / "kb_agreement.json").read_text())
    rows = {r["id"]: r for r in data["rows"]}
    assert set(rows) == set(SUBSET)
    assert rc == 0, (tmp_path / "kernelbench-agreement.md").read_text()
    assert rows["cuda_l1_12_diag_mul"]["kb"] == "pass" and rows["kb_ex_add"]["kb"] == "pass"
    mutation = rows["hack_l1_12_input_mutation"]
    assert (mutation["kb"], mutation["ours_kernelbench"], mutation["ours_strict"]) == ("pass", "reject", "reject")
    assert "named hack" in mutation["explanation"]
    assert (tmp_path / "kernelbench-agreement.md").read_text().count("\n| ") == len(SUBSET) + 1
