"""Pool throughput: a mixed stream of candidates through the pool vs one by one through the CLI.

    python scripts/bench_pool.py WORKDIR --device cpu --n 10 --slots 2          # here
    python scripts/bench_pool.py WORKDIR --device cuda --n 50 --gpus 0          # the H200
    python scripts/bench_pool.py WORKDIR --device cuda --n 200 --modes scaling \\
        --scaling 1,2,4,8 --backends local,ray                                  # issue 6

Candidates are variants of examples/cpu_scaled_swish (cpu) or examples/cuda_axpby (cuda):
good, wrong (a sign or factor off), failing to build, attacking (a torch op in forward) and
faulting (null write on the CPU, an illegal address on the GPU), mixed 40/20/16/14/10% and
shuffled with a fixed seed.  Every candidate's kernel source carries its own salt, so each
one really compiles (the shared binding and runtime objects, and the eager/compile baselines,
are warmed once before any mode and excluded from every mode's time).

Modes: ``pool`` (``Pool`` with --backend on --gpus/--slots), ``cli`` (``cuda-agent check``
in a fresh process per candidate, one after another), ``scaling`` (the pool on 1, 2, 4, 8
GPUs, for each --backends).  State lives in WORKDIR and each mode stops at --time-limit and
resumes when run again with the same arguments (the device machine allows 10 minutes a
command); WORKDIR/bench.json and bench.md report every mode whose state is in WORKDIR.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

PHASES = ["build", "reference", "start", "verify", "extra", "timing", "close", "baselines"]
MIX = (("good", 0.40), ("wrong", 0.20), ("build_fail", 0.16), ("attack", 0.14), ("fault", 0.10))

CPU = {
    "example": ROOT / "examples" / "cpu_scaled_swish",
    "kernel": "kernels/swish.cpp",
    "wrong": ("orow[c] = v / (1.0f + std::exp(-v)) * scale[c];", "orow[c] = 2.0f * v / (1.0f + std::exp(-v)) * scale[c];"),
    "build_fail": ("float v = xr[c];", "float v = xr[c] * undeclared_factor;"),
    "fault": ("  return 0;\n}", "  *(volatile float*)nullptr = out[0];  // faulting on purpose\n  return 0;\n}"),
    "attack": ("return ops.scaled_swish(x, self.scale)", "return x * torch.sigmoid(x) * self.scale"),
}
CUDA = {
    "example": ROOT / "examples" / "cuda_axpby",
    "kernel": "kernels/axpby.cu",
    "wrong": ("a * u.x + b * v.x", "a * u.x - b * v.x"),
    "build_fail": ("float4 u = x[i], v = y[i];", "float4 u = x[i], v = y[i] + undeclared_offset;"),
    "fault": ("out[i] = make_float4", "out[i + (1ll << 40)] = make_float4"),
    "attack": ("return ops.axpby(x, y, self.alpha, self.beta)", "return ops.axpby(x, y, self.alpha, 0.0) + self.beta * y"),
}


def kinds(n: int, seed: int) -> list[str]:
    counts = {k: int(n * w) for k, w in MIX}
    counts["good"] += n - sum(counts.values())
    seq = [k for k, c in counts.items() for _ in range(c)]
    random.Random(seed).shuffle(seq)
    return seq


def make_candidate(spec: dict, kind: str, dest: Path, salt: str) -> Path:
    """A copy of the example's solution turned into ``kind``; the kernel carries ``salt``."""
    if dest.exists():
        return dest
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(spec["example"] / "solution", tmp)
    k = tmp / spec["kernel"]
    src = k.read_text()
    if kind in ("wrong", "build_fail", "fault"):
        a, b = spec[kind]
        assert a in src, (kind, a)
        src = src.replace(a, b)
    k.write_text(f"// candidate {salt}\n" + src)
    if kind == "attack":
        m = tmp / "model_new.py"
        a, b = spec["attack"]
        text = m.read_text()
        assert a in text
        m.write_text(("import torch\n" if "import torch\n" not in text else "") + text.replace(a, b))
    tmp.rename(dest)
    return dest


def machine() -> dict:
    info = {"host": socket.gethostname(), "cpus": os.cpu_count(), "python": platform.python_version()}
    try:
        info["cpu"] = next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                           if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        p = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True,
                           text=True)
        info["gpus"] = [l.strip() for l in p.stdout.splitlines() if l.strip()]
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


class GpuSampler:
    """Mean utilization per GPU from ``nvidia-smi -lms 500`` while a mode runs."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}
        self.proc = None
        smi = shutil.which("nvidia-smi")
        if smi:
            self.proc = subprocess.Popen([smi, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits",
                                          "-lms", "500"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            try:
                i, u = (x.strip() for x in line.split(","))
                self.samples.setdefault(i, []).append(float(u))
            except ValueError:
                continue

    def stop(self) -> dict[str, float]:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        return {i: round(sum(v) / len(v), 1) for i, v in sorted(self.samples.items()) if v}


def summarize_result(r: dict, kind: str) -> dict:
    err = (r.get("error") or "").strip().splitlines()
    v = r.get("verdict") or {}
    return {"kind": kind, "compiled": r.get("compiled"), "correct": r.get("correct"), "reward": r.get("reward"),
            "stage": v.get("stage"), "rules": sorted({x["rule"] for x in r.get("violations", [])}),
            "error": err[0][:160] if err else None, "t_gen_ms": r.get("t_gen_ms"), "seconds": r.get("seconds"),
            "phases": r.get("phases") or {},
            # why a check was slow: a baseline measured again says under which conditions, then and now
            "warnings": [w[:300] for w in r.get("warnings") or []], "baselines": r.get("baselines") or {},
            "holds": [(h.get("mode"), round(h.get("end", 0) - h.get("start", 0), 3)) for h in r.get("holds") or []]}


# --- modes ------------------------------------------------------------------------------

def run_cli(args, state: dict, cands: list[tuple[str, Path]], task_file: Path, deadline: float) -> None:
    res = state.setdefault("results", {})
    for i, (kind, sol) in enumerate(cands):
        if str(i) in res:
            continue
        if time.time() > deadline:
            return
        cmd = [sys.executable, "-m", "cuda_agent.cli", "check", str(task_file), str(sol), "--device", args.device,
               "--json"] + ([] if args.timing else ["--no-timing"])
        t = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        took = time.time() - t
        try:
            r = json.loads(p.stdout.strip().splitlines()[-1])
            row = summarize_result(r, kind)
        except (json.JSONDecodeError, IndexError):
            row = {"kind": kind, "correct": None, "error": f"cli exit {p.returncode}: {p.stderr[-300:]}"}
        row["wall_s"] = round(took, 3)
        res[str(i)] = row
        state["elapsed_s"] = state.get("elapsed_s", 0.0) + took
        save(args, state)
        print(f"  cli {i + 1}/{len(cands)} {kind:<10} correct={row.get('correct')} {took:.1f} s", flush=True)
    state["complete"] = True


def run_pool(args, state: dict, cands: list[tuple[str, Path]], task_file: Path, deadline: float, backend: str,
             gpus: list[str] | None) -> None:
    from cuda_agent.sandbox.check import CheckOptions
    from cuda_agent.sandbox.pool import Pool, PoolError
    from cuda_agent.tasks import load_file

    db = Path(args.workdir) / f"{state['label']}.sqlite"
    opts = CheckOptions(device=args.device, timing=args.timing, baselines=args.timing)
    task = load_file(task_file)
    sampler = GpuSampler() if args.device == "cuda" else None
    t0 = time.time()
    kw = dict(gpus=gpus) if args.device == "cuda" else dict(slots=args.slots)
    pool = Pool(db, device=args.device, backend=backend, build_workers=args.build_workers, **kw)
    try:
        ids = [pool.submit(task, sol, opts, tag=kind, key=f"{state['label']}:{i}") for i, (kind, sol) in enumerate(cands)]
        last = [0]

        def progress(c: dict) -> None:
            if c["done"] >= last[0] + max(1, len(ids) // 10) or c["done"] == len(ids):
                last[0] = c["done"]
                print(f"  {state['label']}: {c}  {time.time() - t0:.0f} s", flush=True)
        try:
            pool.wait(ids, timeout=max(1.0, deadline - time.time()), on_progress=progress)
            complete = True
        except TimeoutError:
            complete = False
        except PoolError as e:
            state["error"] = str(e)
            complete = False
        recs = pool.jobs(ids)
        state["audit"] = pool.audit(ids).to_dict()
        state["workers_replaced"] = state.get("workers_replaced", 0) + pool.backend.replaced()
        state["slots"] = pool.backend.slots()
    finally:
        pool.close()
        took = time.time() - t0
        state["elapsed_s"] = state.get("elapsed_s", 0.0) + took
        if sampler is not None:
            state.setdefault("gpu_util_runs", []).append(sampler.stop())
    state["results"] = {str(i): {**summarize_result(r.result.to_dict(), r.tag), "slot": r.slot, "outcome": r.outcome}
                        for i, r in enumerate(recs) if r.result is not None}
    state["complete"] = complete
    save(args, state)


# --- state and report -------------------------------------------------------------------

def state_path(args, label: str) -> Path:
    return Path(args.workdir) / f"state-{label}.json"


def load_state(args, label: str, **meta) -> dict:
    p = state_path(args, label)
    if p.exists():
        return json.loads(p.read_text())
    return {"label": label, "elapsed_s": 0.0, "complete": False, **meta}


def save(args, state: dict) -> None:
    p = state_path(args, state["label"])
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(p)


def mode_row(s: dict) -> dict:
    res = list(s.get("results", {}).values())
    done = len(res)
    expected = sum(1 for r in res if bool(r.get("correct")) == (r["kind"] == "good"))
    by_kind: dict[str, dict] = {}
    for r in res:
        k = by_kind.setdefault(r["kind"], {"n": 0, "correct": 0})
        k["n"] += 1
        k["correct"] += int(bool(r.get("correct")))
    util = s.get("gpu_util_runs") or []
    mean_util = None
    if util:
        vals = [v for run in util for v in run.values()]
        mean_util = round(sum(vals) / len(vals), 1) if vals else None
    el = s.get("elapsed_s") or 0.0
    return {"label": s["label"], "done": done, "n": s.get("n"), "complete": s.get("complete"), "wall_s": round(el, 1),
            "evals_per_min": round(60 * done / el, 2) if el else None, "verdicts_as_expected": expected,
            "by_kind": by_kind, "audit_ok": (s.get("audit") or {}).get("ok"), "gpus": s.get("gpus"),
            "backend": s.get("backend"), "mean_gpu_util": mean_util, "workers_replaced": s.get("workers_replaced")}


def report(args, warmup: dict) -> None:
    """bench.json + bench.md from every mode's state in the work directory (this run's and earlier ones)."""
    states = [json.loads(p.read_text()) for p in sorted(Path(args.workdir).glob("state-*.json"))]
    states.sort(key=lambda s: (s["label"].startswith("scaling-"), s["label"] == "cli", s["label"]))
    rows = [mode_row(s) for s in states]
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "command": " ".join(sys.argv),
           "device": args.device, "n": args.n, "timing": args.timing, "mix": dict(MIX), "warmup": warmup,
           "modes": rows, "states": states}
    wd = Path(args.workdir)
    (wd / "bench.json").write_text(json.dumps(out, indent=1))
    md = [f"# Pool benchmark ({out['date']}, {args.device})", "",
          f"Machine: {out['machine'].get('host')}, {out['machine'].get('cpus')} CPUs"
          + (f", {', '.join(out['machine']['gpus'])}" if out["machine"].get("gpus") else "")
          + f"; torch {out['machine'].get('torch')}.", f"Command: `{out['command']}`", "",
          f"{args.n} candidates, mix {', '.join(f'{k} {w:.0%}' for k, w in MIX)}; full check "
          f"{'with' if args.timing else 'without'} timing; each candidate compiles its own kernel "
          f"(warm-up of shared objects and baselines excluded: {warmup.get('seconds', '?')} s).", "",
          "| mode | back-end | GPUs/slots | done | wall s | evaluations/min | verdicts as expected | audit | mean GPU util % |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['label']} | {r.get('backend') or '-'} | {r.get('gpus') or '-'} | {r['done']}/{r['n']}"
                  f"{'' if r['complete'] else ' (incomplete)'} | {r['wall_s']} | {r['evals_per_min']} | "
                  f"{r['verdicts_as_expected']}/{r['done']} | {'ok' if r['audit_ok'] else ('-' if r['audit_ok'] is None else 'FAILED')} | "
                  f"{r['mean_gpu_util'] if r['mean_gpu_util'] is not None else '-'} |")
    by = {r["label"]: r for r in rows}
    cli = by.get("cli")
    for r in rows:
        if cli and r["label"].startswith("pool-") and r["evals_per_min"] and cli["evals_per_min"]:
            md.append("")
            md.append(f"{r['label']} vs cli: {r['evals_per_min'] / cli['evals_per_min']:.2f}x evaluations/min.")
    scal = [r for r in rows if r["label"].startswith("scaling-")]
    if scal:
        md += ["", "## Scaling", "", "| back-end | GPUs | evaluations/min | speedup vs 1 GPU | efficiency vs linear | mean GPU util % | audit |",
               "|---|---|---|---|---|---|---|"]
        for be in sorted({r["backend"] for r in scal}):
            rs = sorted((r for r in scal if r["backend"] == be), key=lambda r: len(r["gpus"] or []))
            base = next((r["evals_per_min"] for r in rs if len(r["gpus"] or []) == 1), None)
            for r in rs:
                k = len(r["gpus"] or [])
                sp = r["evals_per_min"] / base if base and r["evals_per_min"] else None
                md.append(f"| {be} | {k} | {r['evals_per_min']} | {f'{sp:.2f}x' if sp else '-'} | "
                          f"{f'{sp / k:.0%}' if sp else '-'} | {r['mean_gpu_util'] if r['mean_gpu_util'] is not None else '-'} | "
                          f"{'ok' if r['audit_ok'] else 'FAILED'} |")
    md += ["", "Mean seconds per check stage, candidates that reached timing (from `CheckResult.phases`):", ""]
    for st in states:
        timed = [r.get("phases") or {} for r in st.get("results", {}).values() if (r.get("phases") or {}).get("timing")]
        if timed:
            keys = sorted({k for p in timed for k in p}, key=PHASES.index if all(k in PHASES for p in timed for k in p) else str)
            md.append(f"- {st['label']} ({len(timed)}): " + ", ".join(
                f"{k} {sum(p.get(k, 0.0) for p in timed) / len(timed):.2f}" for k in keys))
    md += ["", "Per kind (correct / n):", ""]
    for r in rows:
        md.append(f"- {r['label']}: " + ", ".join(f"{k} {v['correct']}/{v['n']}" for k, v in sorted(r["by_kind"].items())))
    (wd / "bench.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def warm(args, spec: dict, task_file: Path, cache: Path) -> dict:
    """Compile the shared objects and measure the baselines once (cached for every mode)."""
    marker = cache / "warm.json"
    if marker.exists():
        return json.loads(marker.read_text())
    t = time.time()
    cmd = [sys.executable, "-m", "cuda_agent.cli", "check", str(task_file), str(spec["example"] / "solution"),
           "--device", args.device, "--json"] + ([] if args.timing else ["--no-timing"])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise SystemExit(f"warm-up check failed: {p.stdout[-1000:]} {p.stderr[-2000:]}") from None
    if not r.get("correct"):
        raise SystemExit(f"warm-up: the example itself is not correct here: {r.get('error')}")
    w = {"seconds": round(time.time() - t, 1), "t_eager_ms": r.get("t_eager_ms"), "t_compile_ms": r.get("t_compile_ms"),
         "t_gen_ms": r.get("t_gen_ms")}
    marker.write_text(json.dumps(w))
    return w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--modes", default="pool,cli", help="comma list of pool, cli, scaling")
    ap.add_argument("--backend", default="local", help="back-end of the pool mode")
    ap.add_argument("--backends", default="local", help="back-ends of the scaling mode (comma list)")
    ap.add_argument("--gpus", default=None, help="GPUs of the pool mode, e.g. 0 or 0,1 (default: all visible)")
    ap.add_argument("--scaling", default="1,2,4,8", help="GPU counts of the scaling mode")
    ap.add_argument("--slots", type=int, default=2, help="CPU slots (device cpu)")
    ap.add_argument("--build-workers", type=int, default=None)
    ap.add_argument("--timing", action=argparse.BooleanOptionalAction, default=None,
                    help="time good candidates and baselines (default: on for cuda, off for cpu)")
    ap.add_argument("--time-limit", type=float, default=1e9, help="stop each invocation after this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.timing is None:
        args.timing = args.device == "cuda"
    wd = Path(args.workdir)
    wd.mkdir(parents=True, exist_ok=True)
    cache = wd / "cache"
    cache.mkdir(exist_ok=True)
    os.environ["CUDA_AGENT_CACHE"] = str(cache)
    spec = CPU if args.device == "cpu" else CUDA
    task_file = spec["example"] / "task.py"
    deadline = time.time() + args.time_limit
    seq = kinds(args.n, args.seed)

    def cands(label: str) -> list[tuple[str, Path]]:
        d = wd / "candidates" / label
        d.mkdir(parents=True, exist_ok=True)
        return [(k, make_candidate(spec, k, d / f"{i:04d}-{k}", f"{label}-{i}")) for i, k in enumerate(seq)]

    from cuda_agent.sandbox.pool.devices import visible_gpus

    all_gpus = visible_gpus() if args.device == "cuda" else []
    warmup = warm(args, spec, task_file, cache)
    print(f"warm-up: {warmup}", flush=True)
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        if mode == "cli":
            st = load_state(args, "cli", n=args.n, backend="cli", gpus=None)
            if not st["complete"]:
                run_cli(args, st, cands("cli"), task_file, deadline)
                save(args, st)
        elif mode == "pool":
            gpus = ([g.strip() for g in args.gpus.split(",")] if args.gpus else all_gpus) if args.device == "cuda" else None
            label = f"pool-{args.backend}"
            st = load_state(args, label, n=args.n, backend=args.backend,
                            gpus=gpus if gpus is not None else f"{args.slots} cpu slots")
            if not st["complete"]:
                run_pool(args, st, cands(label), task_file, deadline, args.backend, gpus)
        elif mode == "scaling":
            for be in [b.strip() for b in args.backends.split(",") if b.strip()]:
                for k in [int(x) for x in args.scaling.split(",")]:
                    if args.device == "cuda" and k > len(all_gpus):
                        print(f"scaling: skip {k} GPUs (only {len(all_gpus)} visible)", flush=True)
                        continue
                    label = f"scaling-{be}-{k}"
                    gpus = all_gpus[:k] if args.device == "cuda" else None
                    st = load_state(args, label, n=args.n, backend=be, gpus=gpus or [f"cpu{i}" for i in range(k)])
                    if not st["complete"]:
                        if args.device == "cpu":
                            args.slots = k
                        run_pool(args, st, cands(label), task_file, deadline, be, gpus)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        if time.time() > deadline:
            print("time limit reached: run the same command again to resume", flush=True)
            break
    report(args, warmup)


if __name__ == "__main__":
    main()
