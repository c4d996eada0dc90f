"""Each filter with tasks that must pass and tasks that must fail, run in real evaluation processes."""

from __future__ import annotations

import pytest

from cuda_agent.synth.evaluate import FilterConfig, stochastic_names
from cuda_agent.synth.runner import EvalWorker


@pytest.fixture(scope="module")
def good(make_task):
    return make_task("return torch.relu(self.linear(x))")


def test_good_task_passes_every_filter_including_compile(cpu_worker, good):
    v = cpu_worker.evaluate(good)
    assert v.ok, v.reason
    assert v.eager_ms is not None and v.eager_ms > 0
    assert v.compile_ms is not None
    assert v.out_shapes == [[64, 512]]


@pytest.mark.parametrize("body,code", [
    ("return nn.functional.dropout(self.linear(x), p=0.5, training=True)", "stochastic"),
    ("return self.linear(x) + torch.nn.init.trunc_normal_(torch.empty_like(x))", "nondeterministic"),
    ("return x * 0.0 + 1.0", "constant"),
    ("return self.linear.weight * 2.0", "input_independent"),
    ("return torch.log(x - 100.0)", "non_finite"),
    ("return x[:, :0]", "output"),
    ("raise ValueError('broken task')", "eager"),
])
def test_bad_tasks_are_rejected_with_reason(cpu_worker, make_task, body, code):
    v = cpu_worker.evaluate(make_task(body))
    assert not v.ok
    assert v.code == code, (v.code, v.reason)
    assert v.reason


def test_task_that_breaks_under_torch_compile(cpu_worker, make_task):
    # A custom operator without a fake (meta) implementation runs eagerly but cannot be traced.
    src = make_task("return twice(self.linear(x))").replace("class Model", (
        '@torch.library.custom_op("synthtest::twice", mutates_args=())\n'
        'def twice(x: torch.Tensor) -> torch.Tensor:\n'
        '    return x * 2\n\n\nclass Model'))
    v = cpu_worker.evaluate(src)
    assert not v.ok and v.code == "compile_error", v.reason
    assert "torch.compile failed" in v.reason


def test_task_whose_compiled_output_differs(cpu_worker, make_task):
    src = make_task("if torch.compiler.is_compiling():\n            return self.linear(x) * 2.0\n"
               "        return self.linear(x)")
    v = cpu_worker.evaluate(src)
    assert not v.ok and v.code == "compile_mismatch", v.reason


def test_runtime_band_rejects_too_fast_and_too_slow(make_task, good):
    task = make_task
    tiny = task("return x * 2.0", batch=2, features=4)
    with EvalWorker(FilterConfig(device="cpu", band_ms=(1.0, 1000.0), compile=False)) as w:
        v = w.evaluate(tiny)
        assert not v.ok and v.code == "too_fast" and v.eager_ms < 1.0
        ok = w.evaluate(task("return torch.relu(self.linear(x)) + self.linear(x).exp()", batch=1024,
                             features=1024))
        assert ok.ok, ok.reason
    with EvalWorker(FilterConfig(device="cpu", band_ms=(0.0, 0.001), compile=False)) as w:
        v = w.evaluate(good)
        assert not v.ok and v.code == "too_slow"


def test_crash_and_hang_give_verdicts_and_the_worker_recovers(make_task, good):
    task = make_task
    with EvalWorker(FilterConfig(device="cpu", compile=False, timeout_s=3, band_ms=(0.0, 1e6))) as w:
        v = w.evaluate(task("import os; os._exit(7)"))
        assert not v.ok and v.code == "crash" and "exit code 7" in v.reason
        v = w.evaluate(task("import time; time.sleep(60)"))
        assert not v.ok and v.code == "timeout"
        v = w.evaluate("this is not python")
        assert not v.ok and v.code == "load"
        assert w.evaluate(good).ok


def test_static_stochastic_scan_ignores_seeded_init_and_inputs(make_task, good):
    assert stochastic_names(good) == []
    src = make_task("return self.linear(x) + self.w").replace(
        "self.linear = nn.Linear(features, features)",
        "self.linear = nn.Linear(features, features)\n        self.w = nn.Parameter(torch.randn(features))")
    assert stochastic_names(src) == []
    assert stochastic_names(src.replace("nn.Linear(features, features)\n", "nn.Dropout(0.1)\n", 1)) == ["Dropout"]


def test_timing_waits_for_the_device_timing_lock(tmp_path, good):
    import fcntl

    lock = tmp_path / "timing.lock"
    cfg = FilterConfig(device="cpu", compile=False, timeout_s=6, band_ms=(0.0, 1e6), timing_lock=str(lock))
    with EvalWorker(cfg) as w:
        with open(f"{lock}.all", "a") as f:  # another process is timing on this device
            fcntl.flock(f, fcntl.LOCK_EX)
            v = w.evaluate(good)
            assert not v.ok and v.code == "timeout" and "time phase" in v.reason, v.reason
        v = w.evaluate(good)
        assert v.ok, v.reason
