"""Dataset output and the stats report: parquet + JSONL with a ``code`` column, ``stats.json``,
``stats.md`` and the similarity histogram (``similarity.png``)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

COLUMNS = ("task_id", "code", "sha", "norm_hash", "bucket", "op_count", "ops", "categories", "composer", "seed",
           "max_similarity", "nearest_kernelbench", "eager_ms", "device", "family")


def write_dataset(rows: list[dict[str, Any]], out_dir: Path) -> tuple[Path, Path | None]:
    """``tasks.jsonl`` and ``tasks.parquet`` (None when pyarrow is not installed)."""
    recs = [{k: r.get(k) for k in COLUMNS} for r in rows]
    jl = out_dir / "tasks.jsonl"
    with jl.open("w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return jl, None
    table = pa.Table.from_pylist(recs, schema=pa.schema([
        ("task_id", pa.string()), ("code", pa.string()), ("sha", pa.string()), ("norm_hash", pa.string()),
        ("bucket", pa.string()), ("op_count", pa.int64()), ("ops", pa.list_(pa.string())),
        ("categories", pa.list_(pa.string())), ("composer", pa.string()), ("seed", pa.int64()),
        ("max_similarity", pa.float64()), ("nearest_kernelbench", pa.string()), ("eager_ms", pa.float64()),
        ("device", pa.string()), ("family", pa.string())]))
    pq_path = out_dir / "tasks.parquet"
    pq.write_table(table, pq_path)
    return jl, pq_path


def histogram(values: list[float], bins: int = 20) -> list[int]:
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, max(0, int(v * bins)))] += 1
    return counts


def plot_similarity(accepted: list[float], all_candidates: list[float], threshold: float, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    edges = [i / 40 for i in range(41)]
    if all_candidates:
        ax.hist(all_candidates, bins=edges, alpha=0.4, label=f"all candidates ({len(all_candidates)})")
    if accepted:
        ax.hist(accepted, bins=edges, alpha=0.8, label=f"accepted tasks ({len(accepted)})")
    ax.axvline(threshold, color="red", linestyle="--", label=f"threshold {threshold}")
    ax.set_xlabel("max AST similarity to KernelBench L1-L3")
    ax.set_ylabel("tasks")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def build_stats(records: list[dict[str, Any]], accepted: list[dict[str, Any]], settings: dict[str, Any],
                elapsed_s: float | None = None) -> dict[str, Any]:
    rejected = [r for r in records if r["status"] == "rejected"]
    sims_acc = [r["max_similarity"] for r in accepted if r.get("max_similarity") is not None]
    sims_all = [r["max_similarity"] for r in records if r.get("max_similarity") is not None]
    n_acc = len(accepted)
    n_passed = sum(1 for r in records if r["status"] == "accepted")  # the dataset keeps up to each bucket's quota
    mix = Counter(r["bucket"] for r in accepted)
    cats = Counter(c for r in accepted for c in r.get("categories") or [])
    ops = Counter(o for r in accepted for o in r.get("ops") or [])
    return {
        "accepted": n_acc, "candidates": len(records), "rejected": len(rejected),
        "acceptance_rate": n_passed / len(records) if records else 0.0,
        "op_count_mix": {k: {"count": v, "share": v / n_acc} for k, v in sorted(mix.items())},
        "categories": dict(cats.most_common()),
        "distinct_ops": len(ops), "top_ops": dict(ops.most_common(25)),
        "rejections_by_code": dict(Counter(r["code"] for r in rejected).most_common()),
        "rejections_by_stage": dict(Counter(r["stage"] for r in rejected).most_common()),
        "top_rejection_reasons": dict(Counter(_shape_of(r["reason"]) for r in rejected).most_common(25)),
        "similarity_histogram_accepted": histogram(sims_acc),
        "similarity_histogram_all": histogram(sims_all),
        "max_similarity_accepted": max(sims_acc) if sims_acc else None,
        "eager_ms": _quantiles([r["eager_ms"] for r in accepted if r.get("eager_ms") is not None]),
        "filter_seconds": filter_seconds(records),
        "gpu_estimate": gpu_estimate(records),
        "elapsed_s": elapsed_s, "busy_s": busy_seconds(records),
        "accepted_decisions": n_passed,
        "settings": settings,
    }


PAUSE_S = 300.0


def busy_seconds(records: list[dict[str, Any]]) -> float:
    """Time the journal was being written: the sum of gaps between consecutive decisions, gaps
    longer than :data:`PAUSE_S` (the run was stopped) left out.  Spans every invocation of a
    resumed run, unlike one invocation's wall time."""
    times = sorted(r["time"] for r in records if r.get("time") is not None)
    return sum(b - a for a, b in zip(times, times[1:]) if b - a <= PAUSE_S)


def gpu_estimate(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How the composer's GPU-time estimate compared with the measured eager time (measured/estimate)."""
    pairs = [(r["eager_ms"], (r.get("made") or {}).get("est_gpu_ms")) for r in records if r.get("eager_ms")]
    ratios = [m / e for m, e in pairs if e]
    if not ratios:
        return {}
    return {"n": len(ratios), "measured_over_estimate": _quantiles(ratios),
            "within_2x": sum(0.5 <= x <= 2 for x in ratios) / len(ratios)}


def filter_seconds(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the evaluation time went: seconds per filter phase, summed and per evaluated task."""
    ev = [r for r in records if r.get("phase_s")]
    tot: Counter[str] = Counter()
    for r in ev:
        tot.update(r["phase_s"])
    n = len(ev)
    return {"evaluated": n, "total": {k: round(v, 1) for k, v in tot.items()},
            "mean": {k: round(v / n, 3) for k, v in tot.items()} if n else {}}


def _shape_of(reason: str) -> str:
    """A rejection message with its numbers replaced by N, so that messages group by kind."""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", reason)[:120]


def _quantiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    xs = sorted(xs)
    return {q: xs[min(len(xs) - 1, int(p * len(xs)))] for q, p in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9))} | {
        "min": xs[0], "max": xs[-1]}


def stats_markdown(stats: dict[str, Any]) -> str:
    s = stats
    L = ["# Synthesis run stats", "",
         f"- dataset: **{s['accepted']}** tasks; candidates decided: {s['candidates']} = "
         f"{s['accepted_decisions']} accepted + {s['rejected']} rejected (acceptance {s['acceptance_rate']:.1%})"
         + (f"; {s['accepted_decisions'] - s['accepted']} accepted over a full op-count quota are not in the dataset"
            if s["accepted_decisions"] > s["accepted"] else "")
         + f"; distinct seed ops used: {s['distinct_ops']}"]
    st = s.get("settings") or {}
    if s.get("elapsed_s") and "accepted_this_invocation" in st:
        L.append(f"- this invocation: {s['elapsed_s']:.0f} s wall, {st['accepted_this_invocation']} new accepted "
                 f"({60 * st['accepted_this_invocation'] / max(s['elapsed_s'], 1e-9):.2f} accepted tasks/min)")
    if s.get("busy_s"):
        L.append(f"- whole journal: {s['busy_s'] / 60:.1f} min of activity (pauses > {PAUSE_S / 60:.0f} min left out), "
                 f"{s['accepted_decisions']} accepted decisions "
                 f"({60 * s['accepted_decisions'] / s['busy_s']:.2f} accepted tasks/min)")
    L.append(f"- eager ms (accepted): {json.dumps({k: round(v, 3) for k, v in s['eager_ms'].items()})}")
    fs = s.get("filter_seconds") or {}
    if fs.get("evaluated"):
        L.append(f"- filter seconds per evaluated task ({fs['evaluated']} tasks, one evaluation process): "
                 + ", ".join(f"{k} {v:.3f}" for k, v in fs["mean"].items()))
    ge = s.get("gpu_estimate") or {}
    if ge:
        L.append(f"- measured eager / estimated GPU ms ({ge['n']} timed candidates): "
                 f"{json.dumps({k: round(v, 2) for k, v in ge['measured_over_estimate'].items()})}, "
                 f"within 2x: {ge['within_2x']:.0%}")
    L.append(f"- settings: `{json.dumps(s['settings'])}`")
    L += ["", "## Op-count mix (accepted)", "", "| bucket | count | share |", "|---|---|---|"]
    L += [f"| {k} | {v['count']} | {v['share']:.2%} |" for k, v in s["op_count_mix"].items()]
    L += ["", "## Categories (op occurrences in accepted tasks)", "", "| category | ops |", "|---|---|"]
    L += [f"| {k} | {v} |" for k, v in s["categories"].items()]
    L += ["", "## Rejections by reason code", "", "| code | count |", "|---|---|"]
    L += [f"| {k} | {v} |" for k, v in s["rejections_by_code"].items()]
    L += ["", "## Most frequent rejection messages", "", "| message | count |", "|---|---|"]
    L += [f"| {k.replace('|', '/')} | {v} |" for k, v in s["top_rejection_reasons"].items()]
    L += ["", "## Max AST similarity to KernelBench (20 bins over [0, 1])", "",
          "| bin | accepted | all candidates |", "|---|---|---|"]
    for i, (a, b) in enumerate(zip(s["similarity_histogram_accepted"], s["similarity_histogram_all"])):
        L.append(f"| {i / 20:.2f}-{(i + 1) / 20:.2f} | {a} | {b} |")
    L += ["", "![similarity](similarity.png)"]
    return "\n".join(L) + "\n"
