"""Work hidden on a stream that forward never joins (exploit class 10) is rejected in
verification, while the same kernel on a side stream that is joined passes: before each verified
forward the runner fills the GPU on a low-priority stream, so the unjoined kernel is still pending
when the highest-priority snapshot of the outputs is taken (runner._occupy)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "tests" / "kb_corpus" / "cuda" / "hack_l1_12_side_stream.py"


@pytest.mark.parametrize("rules", ["kernelbench", "strict"])
def test_unjoined_side_stream_is_rejected_and_joined_one_passes(task, rules, tmp_path):
    from cuda_agent.sandbox.check import CheckOptions, check

    joined = tmp_path / "joined.py"
    src = HACK.read_text()
    honest = src.replace("        return out", "        torch.cuda.current_stream().wait_stream(self.side)\n        return out")
    assert honest != src
    joined.write_text(honest)
    o = CheckOptions(device="cuda", rules=rules, timing=False, baselines=False)
    good = check(task, joined, o)
    assert good.correct, good.error
    bad = check(task, HACK, o)
    assert not bad.correct
    assert "unjoined-stream" in {v.rule for v in bad.violations}, (bad.error, bad.violations)
    assert 10 in bad.exploit_classes
