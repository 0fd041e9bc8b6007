"""The method table, and decoding a call's raw params into its params Struct."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from wasmrun.protocol import blobs, runs, skills
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams, MethodNotFound
from wasmrun.protocol.types import (
    CreateBlobParams,
    CreateSkillParams,
    DescribeSkillParams,
    ExecuteSkillParams,
    ListSkillsParams,
    LoadGuideParams,
    Params,
    ReadBlobParams,
    ReadSkillFileParams,
    RunCodeParams,
)


@dataclass(frozen=True)
class Method:
    params: type[Params]
    handler: Callable[[Context, Any], Awaitable[msgspec.Struct]]


METHODS: dict[str, Method] = {
    "list_skills": Method(ListSkillsParams, skills.list_skills),
    "describe_skill": Method(DescribeSkillParams, skills.describe_skill),
    "read_skill_file": Method(ReadSkillFileParams, skills.read_skill_file),
    "execute_skill": Method(ExecuteSkillParams, runs.execute_skill),
    "run_code": Method(RunCodeParams, runs.run_code),
    "create_blob": Method(CreateBlobParams, blobs.create_blob),
    "read_blob": Method(ReadBlobParams, blobs.read_blob),
    "load_skills_protocol_guide": Method(LoadGuideParams, skills.load_skills_protocol_guide),
    "create_skill": Method(CreateSkillParams, skills.create_skill),
}

_MISSING = re.compile(r"Object missing required field `([^`]*)`")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`")


def decode_params(params_type: type[Params], raw: msgspec.Raw) -> Params:
    """Raw JSON params → the method's Struct. Absent, null and `[]` mean no params;
    a member set to null counts as omitted."""
    try:
        value = msgspec.json.decode(raw) if len(raw) else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        # JSON the wire accepted that Python cannot hold (e.g. 1e400): find the member.
        raise _undecodable(raw) from None
    if value is None or value == []:
        value = {}
    if not isinstance(value, dict):
        raise InvalidParams("params must be an object (by-name params)", field="params")
    value = {k: v for k, v in value.items() if v is not None}
    try:
        return msgspec.convert(value, params_type)
    except msgspec.ValidationError as exc:
        raise _invalid(str(exc)) from None


def _undecodable(raw: msgspec.Raw) -> InvalidParams:
    try:
        members = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError):
        members = {}
    for name, member in members.items():
        try:
            msgspec.json.decode(member)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            text = str(exc).partition(" - at `$")[0]
            return InvalidParams(f"invalid params: {text} (in `{name}`)", field=name)
    return InvalidParams("invalid params: a value cannot be decoded", field="params")


def _invalid(message: str) -> InvalidParams:
    text, _, where = message.partition(" - at `$")
    path = where.rstrip("`").lstrip(".")
    leaf = _MISSING.fullmatch(text) or _UNKNOWN.fullmatch(text)
    if leaf:
        path = f"{path}.{leaf[1]}" if path else leaf[1]
    return InvalidParams(f"invalid params: {text}" + (f" (at `{path}`)" if path else ""), field=path or None)


class Dispatcher:
    """Calls a method by name with raw params; raises RPCError subclasses."""

    def __init__(self, context: Context) -> None:
        self.context = context

    async def __call__(self, method: str, raw_params: msgspec.Raw) -> msgspec.Struct:
        entry = METHODS.get(method)
        if entry is None:
            raise MethodNotFound(f"method not found: {method!r}", {"methods": sorted(METHODS)})
        params = decode_params(entry.params, raw_params)
        return await entry.handler(self.context, params)
