"""`wasmrun bench --compare OLD.json`: the change, row by row and system by system, between an
earlier run and this one (or two files: `--from-json NEW.json --compare OLD.json`)."""

from __future__ import annotations

from typing import Any

from wasmrun.bench.stats import ms

# A change smaller than this share of the old p50 is printed as "~" (noise on a shared machine).
NOISE = 0.05


def _change(old: float | None, new: float | None) -> str:
    if old is None or new is None:
        return "-"
    if old == 0:
        return "-" if new == 0 else "new > 0"
    share = (new - old) / old
    if abs(share) < NOISE:
        return f"~ ({share * 100:+.1f}%)"
    return f"{share * 100:+.0f}% ({'slower' if share > 0 else 'faster'})"


def pairs(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Every (row, system) in either run: the old and new p50 and p99, None where one lacks it."""
    out = []
    keys = list(new["rows"]) + [k for k in old["rows"] if k not in new["rows"]]
    for key in keys:
        o, n = old["rows"].get(key, {}), new["rows"].get(key, {})
        label = (n or o).get("label", key)
        systems = list(n.get("systems", {})) + [s for s in o.get("systems", {}) if s not in n.get("systems", {})]
        for system in systems:
            of, nf = o.get("systems", {}).get(system, {}), n.get("systems", {}).get(system, {})
            out.append({"row": label, "system": system,
                        "old_p50_ms": of.get("p50_ms"), "new_p50_ms": nf.get("p50_ms"),
                        "old_p99_ms": of.get("p99_ms"), "new_p99_ms": nf.get("p99_ms"),
                        "change_p50": _change(of.get("p50_ms"), nf.get("p50_ms"))})
    return out


def table(old: dict[str, Any], new: dict[str, Any]) -> str:
    lines = [f"Change from {old.get('date', '?')} ({old.get('machine', '?')}) to {new.get('date', '?')}"
             f" ({new.get('machine', '?')}); changes under {NOISE * 100:.0f}% of the p50 are marked ~", "",
             "| row | system | p50 before | p50 now | change (p50) | p99 before | p99 now |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for p in pairs(old, new):
        lines.append(f"| {p['row']} | {p['system']} | {ms(p['old_p50_ms'])} | {ms(p['new_p50_ms'])} | {p['change_p50']} "
                     f"| {ms(p['old_p99_ms'])} | {ms(p['new_p99_ms'])} |")
    return "\n".join(lines)
