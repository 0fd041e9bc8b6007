"""The HTML report: one self-contained file, charts as inline SVG (matplotlib, the `bench` extra)."""

from __future__ import annotations

import html
import io
from typing import Any

from wasmrun.bench.report import table

MISSING = ("the HTML report needs matplotlib: pip install 'wasmrun[bench]' "
           "(the table and the JSON need nothing more)")


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(MISSING) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text as text: a smaller file, and searchable

    return plt


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    _pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _distributions(plt: Any, row: dict[str, Any]) -> str:
    labels = list(row["samples_ms"])
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(labels) + 1.2))
    ax.boxplot([row["samples_ms"][k] for k in labels], vert=False, whis=(10, 90), showfliers=True)
    ax.set_yticks(range(1, len(labels) + 1), labels)
    ax.set_xscale("log")
    ax.set_xlabel("ms (log scale; box: p25-p75, whiskers: p10-p90)")
    ax.set_title(row["label"])
    return _svg(fig)


def _compute_ratios(plt: Any, rows: list[dict[str, Any]]) -> str:
    systems = sorted({s for r in rows for s in r["systems"] if s != r["baseline"]})
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) * max(1, len(systems)) + 1.5))
    height = 0.8 / max(1, len(systems))
    for j, system in enumerate(systems):
        ys = [i + j * height for i in range(len(rows))]
        xs = [r["systems"].get(system, {}).get("ratio", 0.0) for r in rows]
        ax.barh(ys, xs, height=height, label=system)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))], [r["label"] for r in rows])
    for x, style in ((1, "-"), (2, "--"), (3, ":")):
        ax.axvline(x, color="grey", linestyle=style, linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("time / native CPython (p50; log scale; lines at 1x, 2x, 3x)")
    ax.legend(loc="lower right", fontsize="small")
    ax.invert_yaxis()
    return _svg(fig)


def _phases(plt: Any, ph: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(9, 1.8))
    left = 0.0
    for name, ms in ph["phases_ms"].items():
        ax.barh([0], [ms * 1000], left=left, label=name)
        left += ms * 1000
    ax.set_yticks([])
    ax.set_xlabel("microseconds (p50 of each phase)")
    ax.legend(ncol=4, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return _svg(fig)


def _memory(plt: Any, mem: dict[str, Any]) -> str:
    counts = [int(k) for k in mem["by_workers"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("total_rss_mb", "total RSS"), ("total_pss_mb", "total PSS")):
        ax.plot(counts, [mem["by_workers"][str(c)][key] for c in counts], marker="o", label=label)
    ax.set_xticks(counts)
    ax.set_xlabel("workers")
    ax.set_ylabel("MB (server + workers)")
    ax.legend()
    return _svg(fig)


def _scaling(plt: Any, scaling: dict[str, Any]) -> str:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for job, by_count in scaling["jobs"].items():
        counts = [int(c) for c in by_count]
        ax.plot(counts, [by_count[str(c)]["runs_per_s"] for c in counts], marker="o", label=job)
        ax.plot(counts, [c * by_count["1"]["runs_per_s"] for c in counts], linestyle=":", color="grey")
    ax.set_xticks(counts)
    ax.set_xlabel("concurrent clients (dotted: clients x one client)")
    ax.set_ylabel("runs per second")
    ax.set_yscale("log")
    ax.legend()
    return _svg(fig)


def render(report: dict[str, Any]) -> str:
    plt = _pyplot()
    rows = report["rows"]
    startup = [r for r in rows.values() if r["section"] == "startup"]
    compute = [r for r in rows.values() if r["section"] == "compute"]
    parts = [f"<h1>wasmrun bench</h1><p>{html.escape(report['date'])}; {html.escape(report['machine'])}</p>",
             "<h2>Start-up latency distributions</h2>"]
    parts += [f'<figure class="chart">{_distributions(plt, r)}</figure>' for r in startup]
    parts += ["<h2>Compute: time relative to native CPython</h2>",
              f'<figure class="chart">{_compute_ratios(plt, compute)}</figure>',
              *(["<h2>Every core used: runs/s by concurrent clients</h2>",
                 f'<figure class="chart">{_scaling(plt, report["scaling"])}</figure>'] if report.get("scaling") else []),
              "<h2>One hello by phase</h2>", f'<figure class="chart">{_phases(plt, report["phases"])}</figure>',
              "<h2>Memory with 1, 2, 4 workers</h2>", f'<figure class="chart">{_memory(plt, report["memory"])}</figure>',
              "<h2>Table</h2>", f"<pre>{html.escape(table(report))}</pre>"]
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>wasmrun bench</title>"
            "<style>body{font-family:sans-serif;max-width:1000px;margin:auto}pre{font-size:12px;overflow-x:auto}"
            "figure{margin:1em 0}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")
