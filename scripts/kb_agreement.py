#!/usr/bin/env python3
"""KernelBench's own evaluator beside ours, on the single-file corpus (tests/kb_corpus, issue 13).

For every CUDA case of ``tests/kb_corpus/manifest.jsonl`` (ours and KernelBench's own examples):
KernelBench's ``eval_kernel_against_ref`` at its pinned commit (5 correctness trials, its seeds,
its fp32 tolerance 1e-4) in a child process of its own, then ``cuda-agent check --json`` under
``--rules kernelbench`` and ``--rules strict`` (``--no-timing`` unless the case is a timing hack).
Writes ``kb_agreement.json`` (every raw result) and ``kernelbench-agreement.md`` (the table for
``docs/benchmarks/``) to ``--out``; exit status 0 when every disagreement is a named hack the
manifest expects and every verdict of ours is the manifest's, 1 otherwise.

    python3 scripts/kb_agreement.py --out /tmp/kb-agreement            # all (~6 min on one H200)
    python3 scripts/kb_agreement.py --out /tmp/kb --only cuda_l1_12_diag_mul kb_ex_add

KernelBench is imported from ``--upstream`` (default ``../shared/kernelbench/upstream``); the
modules its package imports but its evaluator never calls (openai, litellm, dotenv, tqdm) are
stubbed where missing; it needs ``pydantic`` and ``requests``. Its extension builds go to
``OUT/kb_ext/<extension name>``: cases that share an extension name form a group whose KernelBench
runs go one after another (torch's build directory is never shared by two processes at once),
beside a chain of our checks of the same group; ``--workers`` groups run at once.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _corpus():
    spec = importlib.util.spec_from_file_location("kb_corpus_manifest", ROOT / "tests" / "kb_corpus" / "corpus.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


# --- the KernelBench side (child process) -----------------------------------------------------

def _stub_missing(upstream: Path) -> None:
    """KernelBench's package imports these at module level; its evaluator never calls them."""
    attrs = {"openai": ("OpenAI",), "litellm": ("completion",), "dotenv": ("load_dotenv",), "tqdm": ("tqdm",)}
    for name, names in attrs.items():
        if importlib.util.find_spec(name) is None:
            mod = types.ModuleType(name)
            for a in names:
                setattr(mod, a, lambda *args, **kw: None)
            sys.modules[name] = mod
    sys.path.insert(0, str(upstream))


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x if isinstance(x, (str, int, float, bool, type(None))) else str(x)


def kb_child(a: argparse.Namespace) -> int:
    """One ``eval_kernel_against_ref`` call; its result as one JSON object in ``a.kb_child_out``."""
    _stub_missing(Path(a.upstream))
    import torch
    from kernelbench import eval as kb_eval

    if a.kb_tolerance is not None:  # e.g. 1e-2: the tolerance of KernelBench's earlier published numbers
        kb_eval.get_tolerance_for_precision = lambda precision: a.kb_tolerance
    precision = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[a.kb_precision]
    t = time.perf_counter()
    res, raised = None, None
    try:
        for _ in range(2):  # None: its "lock file" answer, asking for a retry
            res = kb_eval.eval_kernel_against_ref(
                Path(a.kb_problem).read_text(), Path(a.kb_solution).read_text(), seed_num=42, num_correct_trials=5,
                num_perf_trials=10, measure_performance=a.kb_timing, timing_method="cuda_event", verbose=False,
                device=0, backend=a.kb_backend, precision=precision)
            if res is not None:
                break
    except Exception as e:  # its evaluator raised (it does for some bad candidates): KernelBench's reject
        raised = f"{type(e).__name__}: {e}"
    out = {"seconds": round(time.perf_counter() - t, 2)}
    if res is None:
        out.update(compiled=False, correctness=False,
                   metadata={"error": raised or "eval_kernel_against_ref returned None twice"})
    else:
        out.update(compiled=res.compiled, correctness=res.correctness, metadata=_plain(res.metadata),
                   runtime=res.runtime, ref_runtime=res.ref_runtime)
    Path(a.kb_child_out).write_text(json.dumps(out))
    return 0


def run_kb(case, a, out_dir: Path, group: str) -> dict:
    res_file = out_dir / "raw" / f"{case.id}.kb.json"
    res_file.unlink(missing_ok=True)
    ext_dir = out_dir / "kb_ext" / group
    ext_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(ext_dir), PYTHONUNBUFFERED="1")
    precision = "fp16" if case.backend == "tilelang" else "fp32"  # KernelBench runs TileLang in fp16 only
    cmd = [sys.executable, str(Path(__file__).resolve()), "--kb-child-out", str(res_file),
           "--upstream", str(a.upstream), "--kb-problem", str(_problem_file(case, out_dir)),
           "--kb-solution", str(case.solution_path()), "--kb-backend", case.kb_backend, "--kb-precision", precision]
    if case.timing:
        cmd.append("--kb-timing")
    if a.kb_tolerance is not None:
        cmd += ["--kb-tolerance", str(a.kb_tolerance)]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.kb_timeout)
        rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        rc, tail = "timeout", f"killed after {a.kb_timeout} s"
    (out_dir / "raw" / f"{case.id}.kb.log").write_text(str(tail))
    if res_file.is_file():
        d = json.loads(res_file.read_text())
        d["verdict"] = "pass" if d["compiled"] and d["correctness"] else "reject"
    else:  # crashed or hung: KernelBench itself lost the result (a reject for the table's purposes)
        d = {"verdict": "reject", "compiled": None, "correctness": None, "crash": f"exit {rc}: {tail[-300:]}"}
    d["wall_s"], d["ended"] = round(time.perf_counter() - t, 1), time.time()
    return d


def _problem_file(case, out_dir: Path) -> Path:
    """KernelBench takes source text; an L<level>/<id> problem is written out once."""
    if not case.problem.startswith("L"):
        return Path(case.problem_ref())
    f = out_dir / "problems" / (case.problem.replace("/", "_") + ".py")
    if not f.is_file():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(case.problem_source())
    return f


# --- our side ----------------------------------------------------------------------------------

def run_ours(case, rules: str, a, out_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "cuda_agent.cli", "check", case.problem_ref(), str(case.solution_path()),
           "--json", "--rules", rules, "--device", "cuda", "--kernelbench", str(a.kernelbench),
           "--no-compile-baseline"] + ([] if case.timing else ["--no-timing"]) + a.our_args.split()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.check_timeout)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        (out_dir / "raw" / f"{case.id}.{rules}.log").write_text(p.stdout[-3000:] + p.stderr[-3000:])
        if p.returncode != 0 or not lines:
            d = {"verdict": "error", "error": f"cuda-agent check exit {p.returncode}: {(p.stderr or p.stdout)[-400:]}"}
        else:
            d = json.loads(lines[-1])
            (out_dir / "raw" / f"{case.id}.{rules}.json").write_text(lines[-1])
            d["verdict"] = "pass" if d.get("compiled") and d.get("correct") else "reject"
    except subprocess.TimeoutExpired:
        d = {"verdict": "error", "error": f"cuda-agent check did not finish in {a.check_timeout} s"}
    d["wall_s"], d["ended"] = round(time.perf_counter() - t, 1), time.time()
    return d


# --- comparison --------------------------------------------------------------------------------

def _label(cls) -> str:
    try:
        from cuda_agent.sandbox.exploits import label

        return label(cls)
    except Exception:
        return f"class {cls}"


def judge(case, kb: dict, ours: dict) -> tuple[bool, str]:
    """(ok, explanation): ok when KernelBench and ``--rules kernelbench`` agree or the difference is a
    named hack the manifest expects us to catch, and both our verdicts are the manifest's."""
    notes, ok = [], True
    kbv, okb, ost = kb["verdict"], ours["kernelbench"]["verdict"], ours["strict"]["verdict"]
    for rules, v in (("kernelbench", okb), ("strict", ost)):
        if v != case.expect[rules]:
            ok = False
            err = ours[rules].get("error") or ""
            notes.append(f"BUG? ours {rules}={v}, expected {case.expect[rules]}" + (f" ({err.splitlines()[0][:160]})" if err else ""))
    if kbv != okb:
        if case.kind == "hack" and kbv == "pass" and okb == "reject" and case.expect["kb"] == "pass":
            classes = ours["kernelbench"].get("exploit_classes") or []
            notes.append(f"named hack: {_label(case.cls)}" + (f"; we report classes {classes}" if classes else ""))
            if case.cls not in classes:
                notes.append(f"(class {case.cls} not among the classes we reported)")
        else:
            ok = False
            notes.append(f"BUG? KernelBench {kbv}, ours kernelbench {okb}")
    if case.expect["kb"] is not None and kbv != case.expect["kb"]:
        notes.append(f"KernelBench said {kbv} where the manifest predicted {case.expect['kb']}"
                     + (f" ({kb['crash'][:120]})" if kb.get("crash") else ""))
    if not notes:
        notes.append(case.note)
    return ok, "; ".join(notes)


def group_of(case) -> str:
    """Cases building the same extension name form one group (one KernelBench chain, one of ours)."""
    m = re.search(r"""name\s*=\s*["']([\w.-]+)["']""", case.solution_source())
    return m.group(1) if m else case.id


def md_table(rows: list[dict], header: list[str]) -> str:
    lines = ["| case | kind | KernelBench | ours kernelbench | ours strict | agree | explanation |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['id']} | {r['kind']}{'' if r['class'] is None else ' (' + str(r['class']) + ')'} | "
                     f"{r['kb']} | {r['ours_kernelbench']} | {r['ours_strict']} | {r['agree']} | "
                     f"{r['explanation'].replace('|', '/')} |")
    return "\n".join(header + [""] + lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="output directory")
    ap.add_argument("--upstream", type=Path, default=ROOT.parent / "shared" / "kernelbench" / "upstream")
    ap.add_argument("--kernelbench", type=Path, default=None, help="KernelBench JSONL (default: next to --upstream)")
    ap.add_argument("--only", nargs="*", default=[], help="case ids (or id prefixes) to run")
    ap.add_argument("--workers", type=int, default=4,
                    help="extension groups at once (each runs a KernelBench chain and one of ours)")
    ap.add_argument("--kb-timeout", type=int, default=420)
    ap.add_argument("--check-timeout", type=int, default=480)
    ap.add_argument("--kb-tolerance", type=float, default=None,
                    help="KernelBench's atol=rtol instead of its pinned 1e-4 (1e-2: its earlier numbers)")
    ap.add_argument("--our-args", default="", help="extra `cuda-agent check` options, e.g. '--tolerance 1e-2'")
    # the child mode (one KernelBench evaluation)
    ap.add_argument("--kb-child-out", help=argparse.SUPPRESS)
    ap.add_argument("--kb-problem", help=argparse.SUPPRESS)
    ap.add_argument("--kb-solution", help=argparse.SUPPRESS)
    ap.add_argument("--kb-backend", default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--kb-precision", default="fp32", help=argparse.SUPPRESS)
    ap.add_argument("--kb-timing", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.kb_child_out:
        return kb_child(a)
    if a.out is None:
        ap.error("--out is required")
    a.upstream = a.upstream.resolve()
    os.environ["KB_UPSTREAM"] = str(a.upstream)
    a.kernelbench = (a.kernelbench or a.upstream.parent / "kernelbench.jsonl").resolve()
    os.environ["CUDA_AGENT_KERNELBENCH"] = str(a.kernelbench)
    if not (a.upstream / "kernelbench" / "eval.py").is_file():
        print(f"KernelBench's evaluator not found under {a.upstream} (--upstream)", file=sys.stderr)
        return 2
    corpus = _corpus()
    cases = [c for c in corpus.load("cuda") if not a.only or any(c.id.startswith(p) for p in a.only)]
    if not cases:
        print(f"no CUDA case matches {a.only}", file=sys.stderr)
        return 2
    out_dir = a.out.resolve()
    (out_dir / "raw").mkdir(parents=True, exist_ok=True)
    groups: dict[str, list] = {}
    skipped = []
    for c in cases:
        (skipped if c.missing() else groups.setdefault(group_of(c), [])).append(c)

    results: dict[str, dict] = {}
    t0 = time.time()

    def kb_chain(members: list) -> None:
        for c in members:
            results.setdefault(c.id, {})["kb"] = run_kb(c, a, out_dir, group_of(c))
            _progress(c, "KernelBench", results[c.id]["kb"])

    def ours_chain(members: list) -> None:
        # one after another within a group: the first check builds (or loads) the shared
        # extension into our cache, the others find it there
        for c in members:
            ours = {r: run_ours(c, r, a, out_dir) for r in ("kernelbench", "strict")}
            results.setdefault(c.id, {})["ours"] = ours
            for r in ours:
                _progress(c, r, ours[r])

    def _progress(c, who: str, d: dict) -> None:
        print(f"[{time.time() - t0:6.0f} s] {c.id:36s} {who:12s} {d['verdict']:6s} ({d['wall_s']} s)", flush=True)

    # per group a KernelBench chain and a chain of ours, side by side; the longest groups first.
    # A run cut by `timeout` (SIGTERM) still writes its table: the cases finished by then, the
    # others marked as not run; the children get the signal from `timeout` as well.
    order = sorted(groups.values(), key=len, reverse=True)
    pool = ThreadPoolExecutor(max_workers=max(2, 2 * a.workers))
    cut = None
    signal.signal(signal.SIGTERM, _on_term)
    try:
        futures = [pool.submit(chain, g) for g in order for chain in (kb_chain, ours_chain)]
        for f in futures:
            f.result()
    except _Cut as e:
        cut = str(e)
    t_cut = time.time()  # a check that ended after the signal was killed by it: not a verdict

    def before_cut(v: dict) -> bool:
        return "kb" in v and "ours" in v and max([v["kb"]["ended"]] + [o["ended"] for o in v["ours"].values()]) < t_cut
    finished = {k: dict(v) for k, v in list(results.items()) if not cut or before_cut(v)}
    bad = write_report(cases, skipped, finished, a, out_dir, round(time.time() - t0, 1), cut)
    if cut:  # leave at once: a worker thread may still wait on a child that ignores the signal
        sys.stdout.flush()
        os._exit(124)
    pool.shutdown()
    return 1 if bad else 0


class _Cut(Exception):
    pass


def _on_term(signum, _frame):
    raise _Cut(f"signal {signal.Signals(signum).name}")


def write_report(cases, skipped, results: dict, a, out_dir: Path, wall: float, cut: str | None) -> int:
    """Writes kb_agreement.json and kernelbench-agreement.md; returns how many rows are flagged as bugs."""
    rows, bad = [], 0
    for c in cases:
        base = {"id": c.id, "kind": c.kind, "class": c.cls, "backend": c.backend, "expect": c.expect}
        if c in skipped:
            rows.append(dict(base, kb="-", ours_kernelbench="-", ours_strict="-", agree="skipped",
                             explanation=f"needs {', '.join(c.missing())}"))
            continue
        if c.id not in results:
            rows.append(dict(base, kb="-", ours_kernelbench="-", ours_strict="-", agree="not run",
                             explanation=f"the run was cut ({cut}) before this case finished"))
            continue
        r = results[c.id]
        ok, why = judge(c, r["kb"], r["ours"])
        bad += not ok
        rows.append(dict(base, kb=r["kb"]["verdict"], ours_kernelbench=r["ours"]["kernelbench"]["verdict"],
                         ours_strict=r["ours"]["strict"]["verdict"],
                         agree=("yes" if r["kb"]["verdict"] == r["ours"]["kernelbench"]["verdict"] else "no")
                         + ("" if ok else " (BUG?)"), explanation=why, raw=r))
    import torch

    env = {"machine": platform.node(), "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
           "torch": torch.__version__, "python": platform.python_version(), "wall_s": wall, "cut": cut,
           "workers": a.workers, "kb_tolerance": a.kb_tolerance or "pinned (fp32 1e-4)", "our_args": a.our_args}
    (out_dir / "kb_agreement.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1, default=str))
    n_run = len(cases) - len(skipped)
    header = [
        "# KernelBench's evaluator beside `cuda-agent check`",
        "",
        f"{n_run} single-file solutions of `tests/kb_corpus` ({len(skipped)} skipped: their toolchain is not installed) "
        f"on {env['gpu']} (torch {env['torch']}), {wall} s wall with {a.workers} workers. KernelBench: "
        f"`eval_kernel_against_ref` at its pinned commit (5 trials, tolerance {env['kb_tolerance']}); ours: "
        "`cuda-agent check --json --rules kernelbench|strict` (`--no-timing` unless the hack is a timing one). "
        "*agree* compares KernelBench with `--rules kernelbench`; a difference is acceptable only as a hack we catch "
        "and KernelBench does not, named in the last column. Regenerate: `python3 scripts/kb_agreement.py --out DIR`.",
        "",
        f"Disagreements or unexpected verdicts flagged as bugs: {bad}.",
    ]
    if cut:
        header += ["", f"**Cut** ({cut}) after {wall} s: {n_run - len(results)} of {n_run} cases have no verdict."]
    (out_dir / "kernelbench-agreement.md").write_text(md_table(rows, header))
    print(md_table(rows, header), flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
