"""ncu and compute-sanitizer through check() on the GPU (issue 17): the planted out-of-bounds read
and race (tests/gpu/planted) are found with file:line, the three case-study solutions profile
and pass memcheck.  With $CUDA_AGENT_GPUTOOLS_OUT set, the outputs are written there as samples
for docs/benchmarks/ (scripts/gpu_run.sh OUT gputools)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ROOT = Path(__file__).resolve().parents[2]
PLANTED = ROOT / "tests" / "gpu" / "planted"
KB = Path(os.environ.get("CUDA_AGENT_KERNELBENCH", ROOT.parent / "shared" / "kernelbench" / "kernelbench.jsonl"))
OUT = os.environ.get("CUDA_AGENT_GPUTOOLS_OUT")


def _check(task, sol, **kw):
    from cuda_agent.sandbox.check import CheckOptions, check

    return check(task, sol, CheckOptions(device="cuda", timing=False, baselines=False, **kw))


def _line(f: Path, text: str) -> int:
    return next(i for i, ln in enumerate(f.read_text().splitlines(), 1) if text in ln)


def _sample(name: str, r) -> None:
    if OUT:
        from cuda_agent.sandbox import ncu, sanitizer

        d = Path(OUT)
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.json").write_text(json.dumps(r.to_dict(), indent=1))
        parts = [sanitizer.describe(r.sanitizer)] if r.sanitizer else []
        if r.ncu is not None:
            parts.append(ncu.table(r.ncu))
        (d / f"{name}.txt").write_text("\n".join(parts) + "\n")


def _task(name: str):
    from cuda_agent.tasks import load_file

    return load_file(PLANTED / name / "task.py")


def test_planted_out_of_bounds_read_passes_verification_but_not_memcheck():
    t, sol = _task("oob"), PLANTED / "oob" / "solution"
    plain = _check(t, sol)
    assert plain.compiled and plain.correct, plain.error  # right numbers: verification alone rewards it
    r = _check(t, sol, sanitize=("memcheck",))
    _sample("sanitize-planted-oob", r)
    rep = r.sanitizer[0]
    assert rep.ran and rep.errors >= 1, rep
    line = _line(sol / "kernels" / "oob.cu", "x[i + 1]")
    assert any(f.where == f"kernels/oob.cu:{line}" and f.kernel == "double_peek" for f in rep.findings), rep.findings
    assert not r.correct and r.reward == -1.0
    assert any(v.rule == "memcheck-error" and v.where == f"kernels/oob.cu:{line}" for v in r.violations)


def test_planted_race_is_found_by_racecheck_with_file_line():
    t, sol = _task("race"), PLANTED / "race" / "solution"
    r = _check(t, sol, extra_round=False, sanitize=("racecheck",))
    _sample("sanitize-planted-race", r)
    race = r.sanitizer[0]
    assert race.ran and race.errors >= 1, race
    f = sol / "kernels" / "race.cu"
    lines = {f"kernels/race.cu:{_line(f, 'sh[t] = v;')}", f"kernels/race.cu:{_line(f, 'sh[t + s]')}"}
    seen = " ".join(x.where + " " + x.detail for x in race.findings)
    assert any(ln in seen for ln in lines), race.findings


@pytest.mark.parametrize("ref,sol", [("L1/12", "l1_12_diag_matmul"), ("L2/14", "l2_14_gemm_divide_sum_scaling"),
                                     ("L3/8", "l3_8_resnet_basic_block")])
def test_case_studies_profile_with_ncu_and_pass_memcheck(ref, sol):
    if not KB.exists():
        pytest.skip("KernelBench dataset not available")
    from cuda_agent.sandbox import ncu
    from cuda_agent.tasks import resolve

    r = _check(resolve(ref, KB), ROOT / "examples" / sol, extra_round=False, ncu=True, sanitize=("memcheck",))
    _sample(f"profile-ncu-{sol}", r)
    assert r.correct, r.error
    mem = r.sanitizer[0]
    assert mem.ran and mem.errors == 0, mem
    assert r.ncu is not None and r.ncu.kernels, r.ncu
    mine = [k for k in r.ncu.kernels if k.yours]
    assert mine, [k.name for k in r.ncu.kernels]
    k = max(mine, key=lambda k: k.duration_us or 0)
    assert k.duration_us and k.duration_us > 0 and k.registers and k.dram_pct is not None and k.sm_pct is not None
    assert k.occupancy_pct is not None and k.stalls, k
    assert len(ncu.table(r.ncu)) / 2 < 1500  # tokens as characters / 2, a generous count for this text
