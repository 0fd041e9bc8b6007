"""The HTML report's charts: inline SVG from matplotlib (the `bench` extra). Every chart prints
its values beside its marks, and a log axis labels its ticks in plain numbers (0.5, 1, 2, 5,
10 ...), so a reader needs no ruler."""

from __future__ import annotations

import io
from typing import Any

MISSING = ("the HTML report needs matplotlib: pip install 'wasmrun[bench]' "
           "(the table and the JSON need nothing more)")


def pyplot() -> Any:
    """matplotlib.pyplot, or a one-line error (RuntimeError) naming the extra that brings it."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(MISSING) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text as text: a smaller file, and searchable
    return plt


def _svg(plt: Any, fig: Any, title: str) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    svg = text[text.index("<svg"):]
    # An accessible name, and a hook for the browser test.
    return svg.replace("<svg", f'<svg role="img" aria-label="{_attr(title)}"', 1)


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _log_axis(axis: Any) -> None:
    """Ticks at 1, 2 and 5 of each decade, printed as plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _fmt(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:,.0f}"


def distributions(plt: Any, row: dict[str, Any]) -> str:
    """One row's samples per system: box p25-p75, whiskers p10-p90, the p50 and p99 printed."""
    labels = [k for k in row["samples_ms"] if row["samples_ms"][k]]
    fig, ax = plt.subplots(figsize=(9, 0.65 * len(labels) + 1.3))
    data = [row["samples_ms"][k] for k in labels]
    ax.boxplot(data, orientation="horizontal", whis=(10, 90), showfliers=True)
    ax.set_yticks(range(1, len(labels) + 1), labels)
    ax.set_xscale("log")
    _log_axis(ax.xaxis)
    hi = max(max(d) for d in data)
    for i, label in enumerate(labels, start=1):
        fig_ = row["systems"].get(label, {})
        if fig_.get("p50_ms") is not None:
            ax.annotate(f"p50 {_fmt(fig_['p50_ms'])}, p99 {_fmt(fig_['p99_ms'])} ms", (hi, i),
                        xytext=(8, 0), textcoords="offset points", va="center", fontsize="small")
    ax.set_xlabel("ms (log scale; box: p25-p75, whiskers: p10-p90, dots: outside p10-p90)")
    ax.set_title(row["label"])
    return _svg(plt, fig, f"chart: {row['label']}")


def compute_ratios(plt: Any, rows: list[dict[str, Any]]) -> str:
    systems = sorted({s for r in rows for s in r["systems"] if s != r["baseline"]})
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) * max(1, len(systems)) + 1.5))
    height = 0.8 / max(1, len(systems))
    for j, system in enumerate(systems):
        ys = [i + j * height for i in range(len(rows))]
        xs = [r["systems"].get(system, {}).get("ratio") or 0.0 for r in rows]
        bars = ax.barh(ys, xs, height=height, label=system)
        ax.bar_label(bars, labels=[f"{x:.2f}x" if x else "" for x in xs], padding=3, fontsize="x-small")
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))], [r["label"] for r in rows])
    for x, style in ((1, "-"), (2, "--"), (3, ":")):
        ax.axvline(x, color="grey", linestyle=style, linewidth=1)
    ax.set_xscale("log")
    _log_axis(ax.xaxis)
    ax.set_xlabel("time / native CPython (p50; log scale; lines at 1x, 2x, 3x)")
    ax.legend(loc="lower right", fontsize="small")
    ax.invert_yaxis()
    return _svg(plt, fig, "chart: compute relative to native CPython")


def phases(plt: Any, ph: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(9, 2.0))
    left = 0.0
    for name, ms in ph["phases_ms"].items():
        us = ms * 1000
        ax.barh([0], [us], left=left, label=f"{name} {us:.0f} us")
        left += us
    ax.set_yticks([])
    ax.set_xlabel(f"microseconds (p50 of each phase; total {left:.0f} us)")
    ax.legend(ncol=4, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return _svg(plt, fig, "chart: one hello by phase")


def memory(plt: Any, mem: dict[str, Any]) -> str:
    counts = [int(k) for k in mem["by_workers"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("total_rss_mb", "total RSS"), ("total_pss_mb", "total PSS")):
        ys = [mem["by_workers"][str(c)][key] for c in counts]
        ax.plot(counts, ys, marker="o", label=label)
        for c, y in zip(counts, ys, strict=True):
            ax.annotate(f"{y:.0f} MB", (c, y), xytext=(4, 4), textcoords="offset points", fontsize="small")
    ax.set_xticks(counts)
    ax.set_xlabel("workers")
    ax.set_ylabel("MB (server + workers)")
    ax.legend()
    return _svg(plt, fig, "chart: memory by workers")


def scaling(plt: Any, scaling: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    counts: list[int] = []
    for job, by_count in scaling["jobs"].items():
        counts = [int(c) for c in by_count]
        ys = [by_count[str(c)]["runs_per_s"] for c in counts]
        ax.plot(counts, ys, marker="o", label=job)
        for c, y in zip(counts, ys, strict=True):
            ax.annotate(f"{y:,.0f}/s", (c, y), xytext=(4, 4), textcoords="offset points", fontsize="small")
        ax.plot(counts, [c * by_count["1"]["runs_per_s"] for c in counts], linestyle=":", color="grey")
    ax.set_xticks(counts)
    ax.set_xlabel("concurrent clients (dotted: clients x one client)")
    ax.set_ylabel("runs per second (log scale)")
    ax.set_yscale("log")
    _log_axis(ax.yaxis)
    ax.legend()
    return _svg(plt, fig, "chart: runs per second by concurrent clients")
