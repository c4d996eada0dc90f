"""The synthesis pipeline: compose -> static checks -> dedup -> decontaminate -> filters (in
evaluation processes, in parallel) -> dataset + stats.

Every decision is appended to ``decisions.jsonl`` in the output directory, keyed by the task's
content hash, before anything else happens with it; a rerun with the same arguments reads that
journal, skips what was decided, keeps what was accepted, and continues each op-count bucket
where it stopped.  Candidate ``j`` of bucket ``b`` is composed from the seed derived from
``(seed, b, j)``, so a run is reproducible.

A run is a :class:`SynthConfig` (built once: by the CLI, or from :func:`run_synth`'s
keywords), resolved into a :class:`_Setup` (checked settings, device, workers, filters), then
the objects: the decisions :class:`_Journal`, the :class:`_Evaluators` and the
:class:`_Synth` that composes, screens, submits and collects.
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


@dataclass
class SynthConfig:
    """A synthesis run's settings as given (the CLI builds one; :func:`run_synth` too)."""

    n: int
    """Tasks the dataset should hold."""
    out_dir: str | Path
    """The dataset directory (reuse it to resume)."""
    composer: str = "programmatic"
    device: str = "cpu"
    workers: int | None = None
    """Evaluation processes (default: the CPU cores, or the GPUs on cuda)."""
    seed: int = 0
    mix: str | dict[str, float] | None = None
    """The op-count mix (default: the paper's)."""
    sizes: str | None = None
    """Input-size profile, ``gpu`` or ``cpu`` (default: ``gpu`` on cuda, ``cpu`` otherwise)."""
    band_ms: tuple[float, float] | None = None
    """The eager runtime band (default 1-100 ms on cuda, 0.1-5000 ms on cpu)."""
    compile: bool = True
    """False skips the torch.compile filter (quick runs only)."""
    compile_backend: str = "inductor"
    timeout_s: float | None = None
    compile_timeout_s: float | None = None
    kernelbench: str | Path | None = None
    decontaminate: bool = True
    max_similarity: float = 0.9
    max_candidates: int | None = None
    composer_options: dict[str, Any] | None = None
    include_transformers: bool = True
    fork_server: bool | None = None
    """Fork the evaluation processes from one warm server (:mod:`cuda_agent.synth.forkserver`)
    instead of starting a fresh interpreter for each (default: on for cpu, off for cuda)."""
    max_minutes: float | None = None
    """A wall-time budget: no new candidate is submitted after it, evaluations in flight get
    ``drain_s`` more seconds, and what is still running then is abandoned undecided (a rerun
    picks up from there, as after an interruption)."""
    drain_s: float = 60.0
    progress: bool = True


def run_synth(n: int, out_dir: str | Path, **options: Any) -> SynthResult:
    """Synthesize ``n`` filtered, decontaminated tasks into ``out_dir`` (resumable); the
    options are :class:`SynthConfig`'s fields."""
    return synthesize(SynthConfig(n, out_dir, **options))


def synthesize(config: SynthConfig) -> SynthResult:
    """Run the pipeline for ``config`` (raises SynthError for a wrong setting or input)."""
    setup = _Setup.resolve(config)
    # The fork server imports torch and warms up torch.compile while this process loads the
    # KernelBench index and the seed library.
    server = ForkServer(setup.filters, log_path=str(setup.log_path)) if setup.fork_server else None
    try:
        return _Synth(config, setup, server).run()
    finally:
        if server is not None:
            server.close()


@dataclass
class _Setup:
    """What a config resolves to: checked settings, the device, workers and filters."""

    out: Path
    dev: str
    ngpu: int
    profile: str
    n_workers: int
    mix: dict[str, float]
    filters: FilterConfig
    log_path: Path
    fork_server: bool
    t_start: float
    deadline: float | None

    @classmethod
    def resolve(cls, c: SynthConfig) -> "_Setup":
        if c.n < 1:
            raise SynthError("--n must be at least 1")
        if not 0.0 < c.max_similarity <= 1.0:
            raise SynthError("max_similarity must be in (0, 1]")
        t_start = time.time()
        out = Path(c.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        dev = c.device
        if dev.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise SynthError("device=cuda but torch sees no CUDA GPU")
            ngpu = torch.cuda.device_count()
        else:
            ngpu = 0
        profile = c.sizes or ("gpu" if dev.startswith("cuda") else "cpu")
        if profile not in ("gpu", "cpu"):
            raise SynthError(f"sizes must be 'gpu' or 'cpu', not {profile!r}")
        n_workers = c.workers or (max(1, ngpu) if ngpu else max(1, (os.cpu_count() or 2)))
        try:
            mix_d = parse_mix(c.mix)
        except ValueError as e:
            raise SynthError(f"bad mix: {e}") from None
        filters = FilterConfig(
            device=dev, band_ms=c.band_ms, compile=c.compile, compile_backend=c.compile_backend,
            timeout_s=c.timeout_s or (120.0 if dev.startswith("cuda") else 60.0),
            compile_timeout_s=c.compile_timeout_s or (300.0 if dev.startswith("cuda") else 240.0),
            threads=1 if ngpu else max(1, (os.cpu_count() or 2) // n_workers),
            # in a directory of their own: it is exposed (read-only) to the contained evaluations
            timing_lock=str(out / ".locks" / "timing.lock") if ngpu and n_workers > ngpu else None)
        if filters.timing_lock:
            Path(filters.timing_lock).parent.mkdir(parents=True, exist_ok=True)
        return cls(out=out, dev=dev, ngpu=ngpu, profile=profile, n_workers=n_workers, mix=mix_d, filters=filters,
                   log_path=out / "eval.log",
                   fork_server=c.fork_server if c.fork_server is not None else not dev.startswith("cuda"),
                   t_start=t_start, deadline=t_start + 60 * c.max_minutes if c.max_minutes else None)


class _Journal:
    """``decisions.jsonl``: what was decided, read back on a rerun and appended to as each
    decision is made (flushed, before anything else happens with it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records = read_journal(path)
        self.decided = {r["key"] for r in self.records}
        self.accepted = [r for r in self.records if r["status"] == "accepted"]
        self.accepted_before = len(self.accepted)
        self.acc = Counter(r["bucket"] for r in self.accepted)
        """Acceptances per bucket."""
        self.seen_norm = {r["norm_hash"] for r in self.accepted if r.get("norm_hash")}
        self.next_j: Counter[str] = Counter()
        """The next candidate index per bucket (a rerun continues where it stopped)."""
        for r in self.records:
            if r.get("bucket") is not None and r.get("j") is not None:
                self.next_j[r["bucket"]] = max(self.next_j[r["bucket"]], int(r["j"]) + 1)
        self.rej = Counter(r["code"] for r in self.records if r["status"] == "rejected")
        """Rejections per code."""
        self.file = path.open("a")

    def record(self, cand: Candidate | None, bucket: str, j: int, key: str, status: str, stage: str, code: str,
               reason: str, **kw: Any) -> dict[str, Any]:
        rec = {"key": key, "status": status, "stage": stage, "code": code, "reason": reason, "bucket": bucket,
               "j": j, "time": time.time(), **kw}
        if cand is not None:
            rec.update({"id": f"synth/{key}", "code_src": None, "ops": cand.ops, "categories": cand.categories,
                        "op_count": cand.op_count, "composer": cand.composer, "seed": cand.seed,
                        "family": cand.extra.get("family"), "made": cand.extra})
            rec["source"] = cand.source
        rec.pop("code_src", None)
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        self.records.append(rec)
        self.decided.add(key)
        return rec

    def reject(self, cand: Candidate | None, bucket: str, j: int, key: str, stage: str, code: str, reason: str,
               **kw: Any) -> None:
        self.record(cand, bucket, j, key, "rejected", stage, code, reason, **kw)
        self.rej[code] += 1

    def accept(self, cand: Candidate, bucket: str, j: int, key: str, nh: str, **kw: Any) -> None:
        self.accepted.append(self.record(cand, bucket, j, key, "accepted", "accepted", "", "", **kw))
        self.acc[bucket] += 1
        self.seen_norm.add(nh)

    def close(self) -> None:
        self.file.close()


class _Evaluators:
    """The evaluation workers, lent one task at a time.  An out-of-memory verdict is usually
    the other workers' share of the device: the task is evaluated once more alone (every
    other worker idle), and only that verdict counts."""

    def __init__(self, setup: _Setup, server: ForkServer | None) -> None:
        self.n_workers = setup.n_workers
        self.queue: queue.Queue[EvalWorker] = queue.Queue()
        self.workers = []
        for i in range(setup.n_workers):
            env = {"CUDA_VISIBLE_DEVICES": str(i % setup.ngpu)} if setup.ngpu > 1 else {}
            ev = EvalWorker(setup.filters, env=env, log_path=setup.log_path, server=server)
            self.workers.append(ev)
            self.queue.put(ev)
        self.gate = threading.Condition()
        self.alone_pending = False
        self.retried_alone: set[str] = set()
        """Sources (by hash) whose verdict is the one from the run alone."""
        self.alone_lock = threading.Lock()

    def evaluate(self, src: str) -> Verdict:
        with self.gate:
            self.gate.wait_for(lambda: not self.alone_pending)
        w = self.queue.get()
        try:
            v = w.evaluate(src)
        finally:
            self.queue.put(w)
        if v.code == "oom" and self.n_workers > 1:
            v = self._evaluate_alone(src)
            self.retried_alone.add(_sha(src))
        return v

    def _evaluate_alone(self, src: str) -> Verdict:
        with self.alone_lock:
            with self.gate:
                self.alone_pending = True
            try:
                ws = [self.queue.get() for _ in range(self.n_workers)]  # the others finish their task and idle
                try:
                    v = ws[0].evaluate(src)
                finally:
                    for w in ws:
                        self.queue.put(w)
            finally:
                with self.gate:
                    self.alone_pending = False
                    self.gate.notify_all()
        if v.code == "oom":
            v.reason = f"even alone on the device: {v.reason}"[:500]
        return v

    def interrupt(self) -> None:
        for ev in self.workers:
            ev.interrupt()

    def close(self) -> None:
        for ev in self.workers:
            ev.close()

    def starts(self) -> dict[str, int]:
        return {k: sum(ev.starts[k] for ev in self.workers) for k in ("forked", "spawned")}


class _Synth:
    """One run: compose candidates bucket by bucket, screen them here (format, dedup,
    decontamination), evaluate the rest in parallel, journal every decision, write the dataset."""

    def __init__(self, config: SynthConfig, setup: _Setup, server: ForkServer | None) -> None:
        self.c, self.setup, self.server = config, setup, server
        self.index = self._reference_index()
        self.comp, self.quotas = self._composer()
        self.journal = _Journal(setup.out / "decisions.jsonl")
        self.limit = config.max_candidates or (40 * config.n + 200)
        self.new_candidates = 0
        self.evals = _Evaluators(setup, server)
        self.in_flight: dict[Future[Verdict], tuple[Candidate, str, int, str, str, float, str]] = {}
        self.inflight_b: Counter[str] = Counter()
        self.stopped_reason = ""

    def _reference_index(self) -> ReferenceIndex | None:
        if not self.c.decontaminate:
            return None
        try:
            kb = kernelbench_path(self.c.kernelbench)
        except TaskError as e:
            raise SynthError(f"decontamination needs KernelBench (or --no-decontaminate): {e}") from None
        try:
            return ReferenceIndex.kernelbench(kb)
        except TaskError as e:
            raise SynthError(str(e)) from None

    def _composer(self):
        """The composer, and the quota of each op-count bucket it can fill."""
        from .crawl import seed_library

        c, mix_d = self.c, self.setup.mix
        library = seed_library(include_transformers=c.include_transformers)
        try:
            comp = get_composer(c.composer, library=library, profile=self.setup.profile, **(c.composer_options or {}))
        except (KeyError, TypeError) as e:
            raise SynthError(f"composer {c.composer!r}: {e}") from None
        avail = comp.buckets()
        for b in list(mix_d):
            if b not in avail:  # e.g. no transformers installed: its share goes to the largest bucket
                share = mix_d.pop(b)
                top = max((k for k in mix_d if k in avail), key=lambda k: mix_d[k], default=None)
                if top is None:
                    raise SynthError(f"composer {c.composer!r} cannot fill any bucket of the mix")
                mix_d[top] += share
        return comp, quotas(c.n, mix_d)

    def _done(self) -> bool:
        return all(self.journal.acc[b] >= self.quotas[b] for b in self.quotas)

    def _info(self) -> str:
        rej, n_dec = self.journal.rej, len(self.journal.records)
        top = ", ".join(f"{k}:{v}" for k, v in rej.most_common(4))
        n_rej = sum(rej.values())
        return (f"decided {n_dec}: accepted {n_dec - n_rej}, rejected {n_rej}"
                + (f" ({top})" if top else "") + f" | in flight {len(self.in_flight)}")

    def run(self) -> SynthResult:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        n = self.c.n
        prog = Progress(TextColumn("[bold]synth"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[info]}"), disable=not self.c.progress, transient=False)
        pool = ThreadPoolExecutor(self.setup.n_workers)
        try:
            with prog:
                task_id = prog.add_task("synth", total=n, completed=min(n, len(self.journal.accepted)),
                                        info=self._info())
                self._fill(pool, prog, task_id)
                self._drain()
                prog.update(task_id, completed=min(n, len(self.journal.accepted)), info=self._info())
        finally:
            for f in list(self.in_flight):
                f.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            self.evals.close()
            self.journal.close()
        return self._write()

    def _fill(self, pool: ThreadPoolExecutor, prog: Any, task_id: Any) -> None:
        """Submit candidates until every bucket is full, the candidate limit or the time budget."""
        c, s, jn, q = self.c, self.setup, self.journal, self.quotas
        while not self._done():
            if self.new_candidates >= self.limit:
                self.stopped_reason = f"stopped after {self.limit} new candidates (max_candidates)"
                break
            if s.deadline is not None and time.time() >= s.deadline:
                self.stopped_reason = f"stopped at the time budget ({(s.deadline - s.t_start) / 60:.1f} min)"
                break
            open_b = [b for b in q if jn.acc[b] < q[b]]
            if len(self.in_flight) >= 2 * s.n_workers or not open_b:
                if not self.in_flight:
                    break
                self._collect()
                prog.update(task_id, completed=min(c.n, len(jn.accepted)), info=self._info())
                continue
            # The bucket least filled relative to its quota (in-flight candidates count as half
            # an acceptance): every bucket fills at the same pace, so a run stopped early (budget,
            # interruption) still has the requested op-count mix.
            b = min(open_b, key=lambda k: ((jn.acc[k] + 0.5 * self.inflight_b[k]) / q[k], -q[k]))
            if self.inflight_b[b] >= max(2, 4 * (q[b] - jn.acc[b])) and self.in_flight:
                self._collect()
                continue
            if self._submit_next(b, pool):
                prog.update(task_id, info=self._info())

    def _collect(self) -> None:
        """Wait for at least one evaluation in flight and decide it."""
        fin, _ = wait(list(self.in_flight), return_when=FIRST_COMPLETED)
        for f in fin:
            self._finish(f)

    def _submit_next(self, b: str, pool: ThreadPoolExecutor) -> bool:
        """Compose the next candidate of bucket ``b`` and screen it; True when it went to evaluation."""
        c, jn = self.c, self.journal
        j = jn.next_j[b]
        jn.next_j[b] += 1
        cseed = _derive_seed(c.seed, b, j)
        self.new_candidates += 1
        try:
            cand = self.comp.compose(b, cseed)
        except Exception as e:  # noqa: BLE001 - a composer bug rejects one candidate, never the run
            why = str(e) if isinstance(e, ComposeError) else f"composer failed: {type(e).__name__}: {e}"
            jn.reject(None, b, j, _sha(f"compose:{c.composer}:{c.seed}:{b}:{j}"), "compose", "compose", why[:500])
            return False
        key = _sha(cand.source)
        if key in jn.decided:
            return False
        try:
            validate_source(cand.source)
            toks = normalize(cand.source)
        except (TaskError, SyntaxError, ValueError, RecursionError) as e:
            jn.reject(cand, b, j, key, "format", "format", str(e)[:500])
            return False
        nh = norm_hash(toks)
        sim, nearest = self.index.max_similarity(cand.source) if self.index is not None else (None, "")
        if nh in jn.seen_norm:
            jn.reject(cand, b, j, key, "dedup", "duplicate", "same normalized AST as an accepted or in-flight task",
                      norm_hash=nh, max_similarity=sim, nearest_kernelbench=nearest)
            return False
        if sim is not None and sim > c.max_similarity:
            jn.reject(cand, b, j, key, "decontam", "contaminated",
                      f"AST similarity {sim:.3f} > {c.max_similarity} to {nearest}", norm_hash=nh,
                      max_similarity=sim, nearest_kernelbench=nearest)
            return False
        jn.seen_norm.add(nh)
        fut = pool.submit(self.evals.evaluate, cand.source)
        self.in_flight[fut] = (cand, b, j, key, nh, sim, nearest)
        self.inflight_b[b] += 1
        return True

    def _finish(self, fut: Future[Verdict]) -> None:
        """Journal the filters' verdict on one candidate."""
        cand, b, j, key, nh, sim, nearest = self.in_flight.pop(fut)
        self.inflight_b[b] -= 1
        try:
            v = fut.result()
        except Exception as e:  # noqa: BLE001 - never lose a decision
            v = Verdict(ok=False, code="crash", reason=f"evaluation failed: {type(e).__name__}: {e}")
        extra = dict(norm_hash=nh, max_similarity=sim, nearest_kernelbench=nearest, eager_ms=v.eager_ms,
                     compile_ms=v.compile_ms, device=self.setup.dev, phase_s=v.phase_s)
        if key in self.evals.retried_alone:
            extra["retried_alone"] = True
        if v.ok:
            self.journal.accept(cand, b, j, key, nh, **extra)
        else:
            self.journal.reject(cand, b, j, key, "filter", v.code, v.reason, **extra)

    def _drain(self) -> None:
        """Decisions already paid for are kept (they may overfill a bucket; the dataset trims).
        Under a time budget, what is still running after ``drain_s`` is abandoned undecided."""
        s, drain_s = self.setup, self.c.drain_s
        drain_end = None if s.deadline is None else max(s.deadline, time.time()) + drain_s
        while self.in_flight:
            left = None if drain_end is None else max(0.0, drain_end - time.time())
            fin, _ = wait(list(self.in_flight), timeout=left, return_when=FIRST_COMPLETED)
            if not fin:
                abandoned = len(self.in_flight)
                self.stopped_reason += f"; {abandoned} evaluation(s) abandoned after {drain_s:.0f} s of draining"
                for f in self.in_flight:
                    f.cancel()  # queued ones never start
                self.evals.interrupt()
                wait(list(self.in_flight), timeout=30)
                self.in_flight.clear()
                break
            for f in fin:
                self._finish(f)

    def _write(self) -> SynthResult:
        """The dataset (accepted tasks, at most the quota of each bucket, in journal order) and
        its statistics."""
        c, s, jn, q, server, out = self.c, self.setup, self.journal, self.quotas, self.server, self.setup.out
        take: Counter[str] = Counter()
        rows = []
        for r in jn.accepted:
            if take[r["bucket"]] < q.get(r["bucket"], 0):
                take[r["bucket"]] += 1
                rows.append({**r, "task_id": r["id"], "code": r["source"], "sha": r["key"]})
        files: dict[str, str] = {}
        jl, pq_path = write_dataset(rows, out)
        files.update(jsonl=str(jl), parquet=str(pq_path) if pq_path else "(not written: pyarrow is not installed)",
                     journal=str(jn.path))
        elapsed = time.time() - s.t_start
        settings = {"n": c.n, "composer": c.composer, "device": s.dev, "workers": s.n_workers, "seed": c.seed,
                    "sizes": s.profile, "band_ms": list(s.filters.band), "compile": c.compile,
                    "compile_backend": c.compile_backend, "decontaminate": c.decontaminate,
                    "max_similarity": c.max_similarity, "mix": s.mix, "quotas": q}
        settings["stopped"] = self.stopped_reason
        settings["accepted_this_invocation"] = len(jn.accepted) - jn.accepted_before
        settings["fork_server"] = server is not None
        settings["process_starts"] = self.evals.starts()
        if server is not None and server.info:
            settings["fork_server_warm_s"] = server.info.get("warm_s")
        stats = build_stats(jn.records, rows, settings, elapsed_s=elapsed)
        (out / "stats.json").write_text(json.dumps(stats, indent=2))
        png = plot_similarity([r["max_similarity"] for r in rows if r.get("max_similarity") is not None],
                              [r["max_similarity"] for r in jn.records if r.get("max_similarity") is not None],
                              c.max_similarity, out / "similarity.png")
        (out / "stats.md").write_text(stats_markdown(stats))
        files.update(stats=str(out / "stats.md"), stats_json=str(out / "stats.json"))
        if png:
            files["similarity_png"] = str(png)
        return SynthResult(out_dir=out, accepted=len(rows), candidates=len(jn.records), elapsed_s=elapsed,
                           stats=stats, files=files)
