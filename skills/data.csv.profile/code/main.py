"""data.csv.profile: profile a CSV blob column by column.

`main(args)` returns a small summary; the full per-column report is written to a
JSON blob whose id is returned as `report_blob`.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from runtime import blobs, log

from .columns import TableProfile, profile_records
from .options import parse_options
from .source import read_rows

# The protocol wants `output` under 4 KB; stay below it with room to spare.
OUTPUT_BUDGET_BYTES = 3500
MAX_SUMMARY_COLUMNS = 25
MAX_VALUE_CHARS = 40
SUMMARY_COLUMN_KEYS = (
    "name", "type", "empty", "null", "distinct", "distinct_is_lower_bound",
    "top", "min", "max", "mean",
)


def main(args: dict[str, Any]) -> dict[str, Any]:
    options = parse_options(args)
    delimiter, records = read_rows(options.blob_id, options.encoding, options.delimiter)
    table = profile_records(records, options.max_rows)
    columns = [column.report(options.top_n) for column in table.columns]
    summary = _sentence(options.blob_id, table, columns)
    head = {
        "rows": table.rows,
        "column_count": len(columns),
        "delimiter": delimiter,
        "truncated": table.truncated,
        "ragged_rows": table.ragged_rows,
    }
    report_blob = blobs.write_json({"blob_id": options.blob_id, "encoding": options.encoding,
                                    **head, "columns": columns})
    log.info(summary)
    brief = [_brief(column) for column in columns[:MAX_SUMMARY_COLUMNS]]
    return _fit({"summary": summary, **head, "report_blob": report_blob}, brief, len(columns))


def _sentence(blob_id: str, table: TableProfile, columns: list[dict[str, Any]]) -> str:
    if not columns:
        return f"The CSV in {blob_id} is empty: no header and no rows."
    types = Counter(column["type"] for column in columns)
    mix = ", ".join(f"{count} {kind}" for kind, count in sorted(types.items(), key=lambda t: (-t[1], t[0])))
    text = f"Profiled {_plural(table.rows, 'row')} x {_plural(len(columns), 'column')} ({mix}) from {blob_id}."
    if table.truncated:
        text += f" Stopped at max_rows={table.rows:,}; more rows remain."
    if table.ragged_rows:
        text += f" {_plural(table.ragged_rows, 'row')} had a different field count than the header."
    return text


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _brief(column: dict[str, Any]) -> dict[str, Any]:
    """The column's headline numbers, long texts clipped; the rest is in the report blob."""
    out = {key: column[key] for key in SUMMARY_COLUMN_KEYS if key in column}
    out["name"] = _clip(out["name"])
    out["top"] = [[_clip(value), count] for value, count in out["top"]]
    for key in ("min", "max"):
        if isinstance(out.get(key), str):
            out[key] = _clip(out[key])
    return out


def _clip(text: str) -> str:
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def _fit(head: dict[str, Any], columns: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """`head` plus as much column detail as fits the output budget.

    Detail is shed in order of least value: first the top values of every column,
    then whole columns from the end. The report blob always has everything.
    """
    without_top = [{k: v for k, v in column.items() if k != "top"} for column in columns]
    candidates = [columns] + [without_top[:n] for n in range(len(without_top), -1, -1)]
    for shown in candidates:
        out = {**head, "columns": shown, "columns_omitted": total - len(shown)}
        if len(json.dumps(out, ensure_ascii=False).encode("utf-8")) <= OUTPUT_BUDGET_BYTES:
            break
    return out
