"""The evaluation's report: ``metrics.json``, ``report.md`` and PNG plots in OUT.

``report.md`` has the metrics in the columns of the paper's Table 1, the same table side by
side with the paper's reported numbers (labelled as the paper's: another model, GPU and
KernelBench version), a per-task table and the plots: the per-level distribution of
speedups vs torch.compile (log scale, a line at 1.0) and the pass / faster-than-eager /
faster-than-compile rates per level.  Plots use matplotlib's Agg back-end; without
matplotlib the report says so and is written without them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .metrics import Metrics, SplitMetrics
from .rows import ResultRow

PAPER_TABLE1: dict[str, tuple[float, float, float, float, float]] = {
    # split: pass %, faster vs eager %, faster vs compile %, geomean vs eager, geomean vs compile
    "L1": (100.0, 99.0, 97.0, 2.48, 1.87),
    "L2": (100.0, 100.0, 100.0, 3.27, 2.80),
    "L3": (94.0, 94.0, 90.0, 1.80, 1.52),
    "overall": (98.8, 98.4, 96.8, 2.60, 2.11),
}
"""CUDA Agent's Table 1 (Dai et al. 2026, SPEC section 5), for reference only."""

SPEEDUP_PLOT = "speedup_vs_compile.png"
RATES_PLOT = "rates.png"


def where(device: str) -> str:
    """The device named in words, beside every figure measured on it."""
    return "the GPU" if device == "cuda" else "the CPU"


@dataclass
class Written:
    """Paths of what the report wrote."""

    metrics: Path
    report: Path
    plots: list[Path]
    warnings: list[str]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _x(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.1f} us" if x < 1 else f"{x:.3f} ms"


def table_row(m: SplitMetrics) -> list[str]:
    return [m.split, str(m.tasks), _pct(m.pass_rate), _pct(m.faster_eager_rate), _pct(m.faster_compile_rate),
            _x(m.geomean_eager), _x(m.geomean_compile)]


HEADER = ["split", "tasks", "pass", "faster vs eager", "faster vs compile", "geomean vs eager", "geomean vs compile"]


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def _side_by_side(metrics: Metrics, device: str) -> list[str]:
    rows = []
    for m in metrics.splits:
        paper = PAPER_TABLE1.get(m.split)
        ours = table_row(m)[2:]
        theirs = (["-"] * 5 if paper is None
                  else [f"{paper[0]:.1f}", f"{paper[1]:.1f}", f"{paper[2]:.1f}", f"{paper[3]:.2f}x", f"{paper[4]:.2f}x"])
        rows.append([m.split] + [f"{a} / {b}" for a, b in zip(ours, theirs)])
    return _md_table([f"split (ours on {where(device)} / paper on their GPU)"] + HEADER[2:], rows)


def markdown(metrics: Metrics, rows: Sequence[ResultRow], info: dict[str, Any], plots: Sequence[Path],
             warnings: Sequence[str] = ()) -> str:
    dev = str(info.get("device", ""))
    kernelbench = "suite" not in info
    lines = [f"# {'KernelBench' if kernelbench else 'Suite'} evaluation on {where(dev)} ({dev})", ""]
    for k in ("solutions", "kernelbench", "suite", "device", "rules", "timing", "levels", "tasks", "date"):
        if k in info:
            lines.append(f"- {k}: {info[k]}" + (f" (every time and speedup below was measured on {where(dev)})"
                                                 if k == "device" else ""))
    lines += ["", f"## Metrics (SPEC section 5), measured on {where(dev)}", "",
              "Rates are percentages of all tasks of the split (a missing or failing solution counts as a "
              "failure); faster means correct and speedup > 1.0; geometric means are over the correct, "
              "timed solutions; overall weights each level by its task count.", ""]
    lines += _md_table(HEADER, [table_row(m) for m in metrics.splits])
    if not info.get("timing", True):
        lines += ["", "Timing was off (`--no-timing`): no speedups, faster rates and geometric means are n/a."]
    if kernelbench:
        lines += ["", "## Side by side with the paper's Table 1", "",
                  f"Each cell is `ours / paper`: ours measured on {where(dev)} ({dev}) here; the paper's numbers "
                  "are CUDA Agent's (Seed1.6-based, on their GPU, their KernelBench version), quoted from the paper "
                  "for reference; they are not produced here."
                  + (" CPU speedups and GPU speedups are not comparable." if dev != "cuda" else ""), ""]
        lines += _side_by_side(metrics, dev)
    else:
        lines += ["", "(This suite is not KernelBench: no comparison with the paper's Table 1.)"]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    lines += ["", "## Per task", ""]
    per = [[r.label, r.name or "-", r.verdict, _x(r.speedup_eager) if r.speedup_eager else "-",
            _x(r.speedup_compile) if r.speedup_compile else "-", _ms(r.t_gen_ms), _ms(r.t_eager_ms),
            _ms(r.t_compile_ms), ",".join(map(str, r.exploit_classes)) or "-",
            (r.error or "")[:160] or "-"] for r in rows]
    lines += _md_table(["task", "name", "verdict", "vs eager", "vs compile", "time", "eager", "compile",
                        "exploit classes", "error (first line)"], per)
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"


def plot_speedups(rows: Sequence[ResultRow], levels: Sequence[int], path: Path, device: str = "cuda") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import FuncFormatter, LogLocator

    fig, ax = plt.subplots(figsize=(max(5.0, 1.8 * len(levels) + 2.0), 4.2))
    data = [[r.speedup_compile for r in rows if r.level == lv and r.correct and r.speedup_compile]
            for lv in levels]
    for i, ys in enumerate(data, 1):
        if ys:
            ax.boxplot([ys], positions=[i], widths=0.5, showfliers=False)
            jitter = [i + 0.18 * ((k * 0.618) % 1.0 - 0.5) for k in range(len(ys))]
            ax.scatter(jitter, ys, s=14, alpha=0.7, zorder=3)
        else:
            ax.text(i, 1.0, "no timed\ncorrect solution", ha="center", va="bottom", fontsize=8, color="0.4")
    ax.axhline(1.0, color="red", linestyle="--", linewidth=1, label="torch.compile (1.0x)")
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, 0.8), max(hi, 1.25))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xticks(range(1, len(levels) + 1))
    ax.set_xticklabels([f"L{lv}\n(n={len(ys)})" for lv, ys in zip(levels, data)])
    ax.set_xlim(0.4, len(levels) + 0.6)
    ax.set_ylabel("speedup vs torch.compile (log)")
    ax.set_title(f"Correct solutions: speedup vs torch.compile, on {where(device)}", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_rates(metrics: Metrics, path: Path, device: str = "cuda") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = metrics.splits
    series = [("pass", [m.pass_rate for m in splits]),
              ("faster than eager", [m.faster_eager_rate or 0.0 for m in splits]),
              ("faster than torch.compile", [m.faster_compile_rate or 0.0 for m in splits])]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(splits) + 2), 4.2))
    w = 0.8 / len(series)
    for k, (name, vals) in enumerate(series):
        xs = [i + (k - 1) * w for i in range(len(splits))]
        bars = ax.bar(xs, vals, width=w, label=name)
        ax.bar_label(bars, labels=[f"{v:.0f}" for v in vals], fontsize=7, padding=1)
    ax.set_xticks(range(len(splits)))
    ax.set_xticklabels([f"{m.split}\n(n={m.tasks})" for m in splits])
    ax.set_ylim(0, 110)
    ax.set_ylabel("% of tasks")
    ax.set_title(f"Pass and faster rates, on {where(device)}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: str | Path, metrics: Metrics, rows: Sequence[ResultRow], info: dict[str, Any],
          warnings: Sequence[str] = ()) -> Written:
    """Write metrics.json, the plots and report.md into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    info = {**info, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    warns = list(warnings)
    plots: list[Path] = []
    levels = [int(m.split[1:]) for m in metrics.levels]
    try:
        plot_speedups(rows, levels, out / SPEEDUP_PLOT, str(info.get("device", "cuda")))
        plot_rates(metrics, out / RATES_PLOT, str(info.get("device", "cuda")))
        plots = [out / SPEEDUP_PLOT, out / RATES_PLOT]
    except ImportError:
        warns.append("matplotlib is not installed (pip install 'cuda-agent[data]'): no plots")
    mpath = out / "metrics.json"
    mpath.write_text(json.dumps({"info": info, "metrics": metrics.to_dict(),
                                 "paper_table1": {k: dict(zip(HEADER[2:], v)) for k, v in PAPER_TABLE1.items()},
                                 "rows": [r.to_dict() for r in rows]}, indent=1) + "\n")
    rpath = out / "report.md"
    rpath.write_text(markdown(metrics, rows, info, plots, warns))
    return Written(mpath, rpath, plots, warns)
