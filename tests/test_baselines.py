"""The baseline cache never serves an implausible time, and its key follows the measuring code."""

from __future__ import annotations

import json
import math
import time

from cuda_agent.sandbox import baselines
from cuda_agent.sandbox.timing import Recipe

QUICK = Recipe(warmup_ms=5.0, min_samples=5, max_samples=20, budget_s=2.0)


def test_plausible_times():
    assert baselines.plausible({"eager_ms": 1.2, "compile_ms": 0.8, "eager_n": 400})
    for bad in (9.45e15, float("nan"), math.inf, 0.0, -1.0):
        assert not baselines.plausible({"eager_ms": 1.0, "compile_ms": bad})
    assert not baselines.plausible({"eager_n": 3})  # no time at all


def test_a_garbage_cached_baseline_is_measured_again(example_task):
    key = baselines._key(example_task, "cpu", QUICK, 2, False)
    con = baselines._db()
    try:  # what an old, broken measurement left in a user's cache
        con.execute("INSERT OR REPLACE INTO baseline VALUES (?,?,?)",
                    (key, json.dumps({"eager_ms": 9451430000240180.0, "eager_n": 400}), 0.0))
        con.commit()
    finally:
        con.close()
    got = baselines.get(example_task, "cpu", QUICK, 2, compile=False)
    assert got["cached"] is False and "error" not in got
    assert 0 < got["eager_ms"] < 1e4
    again = baselines.get(example_task, "cpu", QUICK, 2, compile=False)
    assert again["cached"] is True and again["eager_ms"] == got["eager_ms"]


def test_the_key_changes_with_the_measuring_code(example_task, monkeypatch):
    before = baselines._key(example_task, "cpu", QUICK, 2, False)
    monkeypatch.setattr(baselines, "_code_digest", lambda: "another-timing-code")
    assert baselines._key(example_task, "cpu", QUICK, 2, False) != before


def test_the_compile_baseline_uses_compiler_caches_of_its_own(example_task, tmp_path, monkeypatch):
    """/tmp/torchinductor_* and ~/.triton are writable by earlier candidates: the baseline's
    torch.compile must neither read nor fill the shared compiler cache.  Its own caches are kept
    (by the judge, under the cache root) and seed the task's next measurement, which then
    compiles nothing again."""
    shared = tmp_path / "shared-inductor-cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(shared))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "shared-triton-cache"))
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))  # no kept copy yet
    got = baselines.measure(example_task, "cpu", QUICK, 2, compile=True)
    assert "error" not in got, got
    assert 0 < got["compile_ms"] < 1e4 and 0 < got["eager_ms"] < 1e4
    assert not shared.exists() or not any(shared.rglob("*")), sorted(map(str, shared.rglob("*")))[:5]
    assert got["compilers"] == "compiled"
    kept = baselines.compilers_store(example_task, "cpu")
    assert any((kept / "inductor" / "fxgraph").rglob("*")), sorted(map(str, kept.rglob("*")))[:5]
    again = baselines.measure(example_task, "cpu", QUICK, 2, compile=True)
    assert "error" not in again, again
    assert again["compilers"] == "reused" and 0 < again["compile_ms"] < 1e4
    assert not shared.exists() or not any(shared.rglob("*"))


def test_kept_compiler_caches_leave_autotuning_out_and_are_written_once(example_task, tmp_path, monkeypatch):
    """An autotuning choice made on a busy machine would slow every later compile baseline: it
    is not kept.  The first complete copy stays; a second judge's copy is dropped."""
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))
    job = tmp_path / "job"
    (job / "triton" / "ab").mkdir(parents=True)
    (job / "triton" / "ab" / "k.py").write_text("first")
    (job / "triton" / "ab" / "k.best_config").write_text('{"num_warps": 1}')
    (job / "nv").mkdir()
    (job / "nv" / "jit.bin").write_text("driver JIT cache")
    assert baselines.compilers_in(example_task, "cpu", tmp_path / "seed0") is False
    baselines.compilers_out(example_task, "cpu", job)
    kept = baselines.compilers_store(example_task, "cpu")
    assert (kept / "triton" / "ab" / "k.py").read_text() == "first"
    assert not list(kept.rglob("*.best_config")) and not (kept / "nv").exists()
    (job / "triton" / "ab" / "k.py").write_text("second")
    baselines.compilers_out(example_task, "cpu", job)
    assert (kept / "triton" / "ab" / "k.py").read_text() == "first"
    assert not [p for p in kept.parent.iterdir() if p != kept]  # no half-written copy left
    seed = tmp_path / "seed1"
    assert baselines.compilers_in(example_task, "cpu", seed) is True
    assert (seed / "triton" / "ab" / "k.py").read_text() == "first"


def test_a_cached_baseline_serves_comparable_conditions_only(example_task):
    """The cache answers a candidate timed under the conditions it was taken under; a candidate
    timed on a much busier (or quieter) machine gets baselines measured beside it."""
    first = baselines.get(example_task, "cpu", QUICK, 3, compile=False)
    assert "error" not in first, first
    key = baselines._key(example_task, "cpu", QUICK, 3, False)
    con = baselines._db()
    try:  # pin the cached entry's conditions, so that the test does not depend on this machine's load
        val = {**{k: v for k, v in first.items() if k not in ("cached", "remeasured", "cached_conditions")},
               "conditions": {"cpu": 1.0}, "stable": True}
        con.execute("INSERT OR REPLACE INTO baseline VALUES (?,?,?)", (key, json.dumps(val), 0.0))
        con.commit()
    finally:
        con.close()
    same = baselines.get(example_task, "cpu", QUICK, 3, compile=False, under={"cpu": 1.05})
    assert same["cached"] is True and same["eager_ms"] == val["eager_ms"]
    busy = baselines.get(example_task, "cpu", QUICK, 3, compile=False, under={"cpu": 4.0})
    assert busy["cached"] is False and busy["remeasured"] is True
    assert busy["cached_conditions"] == {"cpu": 1.0}


def test_a_baseline_measured_after_a_candidates_timing_serves_it_instead_of_a_new_measurement(example_task,
                                                                                              monkeypatch):
    """On a busy machine every judge finds the quiet cached baseline not comparable.  The first to
    measure shares its measurement with the judges whose candidates were timed before it began,
    under comparable conditions; a candidate timed after it gets a measurement of its own."""
    measured = []
    real = baselines.measure
    monkeypatch.setattr(baselines, "measure", lambda *a, **k: measured.append(1) or real(*a, **k))
    key = baselines._key(example_task, "cpu", QUICK, 5, False)
    first = baselines.get(example_task, "cpu", QUICK, 5, compile=False)
    assert "error" not in first, first
    con = baselines._db()
    try:  # the cached baseline as if taken on a machine so much quieter that no probe here is comparable
        val = {k: v for k, v in first.items() if k not in ("cached", "remeasured", "cached_conditions")}
        con.execute("INSERT OR REPLACE INTO baseline VALUES (?,?,?)",
                    (key, json.dumps({**val, "conditions": {"cpu": 0.01}}), 0.0))
        con.commit()
    finally:
        con.close()
    timed = time.time()  # the end of a candidate's timing
    under = baselines.conditions("cpu")
    measured.clear()
    a = baselines.get(example_task, "cpu", QUICK, 5, compile=False, under=under, since=timed)
    assert "error" not in a and a["cached"] is False and a["remeasured"] is True and not a.get("shared"), a
    waited = []
    b = baselines.get(example_task, "cpu", QUICK, 5, compile=False, under=a["conditions"], since=timed,
                      quiet=lambda: waited.append(1))
    assert b.get("shared") is True and b["eager_ms"] == a["eager_ms"] and b["remeasured"] is True, b
    assert measured == [1] and waited == []  # one measurement for both, and b did not wait for the device
    c = baselines.get(example_task, "cpu", QUICK, 5, compile=False, under=a["conditions"], since=time.time())
    assert not c.get("shared") and measured == [1, 1], c  # timed after a's measurement began: its own
    busier = {k: v * 3 for k, v in a["conditions"].items()}
    d = baselines.get(example_task, "cpu", QUICK, 5, compile=False, under=busier, since=timed)
    assert not d.get("shared") and measured == [1, 1, 1], d  # other conditions: its own as well
    # one that is measured while this judge waits for the device (another judge held it) serves it too
    timed = time.time()
    other = []
    e = baselines.get(example_task, "cpu", QUICK, 5, compile=False, under=a["conditions"], since=timed,
                      quiet=lambda: other.append(baselines.get(example_task, "cpu", QUICK, 5, compile=False,
                                                               under=a["conditions"], since=timed)))
    assert not other[0].get("shared") and e.get("shared") is True and e["eager_ms"] == other[0]["eager_ms"], e
    assert measured == [1, 1, 1, 1]
