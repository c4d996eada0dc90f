"""GPU faults of catalog.py (examples/cuda_axpby): a kernel that never ends, an illegal
address, a device-side assert and a 200 GB cudaMalloc each get a clear verdict, and the next
check of the good example passes on a clean CUDA context.  Run on the device machine:
``pytest -m gpu tests/faults``."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from faults.catalog import GPU_FAULTS, missing_features, run_fault  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", GPU_FAULTS, ids=[f.name for f in GPU_FAULTS])
def test_gpu_fault_gets_a_clear_verdict_and_the_next_check_passes(fault, tmp_path):
    why = missing_features(fault)
    if why:
        pytest.skip(why)
    out = run_fault(fault, tmp_path)
    assert out.stage in fault.stages, out.error
    assert re.search(fault.text, out.error or ""), out.error
    assert out.problems == [], out.problems
    assert out.recovered and out.recovery_s is not None


def test_gpu_visible_inside_the_namespaces(tmp_path):
    """The isolated runner still sees the GPU (device nodes, driver, no capability needed)."""
    import json
    import subprocess
    import sys

    from cuda_agent.sandbox.isolation import Limits, launcher_env, plan_for, probe

    job = tmp_path / "job.json"
    job.write_text("{}")
    plan = plan_for(job, Limits())
    assert not probe().namespaces or "netns" in plan.describe()
    code = ("import torch; x = torch.ones(1 << 20, device='cuda'); torch.cuda.synchronize(); "
            "print(torch.cuda.get_device_name(), float(x.sum()))")
    p = json.loads(plan.to_json())
    r = subprocess.run([sys.executable, "-m", "cuda_agent.sandbox.launcher", json.dumps(p), "--",
                        sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=launcher_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith(str(float(1 << 20))), r.stdout
