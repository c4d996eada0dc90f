"""The synthesis pipeline: compose -> static checks -> dedup -> decontaminate -> filters (in
evaluation processes, in parallel) -> dataset + stats.

Every decision is appended to ``decisions.jsonl`` in the output directory, keyed by the task's
content hash, before anything else happens with it; a rerun with the same arguments reads that
journal, skips what was decided, keeps what was accepted, and continues each op-count bucket
where it stopped.  Candidate ``j`` of bucket ``b`` is composed from the seed derived from
``(seed, b, j)``, so a run is reproducible.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..tasks import TaskError, kernelbench_path, validate_source
from .compose import Candidate, get_composer, parse_mix, quotas
from .decontam import ReferenceIndex, norm_hash, normalize
from .evaluate import FilterConfig, Verdict
from .program import ComposeError
from .report import build_stats, plot_similarity, stats_markdown, write_dataset
from .forkserver import ForkServer
from .runner import EvalWorker



class SynthError(RuntimeError):
    """A setting or an input of the run is wrong; the message says which."""


@dataclass
class SynthResult:
    """What a run produced."""

    out_dir: Path
    accepted: int
    candidates: int
    elapsed_s: float
    stats: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _derive_seed(seed: int, bucket: str, j: int) -> int:
    return int(hashlib.sha256(f"{seed}:{bucket}:{j}".encode()).hexdigest()[:12], 16)


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Records of a decisions journal; a torn last line (interrupted write) is ignored."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def run_synth(n: int, out_dir: str | Path, *, composer: str = "programmatic", device: str = "cpu",
              workers: int | None = None, seed: int = 0, mix: str | dict[str, float] | None = None,
              sizes: str | None = None, band_ms: tuple[float, float] | None = None, compile: bool = True,
              compile_backend: str = "inductor", timeout_s: float | None = None,
              compile_timeout_s: float | None = None, kernelbench: str | Path | None = None,
              decontaminate: bool = True, max_similarity: float = 0.9, max_candidates: int | None = None,
              composer_options: dict[str, Any] | None = None, include_transformers: bool = True,
              fork_server: bool | None = None, max_minutes: float | None = None, drain_s: float = 60.0,
              progress: bool = True) -> SynthResult:
    """Synthesize ``n`` filtered, decontaminated tasks into ``out_dir`` (resumable).

    ``sizes`` is the input-size profile (``gpu`` or ``cpu``; default: ``gpu`` on cuda, ``cpu``
    otherwise).  ``band_ms`` is the eager runtime band (default 1-100 ms on cuda, 0.1-5000 ms
    on cpu).  ``compile=False`` skips the torch.compile filter (quick runs only).
    ``fork_server`` forks the evaluation processes from one warm server (see
    :mod:`cuda_agent.synth.forkserver`) instead of starting a fresh interpreter for each
    (default: on for cpu, off for cuda).  ``max_minutes`` is a wall-time budget: no new candidate
    is submitted after it, evaluations in flight get ``drain_s`` more seconds, and what is still
    running then is abandoned undecided (a rerun picks up from there, as after an interruption).
    """
    if n < 1:
        raise SynthError("--n must be at least 1")
    if not 0.0 < max_similarity <= 1.0:
        raise SynthError("max_similarity must be in (0, 1]")
    t_start = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dev = device
    if dev.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise SynthError("device=cuda but torch sees no CUDA GPU")
        ngpu = torch.cuda.device_count()
    else:
        ngpu = 0
    profile = sizes or ("gpu" if dev.startswith("cuda") else "cpu")
    if profile not in ("gpu", "cpu"):
        raise SynthError(f"sizes must be 'gpu' or 'cpu', not {profile!r}")
    n_workers = workers or (max(1, ngpu) if ngpu else max(1, (os.cpu_count() or 2)))
    try:
        mix_d = parse_mix(mix)
    except ValueError as e:
        raise SynthError(f"bad mix: {e}") from None

    cfg = FilterConfig(device=dev, band_ms=band_ms, compile=compile, compile_backend=compile_backend,
                       timeout_s=timeout_s or (120.0 if dev.startswith("cuda") else 60.0),
                       compile_timeout_s=compile_timeout_s or (300.0 if dev.startswith("cuda") else 240.0),
                       threads=1 if ngpu else max(1, (os.cpu_count() or 2) // n_workers),
                       # in a directory of their own: it is exposed (read-only) to the contained evaluations
                       timing_lock=str(out / ".locks" / "timing.lock") if ngpu and n_workers > ngpu else None)
    if cfg.timing_lock:
        Path(cfg.timing_lock).parent.mkdir(parents=True, exist_ok=True)
    log_path = out / "eval.log"
    # The fork server imports torch and warms up torch.compile while this process loads the
    # KernelBench index and the seed library.
    if fork_server is None:
        fork_server = not dev.startswith("cuda")
    server = ForkServer(cfg, log_path=str(log_path)) if fork_server else None
    try:
        return _run(n, out, server, cfg, log_path, composer=composer, dev=dev, ngpu=ngpu, n_workers=n_workers,
                    seed=seed, mix_d=mix_d, profile=profile, compile=compile, compile_backend=compile_backend,
                    kernelbench=kernelbench, decontaminate=decontaminate, max_similarity=max_similarity,
                    max_candidates=max_candidates, composer_options=composer_options,
                    include_transformers=include_transformers, progress=progress, t_start=t_start,
                    deadline=t_start + 60 * max_minutes if max_minutes else None, drain_s=drain_s)
    finally:
        if server is not None:
            server.close()


def _run(n: int, out: Path, server: ForkServer | None, cfg: FilterConfig, log_path: Path, *, composer: str, dev: str,
         ngpu: int, n_workers: int, seed: int, mix_d: dict[str, float], profile: str, compile: bool,
         compile_backend: str, kernelbench: str | Path | None, decontaminate: bool, max_similarity: float,
         max_candidates: int | None, composer_options: dict[str, Any] | None, include_transformers: bool,
         progress: bool, t_start: float, deadline: float | None, drain_s: float) -> SynthResult:
    index: ReferenceIndex | None = None
    if decontaminate:
        try:
            kb = kernelbench_path(kernelbench)
        except TaskError as e:
            raise SynthError(f"decontamination needs KernelBench (or --no-decontaminate): {e}") from None
        try:
            index = ReferenceIndex.kernelbench(kb)
        except TaskError as e:
            raise SynthError(str(e)) from None

    from .crawl import seed_library

    library = seed_library(include_transformers=include_transformers)
    try:
        comp = get_composer(composer, library=library, profile=profile, **(composer_options or {}))
    except (KeyError, TypeError) as e:
        raise SynthError(f"composer {composer!r}: {e}") from None
    avail = comp.buckets()
    for b in list(mix_d):
        if b not in avail:  # e.g. no transformers installed: its share goes to the largest bucket
            share = mix_d.pop(b)
            top = max((k for k in mix_d if k in avail), key=lambda k: mix_d[k], default=None)
            if top is None:
                raise SynthError(f"composer {composer!r} cannot fill any bucket of the mix")
            mix_d[top] += share
    q = quotas(n, mix_d)

    settings = {"n": n, "composer": composer, "device": dev, "workers": n_workers, "seed": seed, "sizes": profile,
                "band_ms": list(cfg.band), "compile": compile, "compile_backend": compile_backend,
                "decontaminate": decontaminate, "max_similarity": max_similarity, "mix": mix_d, "quotas": q}

    journal = out / "decisions.jsonl"
    records = read_journal(journal)
    decided = {r["key"] for r in records}
    accepted = [r for r in records if r["status"] == "accepted"]
    accepted_before = len(accepted)
    acc = Counter(r["bucket"] for r in accepted)
    seen_norm = {r["norm_hash"] for r in accepted if r.get("norm_hash")}
    next_j: Counter[str] = Counter()
    for r in records:
        if r.get("bucket") is not None and r.get("j") is not None:
            next_j[r["bucket"]] = max(next_j[r["bucket"]], int(r["j"]) + 1)
    limit = max_candidates or (40 * n + 200)
    new_candidates = 0

    jf = journal.open("a")

    def record(cand: Candidate | None, bucket: str, j: int, key: str, status: str, stage: str, code: str,
               reason: str, **kw: Any) -> dict[str, Any]:
        rec = {"key": key, "status": status, "stage": stage, "code": code, "reason": reason, "bucket": bucket,
               "j": j, "time": time.time(), **kw}
        if cand is not None:
            rec.update({"id": f"synth/{key}", "code_src": None, "ops": cand.ops, "categories": cand.categories,
                        "op_count": cand.op_count, "composer": cand.composer, "seed": cand.seed,
                        "family": cand.extra.get("family"), "made": cand.extra})
            rec["source"] = cand.source
        rec.pop("code_src", None)
        jf.write(json.dumps(rec) + "\n")
        jf.flush()
        records.append(rec)
        decided.add(key)
        return rec

    wq: queue.Queue[EvalWorker] = queue.Queue()
    evs = []
    for i in range(n_workers):
        env = {"CUDA_VISIBLE_DEVICES": str(i % ngpu)} if ngpu > 1 else {}
        ev = EvalWorker(cfg, env=env, log_path=log_path, server=server)
        evs.append(ev)
        wq.put(ev)

    # An out-of-memory verdict is usually the other workers' share of the device: the task is
    # evaluated once more alone (every other worker idle), and only that verdict counts.
    gate = threading.Condition()
    alone = {"pending": False}
    retried_alone: set[str] = set()  # sources whose verdict is the one from the run alone
    alone_lock = threading.Lock()

    def evaluate(src: str) -> Verdict:
        with gate:
            gate.wait_for(lambda: not alone["pending"])
        w = wq.get()
        try:
            v = w.evaluate(src)
        finally:
            wq.put(w)
        if v.code == "oom" and n_workers > 1:
            v = evaluate_alone(src)
            retried_alone.add(_sha(src))
        return v

    def evaluate_alone(src: str) -> Verdict:
        with alone_lock:
            with gate:
                alone["pending"] = True
            try:
                ws = [wq.get() for _ in range(n_workers)]  # the others finish their task and idle
                try:
                    v = ws[0].evaluate(src)
                finally:
                    for w in ws:
                        wq.put(w)
            finally:
                with gate:
                    alone["pending"] = False
                    gate.notify_all()
        if v.code == "oom":
            v.reason = f"even alone on the device: {v.reason}"[:500]
        return v

    def done() -> bool:
        return all(acc[b] >= q[b] for b in q)

    in_flight: dict[Future[Verdict], tuple[Candidate, str, int, str, str, float, str]] = {}
    inflight_b: Counter[str] = Counter()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(TextColumn("[bold]synth"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[info]}"), disable=not progress, transient=False)
    rej = Counter(r["code"] for r in records if r["status"] == "rejected")

    def info() -> str:
        top = ", ".join(f"{k}:{v}" for k, v in rej.most_common(4))
        n_rej = sum(rej.values())
        return (f"decided {len(records)}: accepted {len(records) - n_rej}, rejected {n_rej}"
                + (f" ({top})" if top else "") + f" | in flight {len(in_flight)}")

    def finish(fut: Future[Verdict]) -> None:
        cand, b, j, key, nh, sim, nearest = in_flight.pop(fut)
        inflight_b[b] -= 1
        try:
            v = fut.result()
        except Exception as e:  # noqa: BLE001 - never lose a decision
            v = Verdict(ok=False, code="crash", reason=f"evaluation failed: {type(e).__name__}: {e}")
        extra = dict(norm_hash=nh, max_similarity=sim, nearest_kernelbench=nearest, eager_ms=v.eager_ms,
                     compile_ms=v.compile_ms, device=dev, phase_s=v.phase_s)
        if key in retried_alone:
            extra["retried_alone"] = True
        if v.ok:
            accepted.append(record(cand, b, j, key, "accepted", "accepted", "", "", **extra))
            acc[b] += 1
            seen_norm.add(nh)
        else:
            record(cand, b, j, key, "rejected", "filter", v.code, v.reason, **extra)
            rej[v.code] += 1

    pool = ThreadPoolExecutor(n_workers)
    stopped_reason = ""
    try:
        with prog:
            task_id = prog.add_task("synth", total=n, completed=min(n, len(accepted)), info=info())
            while not done():
                if new_candidates >= limit:
                    stopped_reason = f"stopped after {limit} new candidates (max_candidates)"
                    break
                if deadline is not None and time.time() >= deadline:
                    stopped_reason = f"stopped at the time budget ({(deadline - t_start) / 60:.1f} min)"
                    break
                open_b = [b for b in q if acc[b] < q[b]]
                if len(in_flight) >= 2 * n_workers or not open_b:
                    if not in_flight:
                        break
                    fin, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                    for f in fin:
                        finish(f)
                    prog.update(task_id, completed=min(n, len(accepted)), info=info())
                    continue
                # The bucket least filled relative to its quota (in-flight candidates count as half
                # an acceptance): every bucket fills at the same pace, so a run stopped early (budget,
                # interruption) still has the requested op-count mix.
                b = min(open_b, key=lambda k: ((acc[k] + 0.5 * inflight_b[k]) / q[k], -q[k]))
                if inflight_b[b] >= max(2, 4 * (q[b] - acc[b])) and in_flight:
                    fin, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                    for f in fin:
                        finish(f)
                    continue
                j = next_j[b]
                next_j[b] += 1
                cseed = _derive_seed(seed, b, j)
                new_candidates += 1
                try:
                    cand = comp.compose(b, cseed)
                except Exception as e:  # noqa: BLE001 - a composer bug rejects one candidate, never the run
                    why = str(e) if isinstance(e, ComposeError) else f"composer failed: {type(e).__name__}: {e}"
                    record(None, b, j, _sha(f"compose:{composer}:{seed}:{b}:{j}"), "rejected", "compose",
                           "compose", why[:500])
                    rej["compose"] += 1
                    continue
                key = _sha(cand.source)
                if key in decided:
                    continue
                try:
                    validate_source(cand.source)
                    toks = normalize(cand.source)
                except (TaskError, SyntaxError, ValueError, RecursionError) as e:
                    record(cand, b, j, key, "rejected", "format", "format", str(e)[:500])
                    rej["format"] += 1
                    continue
                nh = norm_hash(toks)
                sim, nearest = index.max_similarity(cand.source) if index is not None else (None, "")
                if nh in seen_norm:
                    record(cand, b, j, key, "rejected", "dedup", "duplicate",
                           "same normalized AST as an accepted or in-flight task", norm_hash=nh,
                           max_similarity=sim, nearest_kernelbench=nearest)
                    rej["duplicate"] += 1
                    continue
                if sim is not None and sim > max_similarity:
                    record(cand, b, j, key, "rejected", "decontam", "contaminated",
                           f"AST similarity {sim:.3f} > {max_similarity} to {nearest}", norm_hash=nh,
                           max_similarity=sim, nearest_kernelbench=nearest)
                    rej["contaminated"] += 1
                    continue
                seen_norm.add(nh)
                fut = pool.submit(evaluate, cand.source)
                in_flight[fut] = (cand, b, j, key, nh, sim, nearest)
                inflight_b[b] += 1
                prog.update(task_id, info=info())
            # Drain: decisions already paid for are kept (they may overfill a bucket; the dataset trims).
            # Under a time budget, what is still running after drain_s is abandoned undecided.
            drain_end = None if deadline is None else max(deadline, time.time()) + drain_s
            while in_flight:
                left = None if drain_end is None else max(0.0, drain_end - time.time())
                fin, _ = wait(list(in_flight), timeout=left, return_when=FIRST_COMPLETED)
                if not fin:
                    abandoned = len(in_flight)
                    stopped_reason += f"; {abandoned} evaluation(s) abandoned after {drain_s:.0f} s of draining"
                    for f in in_flight:
                        f.cancel()  # queued ones never start
                    for ev in evs:
                        ev.interrupt()
                    wait(list(in_flight), timeout=30)
                    in_flight.clear()
                    break
                for f in fin:
                    finish(f)
            prog.update(task_id, completed=min(n, len(accepted)), info=info())
    finally:
        for f in list(in_flight):
            f.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        for ev in evs:
            ev.close()
        jf.close()

    # Dataset: accepted tasks, at most the quota of each bucket, in journal order.
    take: Counter[str] = Counter()
    rows = []
    for r in accepted:
        if take[r["bucket"]] < q.get(r["bucket"], 0):
            take[r["bucket"]] += 1
            rows.append({**r, "task_id": r["id"], "code": r["source"], "sha": r["key"]})
    files: dict[str, str] = {}
    jl, pq_path = write_dataset(rows, out)
    files.update(jsonl=str(jl), parquet=str(pq_path) if pq_path else "(not written: pyarrow is not installed)",
                 journal=str(journal))
    elapsed = time.time() - t_start
    settings["stopped"] = stopped_reason
    settings["accepted_this_invocation"] = len(accepted) - accepted_before
    settings["fork_server"] = server is not None
    settings["process_starts"] = {k: sum(ev.starts[k] for ev in evs) for k in ("forked", "spawned")}
    if server is not None and server.info:
        settings["fork_server_warm_s"] = server.info.get("warm_s")
    stats = build_stats(records, rows, settings, elapsed_s=elapsed)
    (out / "stats.json").write_text(json.dumps(stats, indent=2))
    png = plot_similarity([r["max_similarity"] for r in rows if r.get("max_similarity") is not None],
                          [r["max_similarity"] for r in records if r.get("max_similarity") is not None],
                          max_similarity, out / "similarity.png")
    (out / "stats.md").write_text(stats_markdown(stats))
    files.update(stats=str(out / "stats.md"), stats_json=str(out / "stats.json"))
    if png:
        files["similarity_png"] = str(png)
    return SynthResult(out_dir=out, accepted=len(rows), candidates=len(records), elapsed_s=elapsed, stats=stats,
                       files=files)
