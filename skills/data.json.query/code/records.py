"""Filter, sort and project lists of JSON records by field paths.

Values are compared the JSON way: no type coercion ("5" is not 5), and true/false
are not the numbers 1/0. A field that is missing counts as null.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .jsonpath import Path, lookup

OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "contains")


@dataclass(frozen=True)
class Condition:
    field: Path
    op: str
    value: Any

    def holds(self, item: Any) -> bool:
        actual = lookup(item, self.field)
        if self.op == "==":
            return json_equal(actual, self.value)
        if self.op == "!=":
            return not json_equal(actual, self.value)
        if self.op == "contains":
            return _contains(actual, self.value)
        return _ordered(actual, self.op, self.value)


def keep(items: list[Any], conditions: list[Condition]) -> list[Any]:
    """The items meeting every condition."""
    return [item for item in items if all(c.holds(item) for c in conditions)]


def sort_items(items: list[Any], field: Path, descending: bool) -> list[Any]:
    """Items ordered by a field; items where it is null or missing go last either way.

    Different value types are ranked numbers < strings < booleans < arrays/objects
    rather than raising. The sort is stable: ties keep their original order.
    """
    keyed = [(lookup(item, field), item) for item in items]
    present = [(value, item) for value, item in keyed if value is not None]
    present.sort(key=lambda pair: _rank(pair[0]), reverse=descending)
    return [item for _, item in present] + [item for value, item in keyed if value is None]


def project(item: Any, fields: dict[str, Path]) -> dict[str, Any]:
    """A new object with one entry per selected field (null where missing)."""
    return {name: lookup(item, path) for name, path in fields.items()}


def json_equal(a: Any, b: Any) -> bool:
    # Python's == treats True as 1 and [True] as [1]; JSON does not.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return a == b


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ordered(actual: Any, op: str, expected: Any) -> bool:
    comparable = (_is_number(actual) and _is_number(expected)) or (
        isinstance(actual, str) and isinstance(expected, str)
    )
    if not comparable:
        return False
    if op == "<":
        return actual < expected
    if op == "<=":
        return actual <= expected
    if op == ">":
        return actual > expected
    return actual >= expected


def _contains(actual: Any, expected: Any) -> bool:
    if isinstance(actual, str):
        return isinstance(expected, str) and expected in actual
    if isinstance(actual, list):
        return any(json_equal(element, expected) for element in actual)
    if isinstance(actual, dict):
        return isinstance(expected, str) and expected in actual
    return False


def _rank(value: Any) -> tuple[int, Any]:
    if _is_number(value):
        return 0, value
    if isinstance(value, str):
        return 1, value
    if isinstance(value, bool):
        return 2, value
    return 3, json.dumps(value, sort_keys=True, ensure_ascii=False)
