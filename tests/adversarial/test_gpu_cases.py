"""The adversarial suite on a GPU (the device machine: ``pytest -m gpu tests/adversarial``):
CUDA attacks (hidden streams and threads, persisting L2, TF32/FP16 in FP32 tasks, cuBLAS
outside GEMM, super-batching, caching, partial writes) rejected for their reasons, and
legitimate CUDA solutions (synchronised streams, in-place on own buffers, cuBLAS GEMM, cuDNN
convolution, bf16 tensor cores, grid-stride on odd sizes) passing."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from .suite import all_cases, run_case

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CASES = all_cases("cuda")


def _libraries() -> set[str]:
    from cuda_agent.sandbox.build import toolchain

    flags = " ".join(toolchain("cuda").link_flags)
    return {name for name, mark in (("cublas", "-lcublas"), ("cudnn", "libcudnn")) if mark in flags}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gpu_case(case):
    missing = set(case.needs) - _libraries()
    if missing:
        pytest.skip(f"the CUDA toolchain here does not link {', '.join(sorted(missing))}")
    out = run_case(case)
    log = os.environ.get("CUDA_AGENT_ADVERSARIAL_LOG")  # the GPU run keeps every outcome for the report
    if log:
        with open(log, "a") as fh:
            fh.write(json.dumps(dataclasses.asdict(out), default=str) + "\n")
    if out.isolation_unavailable:
        pytest.skip(f"isolation unavailable on this machine (the check warned: {out.warnings}): {out.why}")
    assert out.met, out.report()
