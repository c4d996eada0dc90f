"""The meta-tensor GPU cost model: exact byte/FLOP counts on simple tasks, views cost nothing,
no estimate where meta execution is impossible, and the H200 calibration against the KernelBench
eager times measured on the H200 (notes/device.md; the model's constants were fitted on them,
so this pins the calibration rather than validating it independently)."""

from __future__ import annotations

import json

import pytest

from cuda_agent.synth.gpucost import H200, count_task, estimate_ms

SRC = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        BODY

def get_inputs():
    return [torch.randn(256, 512), torch.randn(512, 1024)]

def get_init_inputs():
    return []
'''


def body(b: str) -> str:
    return SRC.replace("BODY", b)


def test_matmul_and_elementwise_counts_are_exact():
    c = count_task(body("return a @ b"))
    assert c.kernels == 1 and c.flops == 2 * 256 * 512 * 1024
    assert c.bytes == 4 * (256 * 512 + 512 * 1024 + 256 * 1024)
    c = count_task(body("return torch.relu(a) * 2.0"))
    assert c.kernels == 2 and c.flops == 0 and c.bytes == 2 * 2 * 4 * 256 * 512


def test_views_launch_no_kernel():
    assert count_task(body("return a.reshape(-1).view(512, 256).t()[1:]")).kernels == 0
    assert count_task(body("return a.t().reshape(-1)")).kernels == 1  # reshape of a transpose copies
    assert count_task(body("return a.t().contiguous()")).kernels == 1


def test_no_estimate_when_meta_cannot_run_it():
    assert count_task(body("return a[a > 0]")) is None  # data-dependent output shape
    assert count_task("this is not python") is None


def test_roofline_is_bandwidth_or_compute_bound():
    big_copy = body("return a + 1").replace("torch.randn(256, 512)", "torch.randn(16384, 16384)")
    ms = estimate_ms(big_copy)
    assert ms == pytest.approx(2 * 4 * 16384**2 / H200.bandwidth * 1e3 + H200.launch_s * 1e3, rel=1e-6)


MEASURED_H200 = {(1, 1): 2.703, (1, 12): 0.062, (1, 19): 3.040, (1, 23): 6.346, (2, 1): 3.926,
                 (2, 14): 2.835, (3, 8): 1.126}


def test_h200_calibration_on_kernelbench(kernelbench_path):
    rows = {(r["level"], r["problem_id"]): r["code"] for r in map(json.loads, open(kernelbench_path))}
    for key, measured in MEASURED_H200.items():
        est = estimate_ms(rows[key])
        assert est is not None and 0.6 <= est / measured <= 1.5, (key, est, measured)
