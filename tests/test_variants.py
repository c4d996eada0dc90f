"""Other-size task variants (the extra verification round) and the roofline bound."""

import json

import pytest

from cuda_agent.sandbox.roofline import input_bound_ms, peak_bandwidth
from cuda_agent.sandbox.variants import size_variants

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * self.w

batch = 16
features = 64
unused = 7

def get_inputs():
    return [torch.randn(batch, features)]

def get_init_inputs():
    return [features]
'''


def test_only_sizes_read_by_get_inputs_alone_change():
    vs = list(size_variants(TASK))
    assert [d for d, _ in vs] == ["batch=16->15", "batch=16->8"]
    ns = {}
    exec(vs[0][1], ns)
    assert ns["batch"] == 15 and ns["features"] == 64 and ns["unused"] == 7
    assert tuple(ns["get_inputs"]()[0].shape) == (15, 64)


def test_no_free_size_and_bad_source_give_nothing():
    assert list(size_variants(TASK.replace("[torch.randn(batch, features)]", "[torch.randn(4, features)]"))) == []
    assert list(size_variants("def (:")) == []
    derived = TASK.replace("unused = 7", "half = batch // 2")
    assert list(size_variants(derived)) == []  # batch feeds another constant: pinned


def test_kernelbench_problems_mostly_have_a_free_size(kernelbench_jsonl):
    rows = [json.loads(line) for line in open(kernelbench_jsonl)]
    have = sum(1 for r in rows if next(iter(size_variants(r["code"])), None))
    assert have / len(rows) > 0.8
    l2_14 = next(r for r in rows if r["level"] == 2 and r["problem_id"] == 14)
    assert next(iter(size_variants(l2_14["code"])))[0] == "batch_size=1024->1023"


def test_roofline_bound():
    assert peak_bandwidth("NVIDIA H200") == 4.8e12
    assert peak_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert peak_bandwidth("Some CPU") is None
    assert input_bound_ms(48 * 10**9, "NVIDIA H200") == pytest.approx(10.0)
    assert input_bound_ms(0, "NVIDIA H200") is None
