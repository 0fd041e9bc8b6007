"""Per-column statistics, accumulated one record at a time."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import infer

# Distinct values are counted exactly up to this many per table, shared among the
# columns; past a column's share new values are no longer tracked, which keeps
# memory bounded inside the sandbox and makes that distinct count a lower bound.
TRACKED_VALUES_BUDGET = 500_000
MIN_TRACKED_PER_COLUMN = 1_000
NUMERIC_TYPES = ("int", "float")
TEMPORAL_TYPES = ("date", "datetime")


@dataclass
class ColumnProfile:
    name: str
    tracked_limit: int
    empty: int = 0  # blank, whitespace-only, or missing from a short row
    null: int = 0  # a null token such as "NULL" or "N/A"
    type_counts: Counter[str] = field(default_factory=Counter)
    values: Counter[str] = field(default_factory=Counter)
    values_capped: bool = False
    number_count: int = 0
    number_sum: int | float = 0  # stays an int while every number is, so it is exact
    number_min: int | float | None = None
    number_max: int | float | None = None
    # (sort key, original text) of the earliest and latest date or datetime.
    time_min: tuple[datetime, str] | None = None
    time_max: tuple[datetime, str] | None = None
    min_length: int | None = None
    max_length: int | None = None

    def add(self, raw: str | None) -> None:
        cell = (raw or "").strip()
        if not cell:
            self.empty += 1
            return
        if infer.is_null(cell):
            self.null += 1
            return
        kind, value = infer.classify(cell)
        self.type_counts[kind] += 1
        self._track(cell)
        self.min_length = len(cell) if self.min_length is None else min(self.min_length, len(cell))
        self.max_length = len(cell) if self.max_length is None else max(self.max_length, len(cell))
        if kind in NUMERIC_TYPES:
            self._add_number(value)
        elif kind in TEMPORAL_TYPES:
            self._add_time((value, cell))

    def _track(self, cell: str) -> None:
        if cell in self.values or len(self.values) < self.tracked_limit:
            self.values[cell] += 1
        else:
            self.values_capped = True

    def _add_number(self, number: int | float) -> None:
        self.number_count += 1
        self.number_sum += number
        self.number_min = number if self.number_min is None else min(self.number_min, number)
        self.number_max = number if self.number_max is None else max(self.number_max, number)

    def _add_time(self, moment: tuple[datetime, str]) -> None:
        self.time_min = moment if self.time_min is None else min(self.time_min, moment)
        self.time_max = moment if self.time_max is None else max(self.time_max, moment)

    def report(self, top_n: int) -> dict[str, Any]:
        kind = infer.column_type(self.type_counts)
        out: dict[str, Any] = {
            "name": self.name,
            "type": kind,
            "empty": self.empty,
            "null": self.null,
            "distinct": len(self.values),
        }
        if self.values_capped:
            out["distinct_is_lower_bound"] = True
        out["top"] = [[value, count] for value, count in self.values.most_common(top_n)]
        if kind in NUMERIC_TYPES:
            cast = int if kind == "int" else float
            out["min"] = cast(self.number_min)
            out["max"] = cast(self.number_max)
            out["mean"] = round(self.number_sum / self.number_count, 6)
        elif kind in TEMPORAL_TYPES:
            out["min"] = self.time_min[1]
            out["max"] = self.time_max[1]
        elif kind == "string":
            out["min_length"] = self.min_length
            out["max_length"] = self.max_length
        # Shows how mixed a "string" column is, e.g. 998 int cells and 2 typos.
        out["type_counts"] = dict(sorted(self.type_counts.items()))
        return out


@dataclass
class TableProfile:
    columns: list[ColumnProfile]
    rows: int = 0
    ragged_rows: int = 0  # records whose field count differs from the header's
    truncated: bool = False  # stopped at max_rows with records left over

    def add(self, record: list[str]) -> None:
        self.rows += 1
        if len(record) != len(self.columns):
            self.ragged_rows += 1
        # Missing trailing fields count as empty; extra fields have no column and are dropped.
        for index, column in enumerate(self.columns):
            column.add(record[index] if index < len(record) else None)


def profile_records(records: Iterator[list[str]], max_rows: int | None) -> TableProfile:
    """Profile records whose first one is the header."""
    header = next(records, None)
    if header is None:
        return TableProfile(columns=[])
    names = column_names(header)
    share = max(MIN_TRACKED_PER_COLUMN, TRACKED_VALUES_BUDGET // len(names))
    table = TableProfile(columns=[ColumnProfile(name, share) for name in names])
    for record in records:
        if max_rows is not None and table.rows >= max_rows:
            table.truncated = True
            break
        table.add(record)
    return table


def column_names(header: list[str]) -> list[str]:
    """Header cells made unique and non-blank, so every column can be named in a report."""
    names: list[str] = []
    seen: set[str] = set()
    for position, cell in enumerate(header, start=1):
        base = cell.strip() or f"column_{position}"
        name, suffix = base, 2
        while name in seen:
            name, suffix = f"{base}_{suffix}", suffix + 1
        seen.add(name)
        names.append(name)
    return names
