"""Validation of the skill's JSON args, with messages a caller can act on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .jsonpath import Path, parse
from .records import OPERATORS, Condition

KNOWN_ARGS = ("blob_id", "path", "filter", "select", "sort_by", "descending", "limit")
CONDITION_KEYS = ("field", "op", "value")


@dataclass(frozen=True)
class Options:
    blob_id: str
    path: Path
    conditions: list[Condition]
    select: dict[str, Path] | None  # output name -> field path
    sort_by: Path | None
    descending: bool
    limit: int | None

    @property
    def needs_list(self) -> bool:
        """Whether an option only makes sense when the path reaches an array."""
        return bool(self.conditions) or self.sort_by is not None or self.limit is not None


def parse_options(args: Any) -> Options:
    if not isinstance(args, dict):
        raise ValueError(f"args must be a JSON object, got {type(args).__name__}")
    unknown = sorted(set(args) - set(KNOWN_ARGS))
    if unknown:
        # Most often a typo; silently ignoring it would hide the caller's intent.
        raise ValueError(f"unknown argument(s) {unknown}; expected some of {list(KNOWN_ARGS)}")
    descending = args.get("descending", False)
    if not isinstance(descending, bool):
        raise ValueError(f'"descending" must be true or false, got {descending!r}')
    return Options(
        blob_id=_blob_id(args.get("blob_id")),
        path=_path(args.get("path"), "path") if args.get("path") is not None else parse(""),
        conditions=_conditions(args.get("filter")),
        select=_select(args.get("select")),
        sort_by=_path(args["sort_by"], "sort_by") if args.get("sort_by") is not None else None,
        descending=descending,
        limit=_limit(args.get("limit")),
    )


def _blob_id(value: Any) -> str:
    if value is None:
        raise ValueError('missing required argument "blob_id" (e.g. "blob:abc123")')
    if not isinstance(value, str) or not value.startswith("blob:"):
        raise ValueError(f'"blob_id" must be a string like "blob:abc123", got {value!r}')
    return value


def _path(value: Any, name: str) -> Path:
    if not isinstance(value, str):
        raise ValueError(f'"{name}" must be a path string such as "items[*].price", got {value!r}')
    return parse(value)


def _conditions(value: Any) -> list[Condition]:
    if value is None:
        return []
    # One condition may be given bare; several are ANDed.
    raw = [value] if isinstance(value, dict) else value
    if not isinstance(raw, list) or not raw:
        raise ValueError('"filter" must be an object {"field", "op", "value"} or a non-empty array of them')
    return [_condition(item, i) for i, item in enumerate(raw)]


def _condition(item: Any, position: int) -> Condition:
    where = f"filter[{position}]"
    if not isinstance(item, dict):
        raise ValueError(f'{where} must be an object {{"field", "op", "value"}}, got {item!r}')
    unknown = sorted(set(item) - set(CONDITION_KEYS))
    if unknown:
        raise ValueError(f"{where} has unknown key(s) {unknown}; expected {list(CONDITION_KEYS)}")
    if "value" not in item:
        raise ValueError(f'{where} needs a "value" (use null to test for a missing field)')
    op = item.get("op", "==")
    if op not in OPERATORS:
        raise ValueError(f'{where} has unknown "op" {op!r}; use one of {list(OPERATORS)}')
    if item.get("field") is None:
        raise ValueError(f'{where} needs a "field" path, e.g. "price" or "user.name"')
    return Condition(_path(item["field"], f"{where}.field"), op, item["value"])


def _select(value: Any) -> dict[str, Path] | None:
    if value is None:
        return None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return {text: _path(text, "select") for text in value}
    if isinstance(value, dict) and value and all(isinstance(v, str) for v in value.values()):
        return {name: _path(text, f"select.{name}") for name, text in value.items()}
    raise ValueError(
        '"select" must be a non-empty array of field paths (["id", "user.name"]) '
        'or an object of output name -> path ({"name": "user.name"})'
    )


def _limit(value: Any) -> int | None:
    if value is None:
        return None
    # bool is an int subclass in Python, but true/false is never a meaningful count.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f'"limit" must be an integer >= 0, got {value!r}')
    return value
