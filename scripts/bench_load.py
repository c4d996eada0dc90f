"""The evaluator under load on one GPU (issue 18): throughput, verdicts under contention, hangs.

    python scripts/bench_load.py OUT [--n 20] [--stages alone,contended,hang,judge] [--slots-per-gpu 3]

Candidates: bench_pool.py's mixed variants of examples/cuda_axpby as workspaces (good, wrong,
failing to build, attacking, faulting) and, with --single K, K KernelBench-style single files
for KernelBench L1/12 from tests/kb_corpus (load_inline CUDA, Triton, a try/except fallback, a
failing build, an fp16 hack, an input-mutating hack); every C++/CUDA source salted so it really
compiles.  Stages:

  alone      the batch through the pool (local back-end, GPU 0, one slot): evaluations/min, mean
             GPU utilisation, seconds per phase, every verdict
  slots      the same through a pool with --slots-per-gpu slots on GPU 0 (they verify side by side
             and time one at a time): evaluations/min, the audit (no timing beside another job),
             verdicts compared with `alone`
  contended  the same solutions as 8 concurrent `cuda-agent check` processes on GPU 0 with one
             busy process per CPU core beside them: verdicts compared with `alone`
  hang       a kernel that spins forever: seconds to its verdict, then the good example at once
             (must pass), and what is left on the GPU (nvidia-smi compute apps)
  judge      the spinning kernel again, its `cuda-agent check` SIGKILLed mid-job: processes of
             the job and GPU compute apps left 5 s later (must be none)

Raw numbers go to OUT/load.json (and OUT/load.md); each stage appends as it finishes.  The
contended stage of a batch of 50 takes minutes: ``--contended-limit`` ends it inside a call's time
limit with what it has, and ``--alone-from`` compares it with an earlier call's ``alone`` stage and
keeps the contended rows that call ran: the next call's contended stage runs only the candidates
that have none yet, so the stage resumes over as many calls as it needs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_pool import CUDA, GpuSampler, kinds, machine, make_candidate, summarize_result  # noqa: E402

TASK = CUDA["example"] / "task.py"
SINGLE_TASK = "L1/12"  # KernelBench's, through CUDA_AGENT_KERNELBENCH
CORPUS = ROOT / "tests" / "kb_corpus" / "cuda"
SINGLE = (("sf_good", "l1_12_diag_mul.py"), ("sf_triton", "triton_l1_12_diag_mul.py"),
          ("sf_tryexcept", "l1_12_tryexcept_build_ok.py"), ("sf_build_fail", "l1_12_build_fails.py"),
          ("sf_fp16", "hack_l1_12_fp16.py"), ("sf_mutation", "hack_l1_12_input_mutation.py"))
# both kernels spin before their first access: whichever path the launch takes never returns
# (__nanosleep is an asm statement, so the loop cannot be optimised away)
HANG = (("  for (int64_t i = blockIdx.x", "  for (;;) __nanosleep(1000);\n  for (int64_t i = blockIdx.x"),
        ("  int64_t i = start +", "  for (;;) __nanosleep(1000);\n  int64_t i = start +"))


def make_single(name: str, dest: Path, salt: str) -> Path:
    """A corpus file as a fresh candidate: its C++/CUDA source carries ``salt`` (a new build)."""
    dest.mkdir(parents=True, exist_ok=True)
    src = (CORPUS / name).read_text()
    f = dest / "model_new.py"
    f.write_text(src.replace("#include <torch/extension.h>", f"#include <torch/extension.h>\n// candidate {salt}", 1))
    return f


def make_hang(dest: Path) -> Path:
    if not dest.exists():
        shutil.copytree(CUDA["example"] / "solution", dest)
        k = dest / CUDA["kernel"]
        src = k.read_text()
        for a, b in HANG:
            assert a in src, a
            src = src.replace(a, b)
        k.write_text(src)
    return dest


def verdict(row: dict) -> tuple:
    return (row.get("compiled"), row.get("correct"), row.get("stage"), tuple(row.get("rules") or ()))


def cli_check(sol: Path, extra_env: dict | None = None, task: str | Path = TASK,
              device: str = "cuda") -> tuple[dict, float]:
    t = time.time()
    p = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "check", str(task), str(sol), "--device", device,
                        "--json"], capture_output=True, text=True, env={**os.environ, **(extra_env or {})})
    took = time.time() - t
    try:
        return json.loads(p.stdout.strip().splitlines()[-1]), took
    except (json.JSONDecodeError, IndexError):
        return {"error": f"cli exit {p.returncode}: {p.stderr[-400:]}"}, took


def gpu_apps() -> list[str]:
    p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                       capture_output=True, text=True)
    return [l.strip() for l in p.stdout.splitlines() if l.strip()]


def gpu_util() -> str:
    p = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader"],
                       capture_output=True, text=True)
    return p.stdout.strip()


def stage_alone(args, cands, out: dict, name: str = "alone", per_gpu: int = 1) -> None:
    from cuda_agent.sandbox.check import CheckOptions
    from cuda_agent.sandbox.pool import Pool
    from cuda_agent.tasks import load_file

    from cuda_agent.tasks import resolve

    tasks = {str(TASK): load_file(TASK)}
    sampler = GpuSampler()
    t0 = time.time()
    db = Path(args.work) / f"{name}.sqlite"
    for f in db.parent.glob(db.name + "*"):  # a fresh queue: a stage measures its own run, never a resumed one
        if f.is_dir():
            shutil.rmtree(f)
        else:
            f.unlink()
    pool = Pool(db, device="cuda", gpus=["0"], slots_per_gpu=per_gpu)
    try:
        ids = [pool.submit(tasks.get(str(t)) or tasks.setdefault(str(t), resolve(t)), sol, CheckOptions(device="cuda"),
                           tag=k, key=f"{name}:{i}")
               for i, (k, t, sol) in enumerate(cands)]
        try:
            seen: list = [None]

            def progress(counts: dict) -> None:  # a line whenever the counts move (a cut run still says how far)
                if counts != seen[0]:
                    seen[0] = counts
                    print(f"{name} {time.time() - t0:6.1f} s {counts}", flush=True)

            pool.wait(ids, timeout=args.limit, on_progress=progress)
        except TimeoutError:
            print(f"{name}: not all done within {args.limit:.0f} s", flush=True)
        recs = pool.jobs(ids)
        audit = pool.audit(ids).to_dict()
    finally:
        pool.close()
    took = time.time() - t0
    rows = [summarize_result(r.result.to_dict(), r.tag) if r.result is not None else {"kind": r.tag, "missing": True}
            for r in recs]
    done = [r for r in rows if not r.get("missing")]
    phases: dict[str, float] = {}
    for r in done:
        for k, v in r["phases"].items():
            phases[k] = phases.get(k, 0.0) + v
    out[name] = {"n": len(done), "seconds": round(took, 1), "evals_per_min": round(60 * len(done) / took, 2),
                 "slots_per_gpu": per_gpu, "gpu_util": sampler.stop(), "audit_ok": audit["ok"],
                 "exclusive_overlaps": audit["exclusive_overlaps"],
                 "phase_mean_s": {k: round(v / max(len(done), 1), 3) for k, v in phases.items()}, "results": rows}
    if name != "alone":
        out[name].update(against_alone(out, rows))


def against_alone(out: dict, rows: list[dict]) -> dict:
    """How many candidates could be compared with this run's one-slot `alone` stage (none when it did not
    run: then "0 changes" would say nothing), and those whose verdict differs (one that got none now counts;
    one the stage did not start before its limit is not compared)."""
    alone = (out.get("alone") or {}).get("results") or []
    pairs = [(i, a, b) for i, (a, b) in enumerate(zip(alone, rows)) if not a.get("missing") and not b.get("not_run")]
    return {"compared": len(pairs),
            "verdict_changes": [{"i": i, "kind": a["kind"], "alone": verdict(a), "now": verdict(b)}
                                for i, a, b in pairs if verdict(a) != verdict(b)]}


def stage_contended(args, cands, out: dict) -> None:
    """8 checks in flight beside a busy process per core.  A batch of 50 takes longer than one call
    may run, so the stage resumes: it runs, in batch order, the candidates that have no contended row
    yet (the rows an earlier call ran come with --alone-from's file), and with --contended-limit
    starts none after that many seconds.  Each call then runs its share under the same load.  The
    report is rewritten as each check ends, so a call cut by its time limit keeps every verdict it
    got and leaves the rest to the next."""
    earlier = (out.get("contended") or {})
    earlier_rows = earlier.get("results") or []
    rows = [earlier_rows[i] if i < len(earlier_rows) and not earlier_rows[i].get("not_run")
            else {"kind": kind, "not_run": True} for i, (kind, _, _) in enumerate(cands)]
    todo = {i for i, r in enumerate(rows) if r.get("not_run")}
    calls = list(earlier.get("calls") or [])
    this = {"call": len(calls) + 1, "n": 0, "seconds": 0.0, "gpu_util": None}
    calls.append(this)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    lock = threading.Lock()
    sampler = GpuSampler()
    t0 = time.time()

    def save() -> None:  # under `lock`
        this["seconds"] = round(time.time() - t0, 1)
        not_run = sum(1 for r in rows if r.get("not_run"))
        out["contended"] = {"n": len(rows) - not_run, "not_run": not_run, "in_flight": 8, "cpu_hogs": len(hogs),
                            "seconds": round(sum(c["seconds"] for c in calls), 1), "calls": calls,
                            **against_alone(out, rows), "results": rows}
        report(out, Path(args.out), quiet=True)

    def one(i: int) -> None:
        if i not in todo:
            return  # an earlier call's
        if args.contended_limit and time.time() - t0 > args.contended_limit:
            return  # past the stage's limit: not started, so the stage still ends and reports
        r, took = cli_check(cands[i][2], {"CUDA_VISIBLE_DEVICES": "0"}, cands[i][1])
        row = summarize_result(r, cands[i][0])
        # a line per check as it ends: a stage cut by the time limit still shows how far it got
        print(f"contended {time.time() - t0:6.1f} s #{i} {cands[i][0]}: {took:.1f} s, correct={row['correct']} "
              f"stage={row['stage']} rules={row['rules']} phases={row['phases']}", flush=True)
        with lock:
            rows[i] = row | {"wall_s": round(took, 1), "call": this["call"]}
            this["n"] += 1
            save()

    def stop(*_) -> None:  # `timeout` ends the script: the hogs go with it (every verdict is saved)
        for h in hogs:
            h.kill()
        os._exit(124)

    signal.signal(signal.SIGTERM, stop)
    try:
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(one, range(len(cands))))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()
    with lock:
        this["gpu_util"] = sampler.stop()
        save()


def stage_hang(args, hang: Path, out: dict) -> None:
    r, took = cli_check(hang)
    row = summarize_result(r, "hang")
    after = {"apps": gpu_apps(), "gpu": gpu_util()}
    ok, took_ok = cli_check(CUDA["example"] / "solution")
    out["hang"] = {"seconds_to_verdict": round(took, 1), "verdict": row, "gpu_after": after,
                   "next_job": {"correct": ok.get("correct"), "seconds": round(took_ok, 1), "error": ok.get("error")}}


def stage_judge(args, hang: Path, out: dict) -> None:
    judge = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli", "check", str(TASK), str(hang), "--device", "cuda",
                              "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    from cuda_agent.sandbox.process import descendants

    deadline = time.time() + 120
    while time.time() < deadline and not any("sandbox.runner" in _cmd(p) for p in descendants(judge.pid)):
        time.sleep(0.2)
    time.sleep(8)  # into verification: the kernel spins
    job = {p: _cmd(p) for p in descendants(judge.pid)}
    apps_before = gpu_apps()
    os.kill(judge.pid, signal.SIGKILL)
    judge.wait()
    time.sleep(5)
    left = {p: c for p, c in job.items() if _alive(p)}
    out["judge"] = {"job_processes": len(job), "gpu_apps_before_kill": apps_before, "left_after_5s": left,
                    "gpu_apps_after": gpu_apps(), "gpu_after": gpu_util()}


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def report(out: dict, dest: Path, quiet: bool = False) -> None:
    tmp = dest / "load.json.tmp"  # rewritten while checks end: never a half-written file if the script is cut
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(dest / "load.json")
    lines = ["# The evaluator under load (scripts/bench_load.py)", "", f"machine: {out.get('machine')}", ""]
    a, c, h, j, sl = (out.get(k) for k in ("alone", "contended", "hang", "judge", "slots"))
    if a:
        lines += [f"- alone: {a['n']} checks in {a['seconds']} s = **{a['evals_per_min']} evaluations/min**, "
                  f"GPU busy {a['gpu_util']} %, mean s/phase {a['phase_mean_s']}"]
    if sl:
        lines += [f"- {sl['slots_per_gpu']} slots on the GPU: {sl['n']} checks in {sl['seconds']} s = "
                  f"**{sl['evals_per_min']} evaluations/min**, GPU busy {sl['gpu_util']} %, audit "
                  f"{'ok' if sl['audit_ok'] else 'FAILED'}, **{len(sl['verdict_changes'])} verdict changes** of "
                  f"{sl['compared']} compared with alone; mean s/phase {sl['phase_mean_s']}"]
    if c:
        lines += [f"- contended (8 in flight + {c['cpu_hogs']} CPU hogs): {c['n']} checks in {c['seconds']} s"
                  + (f" over {len(c['calls'])} calls" if len(c.get("calls") or []) > 1 else "")
                  + (f" ({c['not_run']} not run yet: past the stage's limit)" if c.get("not_run") else "")
                  + f", **{len(c['verdict_changes'])} verdict changes** of {c['compared']}"]
    if h:
        lines += [f"- hang: verdict `{h['verdict'].get('stage')}` after **{h['seconds_to_verdict']} s**; next job "
                  f"correct={h['next_job']['correct']} ({h['next_job']['seconds']} s); GPU apps after: {h['gpu_after']}"]
    if j:
        lines += [f"- judge SIGKILLed mid-job: {len(j['left_after_5s'])} of {j['job_processes']} job processes left; "
                  f"GPU apps after: {j['gpu_apps_after']}"]
    (dest / "load.md").write_text("\n".join(lines) + "\n")
    if not quiet:
        print("\n".join(lines), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=20, help="candidates in all")
    ap.add_argument("--single", type=int, default=0, help="of which single files (KernelBench format)")
    ap.add_argument("--stages", default="alone,contended,hang,judge")
    ap.add_argument("--work", default="/tmp/bench-load")
    ap.add_argument("--limit", type=float, default=300.0, help="seconds the alone (and the slots) stage may take")
    ap.add_argument("--slots-per-gpu", type=int, default=3, help="slots on GPU 0 in the slots stage")
    ap.add_argument("--contended-limit", type=float, default=0.0,
                    help="seconds after which the contended stage starts no more checks (0: none), so that it "
                         "ends, compares and reports what it has inside a call's time limit")
    ap.add_argument("--alone-from", type=Path, default=None,
                    help="a load.json of an earlier run of the same --n and --single: its `alone` stage is what "
                         "the other stages compare with (the alone stage need not run again in this call), "
                         "and the contended stage runs only the candidates that file has no contended row for")
    args = ap.parse_args()
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CUDA_AGENT_CACHE", str(work / "cache"))
    out: dict = json.loads((dest / "load.json").read_text()) if (dest / "load.json").exists() else {}
    if args.alone_from is not None:
        prev = json.loads(args.alone_from.read_text())
        if (prev.get("batch") or {}) != {"n": args.n, "single": args.single}:
            sys.exit(f"--alone-from {args.alone_from}: its batch {prev.get('batch')} is not --n {args.n} "
                     f"--single {args.single}")
        out["alone"] = prev["alone"]
        if "contended" in prev:  # the contended rows earlier calls ran: this call runs the rest
            out["contended"] = prev["contended"]
    out["batch"] = {"n": args.n, "single": args.single}
    out["machine"] = machine()
    salt = str(time.time_ns())  # every run compiles its candidates (as every RL sample is new code)
    cands = [(k, TASK, make_candidate(CUDA, k, work / "cands" / f"{i:03d}-{k}", f"load-{salt}-{i}"))
             for i, k in enumerate(kinds(args.n - args.single, 0))]
    singles = [(k, SINGLE_TASK, make_single(f, work / "cands" / f"s{i:03d}-{k}", f"load-{salt}-s{i}"))
               for i, (k, f) in enumerate(SINGLE[j % len(SINGLE)] for j in range(args.single))]
    cands = [c for pair in zip(cands, singles) for c in pair] + cands[len(singles):] + singles[len(cands):]
    hang = make_hang(work / "hang")
    # warm: the shared objects and the baselines, once, outside every stage's time
    w, took = cli_check(CUDA["example"] / "solution")
    print(f"warm: {took:.1f} s correct={w.get('correct')} {w.get('error') or ''}"[:300], flush=True)
    out["warm"] = {"seconds": round(took, 1), "correct": w.get("correct"), "t_eager_ms": w.get("t_eager_ms")}
    for stage in [s.strip() for s in args.stages.split(",") if s.strip()]:
        t = time.time()
        {"alone": lambda: stage_alone(args, cands, out), "contended": lambda: stage_contended(args, cands, out),
         "slots": lambda: stage_alone(args, cands, out, "slots", args.slots_per_gpu),
         "hang": lambda: stage_hang(args, hang, out), "judge": lambda: stage_judge(args, hang, out)}[stage]()
        print(f"stage {stage}: {time.time() - t:.0f} s", flush=True)
        report(out, dest)


if __name__ == "__main__":
    main()
