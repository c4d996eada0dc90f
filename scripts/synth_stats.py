"""Stats report of a synthesis run from its decisions journal, while it runs or after it stopped
(read-only: the run's own files are not touched).

    python scripts/synth_stats.py RUN_DIR OUT_DIR [--n N] [--max-similarity 0.9]

Writes OUT_DIR/stats.json, stats.md and similarity.png for the accepted tasks so far (trimmed to
each op-count bucket's quota of N, as the dataset writer does), plus a throughput line from the
journal's timestamps (accepted per minute over the last hour and over the whole run, pauses
longer than 5 minutes excluded).
"""

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from cuda_agent.synth.compose import parse_mix, quotas
from cuda_agent.synth.pipeline import read_journal
from cuda_agent.synth.report import build_stats, busy_seconds, plot_similarity, stats_markdown


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--max-similarity", type=float, default=0.9)
    a = ap.parse_args()
    run, out = Path(a.run_dir), Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = read_journal(run / "decisions.jsonl")
    q = quotas(a.n, parse_mix(None))
    take: Counter[str] = Counter()
    rows = []
    for r in records:
        if r["status"] == "accepted" and take[r["bucket"]] < q.get(r["bucket"], 0):
            take[r["bucket"]] += 1
            rows.append(r)
    times = sorted(r["time"] for r in records)
    busy = busy_seconds(records)  # pauses > 5 min do not count
    acc_times = [r["time"] for r in records if r["status"] == "accepted"]
    now = times[-1] if times else time.time()
    last_h = sum(t > now - 3600 for t in acc_times)
    settings = {"n": a.n, "quotas": q, "journal": str(run / "decisions.jsonl"), "partial": len(rows) < a.n,
                "throughput": {"accepted_per_min_whole_run": round(60 * len(acc_times) / busy, 2) if busy else None,
                               "accepted_last_hour": last_h, "busy_minutes": round(busy / 60, 1)}}
    stats = build_stats(records, rows, settings)
    (out / "stats.json").write_text(json.dumps(stats, indent=2))
    plot_similarity([r["max_similarity"] for r in rows if r.get("max_similarity") is not None],
                    [r["max_similarity"] for r in records if r.get("max_similarity") is not None],
                    a.max_similarity, out / "similarity.png")
    (out / "stats.md").write_text(stats_markdown(stats))
    print(json.dumps({"accepted": len(rows), "candidates": len(records), **settings["throughput"]}))


if __name__ == "__main__":
    main()
