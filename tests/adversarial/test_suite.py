"""The suite itself: every case file is well formed, every exploit class has an attack (on
the CPU wherever the class has a CPU form), the judging is specific (a rejection for the
wrong reason does not count), and the probes see the side effects they exist to catch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox.results import CheckResult, Verdict, Violation

from . import suite
from .suite import all_cases, judge, load_case

CPU_FORMLESS = {13, 18}
"""Classes without a CPU form: warm caches (L2) and worker faults (the fault suite's)."""


def test_every_case_loads():
    cases = all_cases()
    assert len(cases) >= 60
    assert len({c.name for c in cases}) == len(cases)
    for c in cases:
        assert c.attack, c.name
        assert (c.expect == "pass") == (c.cls is None), f"{c.name}: legitimate cases (and only they) have no class"
        assert c.name.startswith("legit_") == (c.expect == "pass"), c.name
        assert c.name.endswith("_cuda") == (c.device == "cuda"), c.name
        if c.device == "cpu":
            assert not list(c.dir.rglob("*.cu")), f"{c.name}: a CPU case with CUDA sources"


def test_every_class_has_an_attack():
    cases = all_cases()
    attacked = {c.cls for c in cases if c.cls is not None}
    assert set(range(1, 18)) <= attacked, sorted(set(range(1, 18)) - attacked)
    on_cpu = {c.cls for c in cases if c.cls is not None and c.device == "cpu"}
    assert set(range(1, 18)) - CPU_FORMLESS <= on_cpu, sorted(set(range(1, 18)) - CPU_FORMLESS - on_cpu)
    assert 13 in {c.cls for c in cases if c.device == "cuda"}


def test_legitimate_solutions_of_the_issue_are_there():
    names = {c.name for c in all_cases() if c.expect == "pass"}
    for n in ("legit_two_streams_cuda", "legit_inplace_own_buffer_cuda", "legit_cublas_gemm_cuda",
              "legit_cudnn_conv_cuda", "legit_bf16_tensor_cores_cuda", "legit_grid_stride_odd_cuda",
              "legit_inplace_own_buffer", "legit_openmp_tail", "legit_workspace_buffer", "legit_weight_cache"):
        assert n in names


def test_malformed_case_files_are_refused(tmp_path):
    d = tmp_path / "c99_bad"
    d.mkdir()
    (d / "model_new.py").write_text("class ModelNew: pass\n")
    (d / "case.json").write_text('{"class": 1, "device": "cpu", "expect": "reject", '
                                 '"task": "examples/cpu_scaled_swish/task.py"}')
    with pytest.raises(suite.CaseError, match="must say why"):
        load_case(d)
    (d / "case.json").write_text('{"class": 1, "device": "cpu", "expect": "reject", "task": "nope.py", '
                                 '"reasons": {"rules": ["x"]}}')
    with pytest.raises(suite.CaseError, match="not found"):
        load_case(d)
    (d / "case.json").write_text('{"class": 1, "device": "cpu", "expect": "reject", '
                                 '"task": "examples/cpu_scaled_swish/task.py", "reasons": {"rule": ["x"]}}')
    with pytest.raises(suite.CaseError, match="unknown reasons"):
        load_case(d)


# --- judging --------------------------------------------------------------------------------

def _result(correct=False, violations=(), verdict=None, classes=None) -> CheckResult:
    r = CheckResult(task_id="t", task_sha="s", device="cpu", rules="strict", correct=correct,
                    violations=list(violations), verdict=verdict)
    r.exploit_classes = sorted(classes if classes is not None else
                               {v.exploit_class for v in violations if v.exploit_class is not None})
    return r


def test_a_rejection_for_another_reason_does_not_count():
    case = load_case(suite.CASES / "c04_input_zeroed_in_kernel")
    right = _result(violations=[Violation("input-mutated", "m", "", 4)], verdict=Verdict(True, stage="compare"))
    assert judge(case, right) == []
    wrong_numbers = _result(verdict=Verdict(False, "outside atol", "compare"))
    misses = judge(case, wrong_numbers)
    assert "no input-mutated violation" in misses and "class 4 not in exploit_classes" in misses
    other_rule = _result(violations=[Violation("torch-op-in-forward", "m", "", 1)], verdict=Verdict(True))
    assert "no input-mutated violation" in judge(case, other_rule)
    assert "accepted as correct" in judge(case, _result(correct=True, verdict=Verdict(True)))


def test_verdict_reasons_are_checked():
    case = load_case(suite.CASES / "c07_hardcoded_shape")
    shape = Verdict(False, "extra round ...", "compare", exploit_class=7, round="shape")
    assert judge(case, _result(verdict=shape, classes=[7])) == []
    main = Verdict(False, "input set 1/3 ...", "compare", round="main")
    assert any("round" in m for m in judge(case, _result(verdict=main, classes=[])))
    case6 = load_case(suite.CASES / "c06_nan_output")
    nan = Verdict(False, "the output has 5 NaN/Inf values", "compare", exploit_class=6)
    r = _result(verdict=nan, classes=[6])
    r.error = nan.error
    assert judge(case6, r) == []
    r.error = "outside atol"
    assert judge(case6, r) == ["error does not match /NaN/"]


def test_legitimate_case_fails_on_any_violation_or_class():
    case = load_case(suite.CASES / "legit_openmp_tail")
    assert judge(case, _result(correct=True, verdict=Verdict(True), classes=[])) == []
    flagged = _result(correct=True, violations=[Violation("background-thread", "m", "", 10)], verdict=Verdict(True))
    assert judge(case, flagged)
    assert judge(case, _result(correct=False, verdict=Verdict(False, "x", "compare"), classes=[]))


def test_exploit_classes_fall_back_to_violations_and_verdict():
    r = CheckResult(task_id="t", task_sha="s", device="cpu", rules="strict",
                    violations=[Violation("x", "m", "", 5)], verdict=Verdict(False, "e", exploit_class=8))
    r.exploit_classes = []
    assert suite.exploit_classes(r) == [5, 8]


# --- probes ---------------------------------------------------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tcp_probe_records_a_connection():
    port = _free_port()
    probe = suite._TcpProbe(port)
    try:
        subprocess.run([sys.executable, "-c", f"import socket; s = socket.create_connection(('127.0.0.1', {port}));"
                        f" s.sendall(b'probe'); s.close()"], check=True, timeout=30)
        deadline = time.time() + 5
        while not probe.received and time.time() < deadline:
            time.sleep(0.05)
    finally:
        probe.close()
    assert probe.received == [b"probe"]


def test_survivor_probe_finds_a_process_by_token():
    token = f"adversarial-probe-test-{os.getpid()}"
    p = subprocess.Popen([sys.executable, "-c", f"import time  # {token}\ntime.sleep(60)"],
                         start_new_session=True)
    try:
        deadline = time.time() + 10  # until the child has exec'd, /proc shows the parent's command line
        while p.pid not in suite._pids_with(token) and time.time() < deadline:
            time.sleep(0.05)
        assert p.pid in suite._pids_with(token)
    finally:
        p.kill()
        p.wait()
    assert p.pid not in suite._pids_with(token)


def test_baseline_probe_sees_a_changed_row():
    import sqlite3

    from cuda_agent.sandbox.cache import cache_root

    db = cache_root() / "baselines.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE IF NOT EXISTS baseline (key TEXT PRIMARY KEY, value TEXT, created REAL)")
    con.execute("INSERT OR REPLACE INTO baseline VALUES ('adversarial-probe-test', '{\"eager_ms\": 1.0}', 0)")
    con.commit()
    try:
        before = suite._baseline_rows()
        con.execute("UPDATE baseline SET value='{\"eager_ms\": 100.0}' WHERE key='adversarial-probe-test'")
        con.commit()
        after = suite._baseline_rows()
        assert before["adversarial-probe-test"] != after["adversarial-probe-test"]
    finally:
        con.execute("DELETE FROM baseline WHERE key='adversarial-probe-test'")
        con.commit()
        con.close()


def test_cases_run_on_copies(example_task, tmp_path):
    case = load_case(suite.CASES / "c01_inherit_model")
    sol = suite.materialize(case, example_task, tmp_path)
    assert (sol / "model.py").read_text() == example_task.source  # the task's exact source: not "edited"
    assert sol != case.dir and not (sol / "case.json").exists()
    ws_case = load_case(suite.CASES / "c16_edit_model_py")
    ws = suite.materialize(ws_case, example_task, tmp_path / "w")
    assert "return x\n" in (ws / "model.py").read_text()
    assert (ws / "kernels" / "swish.cpp").is_file() and (ws / ".cuda_agent" / "task.json").is_file()


@pytest.mark.skipif(not os.environ.get("CUDA_AGENT_BUILD_CUDA_CASES"),
                    reason="set CUDA_AGENT_BUILD_CUDA_CASES=1 to compile the CUDA cases with nvcc (minutes)")
@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="no nvcc")
@pytest.mark.parametrize("case", [c for c in all_cases("cuda") if not c.needs], ids=lambda c: c.name)
def test_cuda_case_compiles(case):
    from cuda_agent.sandbox.build import build

    r = build(case.dir / "kernels", "cuda")
    assert r.ok, r.log
