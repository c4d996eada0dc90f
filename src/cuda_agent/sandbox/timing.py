"""One timing recipe, shared by the candidate and the eager / ``torch.compile`` baselines.

Recipe (GPU): warm up for ``warmup_ms`` of wall time (clocks up, lazy init done); pick
``k`` calls per sample so a sample lasts about ``sample_ms``; before each sample write a
buffer twice the size of L2 (cold cache), then record a CUDA event, run ``k`` calls that
rotate over several input sets (so repeated inputs are not served from L2), record an
event.  Samples are collected in rounds until the 95% confidence interval of the median
is within ``target`` of it (or a cap on samples / seconds).  The result is the median
per-call time and the inter-quartile spread.  On the CPU the host clock replaces events.

Nothing a cache can serve: the timed calls rotate over a pool of input sets (as many as one
sample has calls, within a memory budget), and before every sample the sets it will use get
values never seen before - each a drawn set times a random positive factor per element (a
window at a random offset of a private random table) and per set - so a result remembered
by address, shape or a checksum of sampled values is never valid for a timed call (the
refill is untimed; integer inputs, indices, keep their values).  Candidate and baselines
are timed the same way.

Two cross-checks ride along: ``spot`` calls, placed at random sample slots inside the
loop (untimed), let the caller check outputs produced *during* timing; and after the
samples, a run of back-to-back calls ends with a device-wide synchronize and is timed
on the host clock (``wall_ms``), so work hidden on another stream, which the events on
the current stream do not see, shows up as wall time far above the median.

The clock functions are bound at import, before any candidate code is loaded, so a
candidate that patches ``torch.cuda.Event`` or ``time.perf_counter`` later does not
change what this module calls.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

_perf = time.perf_counter
_Event = torch.cuda.Event
_elapsed = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_sync = torch.cuda.synchronize


@dataclass(frozen=True)
class Recipe:
    """Parameters of the timing recipe (recorded in ``Timing.method``)."""

    warmup_ms: float = 150.0
    sample_ms: float = 1.0
    min_samples: int = 20
    max_samples: int = 400
    round_size: int = 10
    target: float = 0.0025
    budget_s: float = 15.0
    flush_l2: bool = True
    fresh_inputs: bool = True
    """New input values before every sample (``InputPool``); off, the sets keep their values."""
    cpu_threads: int = 1
    """Threads of torch's CPU ops while timing on the CPU (0: torch's default).  One: a thread
    pool that waits for a descheduled thread makes times bimodal (0.3 ms or 75 ms) as soon as
    anything else runs; a single thread is slowed only in proportion to the load."""

    def describe(self, device: str) -> str:
        clock = "cuda-events" if device == "cuda" else \
            f"host-clock, {self.cpu_threads or 'default'} thread{'s' if self.cpu_threads != 1 else ''}"
        return (f"{clock}; warmup {self.warmup_ms:g} ms; ~{self.sample_ms:g} ms samples of k calls over "
                f"rotating input sets{' refilled with new values before each sample' if self.fresh_inputs else ''}; "
                f"{'L2 flushed before each sample; ' if self.flush_l2 and device == 'cuda' else ''}"
                f"median until 95% CI within {self.target:.2%} (n {self.min_samples}-{self.max_samples})")


def ci_halfwidth(sorted_xs: list[float]) -> float:
    """Relative half-width of a distribution-free 95% CI of the median."""
    n = len(sorted_xs)
    if n < 5:
        return math.inf
    d = 1.96 * math.sqrt(n) / 2
    lo = sorted_xs[max(0, int(math.floor(n / 2 - d)))]
    hi = sorted_xs[min(n - 1, int(math.ceil(n / 2 + d)))]
    med = sorted_xs[n // 2]
    return (hi - lo) / 2 / med if med > 0 else math.inf


def summarize(per_call_ms: list[float]) -> dict[str, float]:
    xs = sorted(per_call_ms)
    n = len(xs)
    med = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    q1, q3 = xs[n // 4], xs[(3 * n) // 4]
    return {"median_ms": med, "spread": (q3 - q1) / med if med > 0 else 0.0, "n": n, "min_ms": xs[0]}


MAX_CALLS = 1000
"""Most calls in one sample (and sets in the pool)."""
POOL_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}
"""Memory for the pool of timed input sets (beyond the drawn ones)."""
ALIGN = 128
"""Each pooled set starts at a multiple of this many elements (vectorised loads stay aligned)."""


class InputPool:
    """The input sets of the timing loop: the drawn ``bases`` and copies of them, up to
    ``max_sets`` within ``POOL_BYTES``; ``refresh(indices)`` gives those sets new values.

    Floating-point inputs that are contiguous live as rows of one buffer per argument, so a
    refresh is a handful of operations however many sets it touches: row j becomes base
    ``j mod len(bases)`` times a window, at a random offset, of a private random table (a
    different positive factor per element, in [0.8, 1.25]) times a random factor per set.
    The values keep their sign, zeros and rough scale (what the task's domain needs) but
    were never seen before.  Other inputs (integers, non-contiguous views) keep their values."""

    def __init__(self, bases: list[list], device: str, max_sets: int, rng: random.Random) -> None:
        self.bases = bases
        self.rng = rng
        nb = max(1, sum(x.numel() * x.element_size() for x in bases[0] if isinstance(x, torch.Tensor)))
        self.n = max(len(bases), min(max_sets, POOL_BYTES.get(device, POOL_BYTES["cpu"]) // nb))
        self.sets: list[list] = [list(bases[j % len(bases)]) for j in range(self.n)]
        self._stacks: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]] = []
        gen = torch.Generator(device=bases[0][0].device if bases[0] and isinstance(bases[0][0], torch.Tensor)
                              else "cpu")
        gen.manual_seed(rng.getrandbits(63))
        for p, x in enumerate(bases[0]):
            col = [b[p] for b in bases]
            if not all(isinstance(t, torch.Tensor) and t.is_floating_point() and t.is_contiguous() and t.numel()
                       and t.shape == x.shape and t.dtype == x.dtype and t.device == x.device for t in col):
                continue
            n = x.numel()
            width = -(-n // ALIGN) * ALIGN
            if x.device != gen.device:
                continue
            base = torch.stack([t.reshape(-1) for t in col])
            buf = torch.empty((self.n, width), dtype=x.dtype, device=x.device)
            buf[:, :n].copy_(base[torch.arange(self.n, device=x.device) % len(bases)])
            table = torch.empty(2 * n, dtype=torch.float32, device=x.device).uniform_(0.8, 1.25, generator=gen)
            for j in range(self.n):
                self.sets[j][p] = buf[j, :n].view(x.shape)
            self._stacks.append((buf, base, table.to(x.dtype), n))

    def refresh(self, indices: list[int]) -> None:
        if not self._stacks or not indices:
            return
        k = len(indices)
        for buf, base, table, n in self._stacks:
            dev = buf.device
            rows = torch.tensor(indices, device=dev)
            src = base.index_select(0, torch.tensor([j % base.shape[0] for j in indices], device=dev))
            offs = torch.tensor([self.rng.randrange(n + 1) for _ in range(k)], device=dev)
            src.mul_(table.unfold(0, n, 1).index_select(0, offs))
            src.mul_(torch.tensor([self.rng.uniform(0.8, 1.25) for _ in range(k)], device=dev,
                                  dtype=torch.float32).to(buf.dtype).view(-1, 1))
            buf[:, :n].index_copy_(0, rows, src)


class _Cursor:
    """``call(i)`` over the input sets in turn.  One index runs on through warm-up, samples,
    spot checks and the wall check, so that no two consecutive calls use the same set."""

    def __init__(self, call: Callable[[int], Any], n_sets: int) -> None:
        self.call, self.n_sets, self.i = call, n_sets, 0

    def __call__(self, n: int = 1) -> None:
        for _ in range(n):
            self.call(self.i % self.n_sets)
            self.i += 1

    def current(self) -> int:
        return self.i % self.n_sets

    def next_sets(self, n: int) -> list[int]:
        return [(self.i + j) % self.n_sets for j in range(n)]

    def spot(self, spot: Callable[[int], Any]) -> None:
        """An untimed spot check on the next set, which the next timed call then skips."""
        spot(self.current())
        self.i += 1


def measure(call: Callable[[int], Any], n_sets: int, device: str, recipe: Recipe = Recipe(),
            spot: Callable[[int], Any] | None = None, n_spot: int = 0,
            rng: random.Random | None = None, refresh: Callable[[list[int]], Any] | None = None) -> dict[str, Any]:
    """Time ``call(i)`` (i = input-set index).  Returns per-call sample times and the summary.

    ``spot(i)`` is called (untimed) before ``n_spot`` randomly chosen samples among the first
    ``min_samples``, before later samples at the same rate, and once at the very end.
    ``refresh(indices)`` (untimed) gives the sets the next sample uses new values; with it a
    sample has at most ``n_sets`` calls, so no timed call sees values an earlier one saw."""
    cuda = device == "cuda"
    sync = _sync if cuda else (lambda: None)
    calls = _Cursor(call, n_sets)
    _warm_up(calls, recipe, sync)
    k = _calls_per_sample(calls, recipe, sync, fresh_inputs=refresh is not None)
    samples = _sample(calls, k, cuda, recipe, sync, refresh, spot, n_spot, rng or random.Random())
    summary = summarize(samples)
    wall_ms, enqueue_ms = _wall_check(calls, k, summary["median_ms"], recipe, sync, refresh)
    if spot:
        spot(calls.current())
    return {**summary, "calls_per_sample": k, "samples_ms": samples, "wall_ms": wall_ms,
            "enqueue_ms": enqueue_ms, "method": recipe.describe(device)}


def _warm_up(calls: _Cursor, recipe: Recipe, sync: Callable[[], Any]) -> None:
    """At least 3 calls and ``warmup_ms`` of wall time (synchronized now and then, so that the
    queue does not run far ahead of the clock)."""
    t0 = _perf()
    n = 0
    while n < 3 or (_perf() - t0) * 1e3 < recipe.warmup_ms:
        calls()
        n += 1
        if n % 8 == 0 or n < 8:
            sync()
    sync()


def _calls_per_sample(calls: _Cursor, recipe: Recipe, sync: Callable[[], Any], fresh_inputs: bool) -> int:
    """k: how many back-to-back calls one sample times, from an estimate of one call (wall,
    synchronized), so that a sample lasts about ``sample_ms``; with fresh inputs at most one
    call per input set."""
    t1 = _perf()
    calls(3)
    sync()
    est_ms = max((_perf() - t1) * 1e3 / 3, 1e-4)
    k = max(1, min(MAX_CALLS, int(round(recipe.sample_ms / est_ms))))
    return min(k, calls.n_sets) if fresh_inputs else k


def _sample(calls: _Cursor, k: int, cuda: bool, recipe: Recipe, sync: Callable[[], Any],
            refresh: Callable[[list[int]], Any] | None, spot: Callable[[int], Any] | None, n_spot: int,
            rng: random.Random) -> list[float]:
    """Per-call times of samples of ``k`` calls, in rounds of ``round_size``, until the median's
    confidence interval is narrow enough, ``max_samples`` or the time budget."""
    flush = None
    if cuda and recipe.flush_l2:
        l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 50 << 20)
        flush = torch.empty(max(2 * l2, 1 << 20), dtype=torch.int8, device="cuda")
    # spots: n_spot among the first min_samples, then each later sample with the same rate
    # (so waiting out the start does not help), and one after the last sample and the wall check
    spot_at = set(rng.sample(range(recipe.min_samples), min(n_spot, recipe.min_samples))) if spot else set()
    late_rate = n_spot / max(recipe.min_samples, 1)
    n_started = 0

    def before_sample() -> None:
        nonlocal n_started
        if spot and (n_started in spot_at or (n_started >= recipe.min_samples and rng.random() < late_rate)):
            calls.spot(spot)
        n_started += 1
        if refresh is not None:  # the sets of the next k calls get new values (untimed)
            refresh(calls.next_sets(k))

    samples: list[float] = []
    deadline = _perf() + recipe.budget_s
    while True:
        if cuda:
            events = []
            for _ in range(recipe.round_size):
                before_sample()
                if flush is not None:
                    flush.zero_()
                s, e = _Event(enable_timing=True), _Event(enable_timing=True)
                _record(s)
                calls(k)
                _record(e)
                events.append((s, e))
            sync()
            samples += [_elapsed(s, e) / k for s, e in events]
        else:
            for _ in range(recipe.round_size):
                before_sample()
                t = _perf()
                calls(k)
                samples.append((_perf() - t) * 1e3 / k)
        n = len(samples)
        if n >= recipe.max_samples or _perf() > deadline:
            return samples
        if n >= recipe.min_samples and ci_halfwidth(sorted(samples)) <= recipe.target:
            return samples


def _wall_check(calls: _Cursor, k: int, median_ms: float, recipe: Recipe, sync: Callable[[], Any],
                refresh: Callable[[list[int]], Any] | None) -> tuple[float, float]:
    """The wall-clock cross-check: back-to-back calls closed by a device-wide synchronize.
    Returns (wall ms per call, the host's own ms per call to issue them: slow on a busy CPU)."""
    m = max(k, int(math.ceil(max(10 * recipe.sample_ms, 20.0) / max(median_ms, 1e-4))))
    m = min(m, 10_000)
    # with fresh inputs, in runs of at most n_sets calls, each refilled first (untimed); at most
    # 8 runs (a refill costs more than a run of fast calls: a cached solution's 10 000 calls
    # would spend most of the command's time refilling)
    run = m if refresh is None else calls.n_sets
    if refresh is not None:
        m = min(m, max(k, 8 * calls.n_sets))
    wall = enqueue = 0.0
    done = 0
    while done < m:
        step = min(run, m - done)
        if refresh is not None:
            refresh(calls.next_sets(step))
        sync()
        t = _perf()
        calls(step)
        enqueue += _perf() - t
        sync()
        wall += _perf() - t
        done += step
    return wall * 1e3 / m, enqueue * 1e3 / m
