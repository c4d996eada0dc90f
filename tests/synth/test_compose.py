"""Seed crawl, programmatic composition and the op-count mix."""

from __future__ import annotations

import pytest

from cuda_agent.synth.compose import PAPER_MIX, get_composer, parse_mix, quotas, register_composer
from cuda_agent.synth.crawl import crawl, seed_library
from cuda_agent.synth.program import ComposeError
from cuda_agent.tasks import validate_source


@pytest.fixture(scope="module")
def composer():
    return get_composer("programmatic", library=seed_library(include_transformers=False), profile="cpu")


def test_crawl_has_at_least_300_validated_seeds_and_reports_skips():
    rep = crawl(include_transformers=False)
    assert len(rep.seeds) >= 300, len(rep.seeds)
    cats = rep.by_category()
    for c in ("elementwise", "activation", "reduction", "matmul", "conv", "pooling", "normalization", "indexing",
              "scan", "attention", "loss"):
        assert cats.get(c, 0) > 0, c
    assert rep.skipped["torch.nn.Dropout"] == "stochastic"
    assert rep.skipped["torch.nn.LazyLinear"].startswith("lazy")
    md = rep.to_markdown()
    assert "## By category" in md and "stochastic" in md


@pytest.mark.parametrize("bucket", ["1", "2", "3", "4", "5"])
def test_programmatic_composer_builds_runnable_tasks(composer, bucket):
    import torch

    for seed in range(3):
        cand = composer.compose(bucket, seed)
        assert cand.op_count == int(bucket)
        assert cand.composer == "programmatic" and cand.seed == seed
        validate_source(cand.source)
        ns: dict = {}
        exec(compile(cand.source, "<task>", "exec"), ns)
        torch.manual_seed(0)
        model = ns["Model"](*ns["get_init_inputs"]())
        out = model(*ns["get_inputs"]())
        assert isinstance(out, torch.Tensor)
        assert list(out.shape) == cand.extra["output_shape"]
        for op in cand.ops:
            assert op in cand.source or cand.source.count("\n") > 10


def test_composition_is_reproducible_per_seed(composer):
    assert composer.compose("2", 123).source == composer.compose("2", 123).source
    assert composer.compose("2", 123).source != composer.compose("2", 124).source


def test_mix_parsing_and_quotas():
    assert abs(sum(PAPER_MIX.values()) - 1.0) < 1e-9
    q = quotas(6000, parse_mix(None))
    assert sum(q.values()) == 6000 and q["2"] == 5026
    m = parse_mix("1=1,2=3")
    assert m == {"1": 0.25, "2": 0.75}
    assert quotas(10, m) == {"1": 2, "2": 8} or quotas(10, m) == {"1": 3, "2": 7}
    with pytest.raises(ValueError):
        parse_mix("7=1")
    with pytest.raises(ValueError):
        parse_mix("2")


def test_registry_accepts_user_composers():
    @register_composer("test-fixed")
    class Fixed:
        name = "test-fixed"

        def __init__(self, **kw):
            self.kw = kw

        def buckets(self):
            return ("1",)

        def compose(self, bucket, seed):
            raise ComposeError("nothing")

    c = get_composer("test-fixed", library=[], profile="cpu")
    assert c.kw["profile"] == "cpu"
    with pytest.raises(KeyError):
        get_composer("no-such-composer")


@pytest.fixture(scope="module")
def gpu_composer():
    return get_composer("programmatic", library=seed_library(include_transformers=False), profile="gpu")


def test_gpu_sizes_are_scaled_into_the_band_by_the_cost_model(gpu_composer):
    from cuda_agent.synth.gpucost import estimate_ms

    ests, base, scaled = [], [], 0
    for seed in range(24):
        cand = gpu_composer.compose("2", seed)
        m = cand.extra
        assert {"target_gpu_ms", "est_gpu_ms", "batch_base"} <= set(m)
        if m["est_gpu_ms"] is None:
            continue
        assert m["est_gpu_ms"] == pytest.approx(estimate_ms(cand.source))  # recorded estimate is the task's
        ests.append(m["est_gpu_ms"])
        base.append(m["est_gpu_ms_base"])
        scaled += m["input_shape"][0] != m["batch_base"]
    in_band = sum(1.0 <= e <= 100.0 for e in ests) / len(ests)
    base_in_band = sum(1.0 <= e <= 100.0 for e in base) / len(base)
    assert len(ests) >= 18 and scaled >= 6
    assert in_band >= 0.75 and in_band > base_in_band, (in_band, base_in_band)
    # same seed, same scaled task
    assert gpu_composer.compose("2", 5).source == gpu_composer.compose("2", 5).source


def test_cpu_profile_is_not_rescaled(composer):
    cand = composer.compose("2", 7)
    assert "est_gpu_ms" not in cand.extra and composer.target_ms is None
