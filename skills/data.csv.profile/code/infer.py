"""Classify single CSV cells and decide a column's type from the cells' types."""

from __future__ import annotations

import math
import re
from datetime import date, datetime, timezone

# Non-blank cells that spreadsheets and exports use to mean "no value".
NULL_TOKENS = frozenset({"null", "none", "na", "n/a", "#n/a", "nan", "nil"})
TRUE_TOKENS = frozenset({"true", "yes"})
FALSE_TOKENS = frozenset({"false", "no"})

# ASCII digits only: \d would also accept e.g. Arabic-Indic digits, which int()
# parses but which are almost always text in a CSV. A leading zero ("007",
# "0123") marks an identifier such as a zip code, so those stay strings.
_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[+-]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATETIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}.*")
# Longer integers are text (ids, hashes); this also keeps int() below CPython's
# 4300-digit conversion limit and sums/means within float range.
MAX_INT_CHARS = 300

Cell = tuple[str, object]  # (type name, parsed value)


def is_null(cell: str) -> bool:
    return cell.lower() in NULL_TOKENS


def classify(cell: str) -> Cell:
    """The type of a stripped, non-blank, non-null cell and its parsed value.

    Numbers parse to int/float, booleans to bool, dates and datetimes to a sort key
    (so min/max are chronological); strings keep their text.
    """
    if _INT.fullmatch(cell):
        return ("int", int(cell)) if len(cell) <= MAX_INT_CHARS else ("string", cell)
    if _FLOAT.fullmatch(cell):
        number = float(cell)
        if math.isfinite(number):
            return "float", number
    lowered = cell.lower()
    if lowered in TRUE_TOKENS or lowered in FALSE_TOKENS:
        return "bool", lowered in TRUE_TOKENS
    if _DATE.fullmatch(cell):
        try:
            return "date", datetime.combine(date.fromisoformat(cell), datetime.min.time())
        except ValueError:
            pass
    if _DATETIME.fullmatch(cell):
        try:
            return "datetime", _naive_utc(datetime.fromisoformat(cell))
        except ValueError:
            pass
    return "string", cell


def _naive_utc(moment: datetime) -> datetime:
    # Aware and naive datetimes cannot be compared; compare aware ones in UTC.
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(timezone.utc).replace(tzinfo=None)


def column_type(type_counts: dict[str, int]) -> str:
    """The narrowest type every classified cell of a column fits."""
    present = {name for name, count in type_counts.items() if count}
    if not present:
        return "empty"
    if present <= {"int"}:
        return "int"
    if present <= {"int", "float"}:
        return "float"
    if present <= {"bool"}:
        return "bool"
    if present <= {"date"}:
        return "date"
    if present <= {"date", "datetime"}:
        return "datetime"
    return "string"
