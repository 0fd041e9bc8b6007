"""The HTML report: one self-contained file a person reads. The figures are real <table>s
(one per section, p50/p90/p99/max and n for every system), the machine and its load head
the page, and the charts (charts.py, inline SVG) print their values."""

from __future__ import annotations

import html
from typing import Any

from wasmrun.bench import charts
from wasmrun.bench.machine import load_line
from wasmrun.bench.report import SECTIONS
from wasmrun.bench.stats import ms, ratio

MISSING = charts.MISSING
STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:14px}"
         "th,td{border:1px solid #ccc;padding:3px 8px}"
         "td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}"
         "th{background:#f0f0f0}caption{text-align:left;font-weight:bold;padding:4px 0}"
         "td.absent{color:#866}figure{margin:1em 0}p.note{color:#444;font-size:13px}")


def _e(text: Any) -> str:
    return html.escape(str(text))


def _machine(report: dict[str, Any]) -> str:
    h = report.get("host")
    if not h:
        return f"<p>{_e(report['date'])}; {_e(report['machine'])}; {_e(load_line(report))}</p>"
    versions = ", ".join(f"{k} {v}" for k, v in h["versions"].items() if v)
    cells = [("date", report["date"]), ("CPU", f"{h['cpu_model']} ({h.get('arch', '')})"), ("cores", h["cores"]),
             ("memory", f"{h['memory_mb']:,.0f} MB" if h.get("memory_mb") else "-"), ("OS", h["os"]),
             ("versions", versions), ("load", load_line(report)),
             ("run", f"{report['rounds']} interleaved rounds" + (" (--quick: not for comparison)" if report["quick"] else ""))]
    body = "".join(f"<tr><th scope=\"row\">{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in cells)
    return f'<table class="machine"><caption>Machine and load</caption>{body}</table>'


def section_table(title: str, rows: list[dict[str, Any]], absent: dict[str, str]) -> str:
    success = any("success_rate" in f for r in rows for f in r["systems"].values())
    columns = ["row", "system", "p50", "p90", "p99", "max", "n", *(["success"] if success else []), "/ baseline"]
    head = "".join(f'<th scope="col">{c}</th>' for c in columns)
    body = []
    for row in rows:
        if row.get("absent"):
            absent = {**absent, row["label"]: row["absent"]}
            continue
        for label, fig in row["systems"].items():
            ok = f"{fig['success_rate'] * 100:.0f}% of {fig['attempts']}" if "success_rate" in fig else ""
            r = ratio(fig["ratio"]) if fig.get("ratio") is not None else ""
            nums = [ms(fig.get(k)) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")] + [fig["n"], *([ok] if success else []), r]
            body.append(f'<tr><td title="{_e(row.get("what", ""))}">{_e(row["label"])}</td><td>{_e(label)}</td>'
                        + "".join(f'<td class="num">{_e(v)}</td>' for v in nums) + "</tr>")
    for label, why in absent.items():
        body.append(f'<tr><td>{_e(label)}</td><td class="absent" colspan="{len(columns) - 1}">absent: {_e(why)}</td></tr>')
    return (f'<table class="figures" data-section="{_e(title)}"><caption>{_e(title)}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def _tables(report: dict[str, Any]) -> list[str]:
    parts = []
    rows = report["rows"]
    for section, title in SECTIONS:
        in_section = [r for r in rows.values() if r["section"] == section]
        absent = report.get("absent_rows", {}) if section == "startup" else {}
        if in_section or absent:
            parts.append(section_table(title, in_section, absent))
            notes = report.get("section_notes", {}).get(section, [])
            parts += [f'<p class="note">{_e(n)}</p>' for n in notes]
    return parts


def _peers(report: dict[str, Any]) -> str:
    items = [f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in report.get("systems", {}).items()]
    for label, p in report.get("peers", {}).items():
        items.append(f"<li><b>{_e(label)}</b>: {_e(p['isolates'])}</li>" if p["present"]
                     else f"<li><b>{_e(label)}</b>: absent ({_e(p['why'])})</li>")
    items += [f"<li>{_e(n)}</li>" for n in report.get("notes", [])]
    return f"<h2>Systems and peers</h2><ul>{''.join(items)}</ul>"


def _charts(plt: Any, report: dict[str, Any]) -> list[str]:
    rows = report["rows"]
    timed = [r for r in rows.values() if r["section"] != "compute" and any(r.get("samples_ms", {}).values())]
    compute = [r for r in rows.values() if r["section"] == "compute"]
    parts = ["<h2>Latency distributions</h2>"]
    parts += [f'<figure class="chart">{charts.distributions(plt, r)}</figure>' for r in timed]
    if compute:
        parts += ["<h2>Compute: time relative to native CPython</h2>",
                  f'<figure class="chart">{charts.compute_ratios(plt, compute)}</figure>']
    if report.get("scaling"):
        parts += ["<h2>Every core used: runs/s by concurrent clients</h2>",
                  f'<figure class="chart">{charts.scaling(plt, report["scaling"])}</figure>']
    if report.get("phases"):
        parts += ["<h2>One hello by phase</h2>", f'<figure class="chart">{charts.phases(plt, report["phases"])}</figure>']
    if report.get("memory", {}).get("by_workers"):
        parts += ["<h2>Memory by workers</h2>", f'<figure class="chart">{charts.memory(plt, report["memory"])}</figure>']
    return parts


def render(report: dict[str, Any]) -> str:
    plt = charts.pyplot()
    parts = ["<h1>wasmrun bench</h1>", _machine(report), "<h2>Figures</h2>", *_tables(report)]
    for cite in report.get("published", []):
        parts.append(f'<p class="note">{_e(cite)}</p>')
    parts += _charts(plt, report)
    parts.append(_peers(report))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>wasmrun bench</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")
