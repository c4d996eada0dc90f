"""The adversarial suite: attacking and legitimate-but-unusual solutions, each run through
``check()`` and held to the reason it must be rejected for (or to passing cleanly).

A case is a directory ``cases/<name>/`` holding a solution (``model_new.py``, ``kernels/``)
and ``case.json``:

``class``     the exploits.md class it attacks (null for a legitimate solution)
``device``    ``cpu`` or ``cuda``
``expect``    ``reject`` (rejected for the reasons below), ``pass`` (correct, no violation,
              no exploit class) or ``contained`` (the verdict is free, the probe decides)
``task``      the task file, relative to the case directory or else to the repository root
``rules``     rules profile (``strict`` / ``kernelbench``)
``timing``    run the timing phase too (timing-phase defences); ``baselines`` likewise
``attack``    one sentence: what the solution does
``reasons``   what the rejection must show, all of them:
              ``rules`` (violation rule ids, all present), ``classes`` (all in
              ``CheckResult.exploit_classes``), ``any_class`` (at least one of them),
              ``stage`` / ``round`` / ``verdict_class`` (the verdict's), ``verdict_correct``
              (the numbers were right, a rule was not), ``error`` (regex on the error)
``model_py``  write the task's source as ``model.py`` next to the solution
``workspace`` create a real workspace for the task, put the solution in it, then apply
              ``edits`` ({file: {"replace": [old, new]} | {"append": text} | "delete"})
``probe``     a side effect that must not happen: ``{"network": PORT}`` (nothing reaches a
              local TCP server), ``{"survivor": TOKEN}`` (no process whose command line holds
              TOKEN outlives the check), ``{"baseline_db": true}`` (the cached baselines are
              unchanged)
``options``   extra ``CheckOptions`` fields (``limits`` as a dict of ``isolation.Limits`` fields)

Cases are copied to a temporary directory before they run, so an attack that writes files
only dirties its copy.  ``run_case`` returns an ``Outcome`` (one row of the report of
``scripts/run_adversarial.py``); the pytest files assert ``Outcome.met``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import stat
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "cases"
EXPECTS = ("reject", "pass", "contained")
REASON_KEYS = {"rules", "classes", "any_class", "stage", "round", "verdict_class", "verdict_correct", "error"}
CASE_KEYS = {"class", "device", "expect", "task", "rules", "timing", "baselines", "attack", "reasons",
             "model_py", "workspace", "probe", "options", "needs"}


@dataclass
class Case:
    name: str
    dir: Path
    cls: int | None
    device: str
    expect: str
    task: Path
    rules: str = "strict"
    timing: bool = False
    baselines: bool = False
    attack: str = ""
    reasons: dict[str, Any] = field(default_factory=dict)
    model_py: bool = False
    workspace: dict[str, Any] | None = None
    probe: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    needs: list[str] = field(default_factory=list)
    """Libraries the build needs beyond the CUDA runtime (``cublas``, ``cudnn``)."""


class CaseError(ValueError):
    """A malformed case.json."""


def load_case(d: Path) -> Case:
    meta = json.loads((d / "case.json").read_text())
    unknown = set(meta) - CASE_KEYS
    if unknown:
        raise CaseError(f"{d.name}: unknown keys {sorted(unknown)}")
    if meta.get("expect") not in EXPECTS:
        raise CaseError(f"{d.name}: expect must be one of {EXPECTS}")
    if meta.get("device") not in ("cpu", "cuda"):
        raise CaseError(f"{d.name}: device must be cpu or cuda")
    reasons = meta.get("reasons", {})
    if set(reasons) - REASON_KEYS:
        raise CaseError(f"{d.name}: unknown reasons {sorted(set(reasons) - REASON_KEYS)}")
    if meta["expect"] == "reject" and not reasons:
        raise CaseError(f"{d.name}: a rejected case must say why (reasons)")
    if meta["expect"] == "contained" and not meta.get("probe"):
        raise CaseError(f"{d.name}: a contained case needs a probe")
    task = d / meta["task"] if (d / meta["task"]).is_file() else ROOT / meta["task"]
    if not task.is_file():
        raise CaseError(f"{d.name}: task {meta['task']} not found")
    if not (d / "model_new.py").is_file():
        raise CaseError(f"{d.name}: no model_new.py")
    return Case(name=d.name, dir=d, cls=meta.get("class"), device=meta["device"], expect=meta["expect"],
                task=task, rules=meta.get("rules", "strict"), timing=bool(meta.get("timing", False)),
                baselines=bool(meta.get("baselines", False)), attack=meta.get("attack", ""),
                reasons=reasons, model_py=bool(meta.get("model_py", False)), workspace=meta.get("workspace"),
                probe=meta.get("probe", {}), options=meta.get("options", {}), needs=meta.get("needs", []))


def all_cases(device: str | None = None) -> list[Case]:
    cases = [load_case(d) for d in sorted(CASES.iterdir()) if (d / "case.json").is_file()]
    return [c for c in cases if device is None or c.device == device]


# --- options ------------------------------------------------------------------------------

def quick_recipe():
    """A short timing recipe: enough samples for the spot checks and the cross-checks."""
    from cuda_agent.sandbox.timing import Recipe

    return Recipe(warmup_ms=50, sample_ms=1.0, min_samples=20, max_samples=80, round_size=10, target=0.02,
                  budget_s=4.0)


def options_for(case: Case):
    from cuda_agent.sandbox.check import CheckOptions

    kw: dict[str, Any] = dict(device=case.device, rules=case.rules, timing=case.timing,
                              baselines=case.baselines, compile_baseline=False, n_sets=3,
                              verify_timeout=180, time_timeout=180, recipe=quick_recipe())
    kw.update(case.options)
    if isinstance(kw.get("limits"), dict):  # e.g. {"isolate": false}: the defence behind the sandbox
        from cuda_agent.sandbox.isolation import Limits

        kw["limits"] = Limits(**kw["limits"])
    return CheckOptions(**kw)


# --- materializing a case -------------------------------------------------------------------

def _copy_solution(case: Case, dst: Path) -> None:
    for p in case.dir.iterdir():
        if p.name in ("case.json", "task.py", "__pycache__"):
            continue
        if p.is_dir():
            shutil.copytree(p, dst / p.name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(p, dst / p.name)


def _apply_edits(ws: Path, edits: dict[str, Any]) -> None:
    for rel, how in edits.items():
        f = ws / rel
        if f.exists():
            f.chmod(f.stat().st_mode | stat.S_IWUSR)
        if how == "delete":
            f.unlink()
        elif "replace" in how:
            old, new = how["replace"]
            text = f.read_text()
            if old not in text:
                raise CaseError(f"edit of {rel}: {old!r} not found")
            f.write_text(text.replace(old, new))
        elif "append" in how:
            f.write_text(f.read_text() + how["append"])
        else:
            raise CaseError(f"edit of {rel}: unknown edit {how!r}")


def materialize(case: Case, task, into: Path) -> Path:
    """Copy the case's solution to ``into`` (a workspace when the case asks for one)."""
    if case.workspace is not None:
        from cuda_agent.sandbox.workspace import create_workspace

        ws = create_workspace(task, into / "ws", device=case.device)
        shutil.rmtree(ws / "kernels")
        _copy_solution(case, ws)
        _apply_edits(ws, case.workspace.get("edits", {}))
        return ws
    sol = into / "solution"
    sol.mkdir(parents=True)
    _copy_solution(case, sol)
    if case.model_py:
        (sol / "model.py").write_text(task.source)
    return sol


# --- probes ---------------------------------------------------------------------------------

class _TcpProbe:
    """A local TCP server on a fixed port; records every connection it receives."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.received: list[bytes] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(4096) or b"<connected>")
                except OSError:
                    self.received.append(b"<connected>")

    def close(self) -> None:
        self._stop.set()
        self._t.join(timeout=2)
        self.sock.close()


def _pids_with(token: str) -> set[int]:
    out = set()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if token.encode() in (p / "cmdline").read_bytes():
                state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    out.add(int(p.name))
        except (OSError, IndexError):
            pass
    return out


def _seed_baseline(task, device: str, opts) -> dict[str, str]:
    """Cached baseline rows for the candidate to leave alone: a real measurement, planted whether or
    not it settled (on CI's busy 2 cores it may not, and the evaluator caches only settled ones);
    the probe tests that the candidate cannot change a row, whatever its numbers."""
    from cuda_agent.sandbox import baselines as base_mod
    from cuda_agent.sandbox.check import rotation_sets

    n_sets = rotation_sets(1 << 20, device)
    val = base_mod.measure(task, device, opts.recipe, n_sets, opts.compile_baseline, opts.time_timeout)
    if "error" not in val and base_mod.plausible(val):
        base_mod.put(task, device, opts.recipe, n_sets, opts.compile_baseline, val)
    return _baseline_rows()


def _baseline_rows() -> dict[str, str]:
    from cuda_agent.sandbox.cache import cache_root

    db = cache_root() / "baselines.sqlite"
    if not db.is_file():
        return {}
    con = sqlite3.connect(db, timeout=60)
    try:
        return dict(con.execute("SELECT key, value FROM baseline").fetchall())
    finally:
        con.close()


# --- running and judging --------------------------------------------------------------------

@dataclass
class Outcome:
    """One row of the report: what check() said and whether it met the case's expectation."""

    name: str
    cls: int | None
    device: str
    expect: str
    met: bool
    why: str
    """Which expectation failed (empty when met)."""
    correct: bool = False
    exploit_classes: list[int] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    stage: str | None = None
    round: str | None = None
    verdict_class: int | None = None
    error: str | None = None
    probe: str = ""
    isolation_unavailable: bool = False
    """Only a probe failed, and the check warned that this platform cannot isolate that."""
    warnings: list[str] = field(default_factory=list)
    isolation: str = ""
    seconds: float = 0.0
    attack: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def report(self) -> str:
        return (f"{self.name}: expected {self.expect}"
                + (f" ({self.why})" if self.why else "")
                + f"; got correct={self.correct} classes={self.exploit_classes} rules={self.rules} "
                  f"stage={self.stage} round={self.round} verdict_class={self.verdict_class} "
                  f"probe={self.probe or '-'} error={self.error!r}")


def exploit_classes(res) -> list[int]:
    """``CheckResult.exploit_classes``; before that field existed, the same union computed
    from the violations and the verdict (the contract's definition)."""
    got = getattr(res, "exploit_classes", None)
    if got:
        return sorted(got)
    cls = {v.exploit_class for v in res.violations if v.exploit_class is not None}
    vc = getattr(res.verdict, "exploit_class", None) if res.verdict is not None else None
    if vc is not None and not res.correct:
        cls.add(vc)
    return sorted(cls)


def judge(case: Case, res) -> list[str]:
    """Every way ``res`` misses the case's expectation (empty: met)."""
    rules = {v.rule for v in res.violations}
    classes = set(exploit_classes(res))
    v = res.verdict
    misses: list[str] = []
    if case.expect == "pass":
        if not res.correct:
            misses.append(f"not correct: {(res.error or '').splitlines()[0] if res.error else 'no error given'}")
        if res.violations:
            misses.append(f"violations {sorted(rules)}")
        if classes:
            misses.append(f"exploit classes {sorted(classes)}")
        return misses
    if case.expect == "contained":
        return misses
    r = case.reasons
    if res.correct:
        misses.append("accepted as correct")
    for rule in r.get("rules", []):
        if rule not in rules:
            misses.append(f"no {rule} violation")
    for c in r.get("classes", []):
        if c not in classes:
            misses.append(f"class {c} not in exploit_classes")
    if r.get("any_class") and not classes & set(r["any_class"]):
        misses.append(f"none of classes {r['any_class']} in exploit_classes")
    if "stage" in r and (v is None or v.stage != r["stage"]):
        misses.append(f"verdict stage {getattr(v, 'stage', None)!r}, expected {r['stage']!r}")
    if "round" in r and getattr(v, "round", None) != r["round"]:
        misses.append(f"verdict round {getattr(v, 'round', None)!r}, expected {r['round']!r}")
    if "verdict_class" in r and getattr(v, "exploit_class", None) != r["verdict_class"]:
        misses.append(f"verdict class {getattr(v, 'exploit_class', None)}, expected {r['verdict_class']}")
    if "verdict_correct" in r and (v is None or bool(v.correct) != bool(r["verdict_correct"])):
        misses.append(f"verdict.correct is {getattr(v, 'correct', None)}, expected {r['verdict_correct']}")
    if "error" in r and not re.search(r["error"], res.error or ""):
        misses.append(f"error does not match /{r['error']}/")
    return misses


def run_case(case: Case) -> Outcome:
    """Materialize, check, probe and judge one case."""
    from cuda_agent.sandbox.check import check
    from cuda_agent.tasks import load_file

    task = load_file(case.task)
    opts = options_for(case)
    t0 = time.perf_counter()
    probe_misses: list[str] = []
    probe_warned = True  # every probe miss is one the check warned about (isolation unavailable here)
    probe_note = ""
    with tempfile.TemporaryDirectory(prefix=f"adv-{case.name}-") as tmp:
        sol = materialize(case, task, Path(tmp))
        tcp = None
        before_pids: set[int] = set()
        rows_before: dict[str, str] = {}
        if "network" in case.probe:
            try:
                tcp = _TcpProbe(int(case.probe["network"]))
            except OSError as e:
                probe_note = f"network probe not run: port {case.probe['network']} busy ({e})"
        if "survivor" in case.probe:
            before_pids = _pids_with(case.probe["survivor"])
        if case.probe.get("baseline_db"):
            rows_before = _seed_baseline(task, case.device, opts)
        try:
            res = check(task, sol, opts)
        finally:
            if tcp is not None:
                time.sleep(0.5)
                tcp.close()
        if tcp is not None:
            if tcp.received:
                warned = [w for w in getattr(res, "warnings", []) if "network" in w]
                probe_warned &= bool(warned)
                probe_misses.append(f"the solution reached a local TCP server ({tcp.received[0][:40]!r})"
                                    + (f" [{warned[0]}]" if warned else " with no warning"))
                probe_note = "network reached" + (" (warned)" if warned else "")
            else:
                probe_note = "network: nothing received"
        if "survivor" in case.probe:
            time.sleep(1.0)
            left = _pids_with(case.probe["survivor"]) - before_pids
            for pid in left:  # started by this case's solution: ours to end
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if left:
                probe_warned &= any(w for w in getattr(res, "warnings", []) if "pid" in w.lower() or "process" in w)
                probe_misses.append(f"{len(left)} process(es) started by the solution outlived the check")
                probe_note = f"survivors: {sorted(left)}"
            else:
                probe_note = "no survivor"
        if case.probe.get("baseline_db"):
            after = _baseline_rows()
            changed = [k for k in rows_before if after.get(k) != rows_before[k]]
            if changed or not rows_before:
                probe_warned = False
                probe_misses.append(f"{len(changed)} cached baseline row(s) changed" if changed
                                    else "no cached baseline to protect (probe set-up failed)")
                probe_note = "baselines changed" if changed else "no baseline"
            else:
                probe_note = "baselines unchanged"
    verdict_misses = judge(case, res)
    misses = verdict_misses + probe_misses
    v = res.verdict
    return Outcome(
        name=case.name, cls=case.cls, device=case.device, expect=case.expect, met=not misses,
        isolation_unavailable=bool(probe_misses) and probe_warned and not verdict_misses,
        why="; ".join(misses), correct=bool(res.correct), exploit_classes=exploit_classes(res),
        rules=sorted({x.rule for x in res.violations}), stage=getattr(v, "stage", None),
        round=getattr(v, "round", None), verdict_class=getattr(v, "exploit_class", None),
        error=(res.error or "").strip().splitlines()[0][:300] if res.error else None, probe=probe_note,
        warnings=list(getattr(res, "warnings", [])), isolation=getattr(res, "isolation", ""), seconds=round(time.perf_counter() - t0, 2),
        attack=case.attack)


def markdown(rows: list[Outcome]) -> str:
    head = "| case | class | expect | met | correct | exploit classes | rules | stage/round | probe | error |\n" \
           "|---|---|---|---|---|---|---|---|---|---|\n"
    body = ""
    for r in rows:
        err = (r.error or "").replace("|", "\\|")[:90]
        body += (f"| {r.name} | {r.cls if r.cls is not None else '-'} | {r.expect} | "
                 f"{'yes' if r.met else '**NO**: ' + r.why.replace('|', '/')[:120]} | {r.correct} | "
                 f"{','.join(map(str, r.exploit_classes)) or '-'} | {', '.join(r.rules) or '-'} | "
                 f"{r.stage or '-'}/{r.round or '-'} | {r.probe or '-'} | {err} |\n")
    return head + body
