"""Every problem of a call's params at once: when a method's params do not decode, each
missing, unknown or invalid member is named in one -32602 error, an unknown one with the
member it most likely meant (`langauge`: did you mean `language`?), so that a client
fixes its call in one round rather than one member per call.

msgspec stops at the first problem; this walks the params object member by member
against the method's Struct (and into members that are Structs of ours, like `limits`).
"""

from __future__ import annotations

import difflib
import functools
import typing
from typing import Any

import msgspec

MAX_PROBLEMS = 20  # named in one error; a params object of thousands of stray members names the first


class Problem(msgspec.Struct, frozen=True):
    field: str  # its path, e.g. "limits.timeout_ms"
    message: str  # msgspec's words, plus a suggestion


@functools.lru_cache(maxsize=64)
def _fields(struct: type[msgspec.Struct]) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, required) of each of `struct`'s members."""
    hints = typing.get_type_hints(struct, include_extras=True)
    info = msgspec.inspect.type_info(struct)
    required = {f.name for f in getattr(info, "fields", ()) if f.required}
    return tuple((name, hints[name], name in required) for name in struct.__struct_fields__)


def _nested_struct(kind: Any) -> type[msgspec.Struct] | None:
    """The Struct of ours a member's type is (plain or optional), if it is one."""
    candidates = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, type(int | None)) else (kind,)
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, msgspec.Struct):
            return candidate
    return None


def _suggestion(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name.lower(), choices, n=1, cutoff=0.6)
    return f": did you mean `{close[0]}`?" if close else f"; the members are: {', '.join(choices)}"


def problems(struct: type[msgspec.Struct], value: dict[str, Any], prefix: str = "") -> list[Problem]:
    """What is wrong with `value` as `struct`'s params: missing, unknown and invalid members."""
    found: list[Problem] = []
    fields = _fields(struct)
    names = [name for name, _, _ in fields]
    for name, kind, required in fields:
        if name not in value:
            if required:
                found.append(Problem(prefix + name, f"Object missing required field `{name}`"))
            continue
        inner = _nested_struct(kind)
        if inner is not None and isinstance(value[name], dict):
            found.extend(problems(inner, value[name], f"{prefix}{name}."))
            continue
        try:
            msgspec.convert(value[name], kind)
        except msgspec.ValidationError as exc:
            text, _, where = str(exc).partition(" - at `$")
            path = prefix + name + where.rstrip("`")
            found.append(Problem(path, f"{text} (in `{path}`)" if path != prefix + name else text))
    if getattr(struct, "__struct_config__", None) is not None and struct.__struct_config__.forbid_unknown_fields:
        for name in value:
            if name not in names:
                shown = name[:64]
                found.append(Problem(prefix + shown, f"Object contains unknown field `{shown}`{_suggestion(shown, names)}"))
                if len(found) >= MAX_PROBLEMS:
                    break
    return found[:MAX_PROBLEMS]


def describe(found: list[Problem]) -> str:
    """One message naming every problem."""
    if len(found) == 1:
        return f"invalid params: {found[0].message} (at `{found[0].field}`)"
    listed = "; ".join(f"`{p.field}`: {p.message}" for p in found)
    return f"invalid params: {len(found)} problems: {listed}"
