"""A small path language for picking values out of a JSON document.

    ""  or  "$"             the whole document
    a.b                     key "b" of the object at key "a"
    a[0]   a[-1]            an array element (negative counts from the end)
    a.0                     the same as a[0] when a is an array
    items[*].price          "price" of every element of items (or every value of an object)
    items.*.price           the same
    ["odd key.with dots"]   a quoted key, JSON string syntax (single quotes work too)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

KEY, INDEX, ALL = "key", "index", "all"
Step = tuple[str, str | int | None]  # (KEY, name) | (INDEX, n) | (ALL, None)

# A bare key runs up to the next "." or "[" (so it may hold spaces, dashes, unicode).
_BARE_KEY = re.compile(r"[^.\[\]\"']+")
_INDEX = re.compile(r"\[\s*(-?[0-9]+)\s*\]")
_DOUBLE_QUOTED = re.compile(r'\[\s*("(?:[^"\\]|\\.)*")\s*\]')
_SINGLE_QUOTED = re.compile(r"\[\s*'((?:[^'\\]|\\.)*)'\s*\]")
_SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MISSING = object()


@dataclass(frozen=True)
class Path:
    text: str
    steps: tuple[Step, ...]


def parse(text: str) -> Path:
    source = text.strip()
    pos = 1 if source.startswith("$") else 0
    steps: list[Step] = []
    while pos < len(source):
        if source.startswith("[*]", pos):
            steps.append((ALL, None))
            pos += 3
        elif source[pos] == "[":
            step, pos = _bracket(source, pos)
            steps.append(step)
        else:
            # A leading bare key needs no dot ("a.b"); later ones do, "$" included.
            if source[pos] == ".":
                pos += 1
            elif pos > 0:
                raise _syntax(source, pos, 'expected ".", "[" or the end')
            if source.startswith("*", pos):
                steps.append((ALL, None))
                pos += 1
                continue
            match = _BARE_KEY.match(source, pos)
            if not match:
                raise _syntax(source, pos, "expected a key")
            steps.append((KEY, match.group().strip()))
            pos = match.end()
    return Path(source, tuple(steps))


def _bracket(source: str, pos: int) -> tuple[Step, int]:
    if match := _INDEX.match(source, pos):
        return (INDEX, int(match.group(1))), match.end()
    if match := _DOUBLE_QUOTED.match(source, pos):
        try:
            return (KEY, json.loads(match.group(1))), match.end()
        except json.JSONDecodeError:
            raise _syntax(source, pos, "expected a valid JSON string (bad escape)") from None
    if match := _SINGLE_QUOTED.match(source, pos):
        return (KEY, re.sub(r"\\(.)", r"\1", match.group(1))), match.end()
    raise _syntax(source, pos, 'expected [<integer>], [*], ["key"] or [\'key\']')


def _syntax(text: str, pos: int, expected: str) -> ValueError:
    return ValueError(f"bad path {text!r} at position {pos}: {expected}")


def render(steps: tuple[Step, ...]) -> str:
    """The steps written back as a path, for messages."""
    out = "$"
    for kind, arg in steps:
        if kind == ALL:
            out += "[*]"
        elif kind == INDEX:
            out += f"[{arg}]"
        elif _SIMPLE_KEY.fullmatch(str(arg)):
            out += f".{arg}"
        else:
            out += f"[{json.dumps(arg, ensure_ascii=False)}]"
    return out


def query(document: Any, path: Path) -> Any:
    """The value at `path`, or the list of every match when the path has a wildcard.

    A step before the first wildcard that matches nothing raises ValueError
    (the path is wrong); after a wildcard, elements lacking the rest are skipped
    (as in items[*].price when some items have no price).
    """
    return _walk(document, path, strict=True)


def lookup(item: Any, path: Path) -> Any:
    """Like `query` but lenient, for fields of records: None when nothing matches."""
    found = _walk(item, path, strict=False)
    return None if found is _MISSING else found


def _walk(document: Any, path: Path, strict: bool) -> Any:
    current = [document]
    fanned = False
    for depth, step in enumerate(path.steps):
        following: list[Any] = []
        for value in current:
            children = _children(value, step)
            if children is not None:
                following.extend(children)
            elif not fanned:
                if strict:
                    raise ValueError(_not_found(path, depth, value))
                return _MISSING
        fanned = fanned or step[0] == ALL
        current = following
    return current if fanned else current[0]


def _children(value: Any, step: Step) -> list[Any] | None:
    """The values one step reaches from `value`; None when the step does not apply."""
    kind, arg = step
    if kind == ALL:
        if isinstance(value, list):
            return value
        return list(value.values()) if isinstance(value, dict) else None
    if isinstance(value, dict):
        key = str(arg)  # [0] on an object means its key "0"
        return [value[key]] if key in value else None
    if isinstance(value, list):
        index = _as_index(arg)
        if index is not None and -len(value) <= index < len(value):
            return [value[index]]
    return None


def _as_index(arg: str | int | None) -> int | None:
    if isinstance(arg, int):
        return arg
    return int(arg) if isinstance(arg, str) and re.fullmatch(r"-?[0-9]+", arg) else None


def _not_found(path: Path, depth: int, value: Any) -> str:
    kind, arg = path.steps[depth]
    where = render(path.steps[:depth])
    prefix = f"path {path.text!r} matched nothing"
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:10]) + (", ..." if len(value) > 10 else "")
        return f"{prefix}: no key {str(arg)!r} at {where}; its keys are: {keys or '(none)'}"
    if isinstance(value, list):
        if _as_index(arg) is None:
            return f"{prefix}: {where} is an array of {len(value)}; use [<index>] or [*] instead of .{arg}"
        return f"{prefix}: index {arg} is out of range at {where}, an array of {len(value)}"
    wanted = "elements for [*]" if kind == ALL else repr(arg)
    return f"{prefix}: {where} is {described(value)}, which has no {wanted}"


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def described(value: Any) -> str:
    """A scalar's type and value, or a container's type, for messages: 'a string "x"'."""
    kind = json_type(value)
    article = "" if kind == "null" else ("an " if kind[0] in "ao" else "a ")
    if isinstance(value, (list, dict)):
        return article + kind
    return article + (kind if value is None else f"{kind} {_clip(json.dumps(value, ensure_ascii=False))}")


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
