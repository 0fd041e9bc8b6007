"""The method table, and decoding a call's raw params into its params Struct."""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import msgspec.inspect

from wasmrun import phases, tracing
from wasmrun.observe.record import CallRecord, Observer
from wasmrun.protocol import blobs, commands, paramcheck, runs, sessions, skills, toolcalls, types
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import InvalidParams, MethodNotFound, QuotaExceeded, RPCError, Unauthorized
from wasmrun.protocol.types import (
    CreateBlobParams,
    CreateSessionParams,
    CreateSkillParams,
    DeleteBlobParams,
    DescribeSkillParams,
    ExecuteSkillParams,
    ListSessionsParams,
    ListSkillsParams,
    LoadGuideParams,
    Params,
    ReadBlobParams,
    ReadSkillFileParams,
    RunCodeParams,
    RunCommandParams,
    RunLimits,
    SessionRef,
    SubmitToolResultsParams,
)
from wasmrun.sessionstore.store import key_of
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import CallsBusy


@dataclass(frozen=True)
class Method:
    params: type[Params]
    handler: Callable[[Context, Any], Awaitable[msgspec.Struct]]


METHODS: dict[str, Method] = {
    "list_skills": Method(ListSkillsParams, skills.list_skills),
    "describe_skill": Method(DescribeSkillParams, skills.describe_skill),
    "read_skill_file": Method(ReadSkillFileParams, skills.read_skill_file),
    "execute_skill": Method(ExecuteSkillParams, runs.execute_skill),
    "run_code": Method(RunCodeParams, sessions.run_code),  # runs.run_code, or in a session
    "create_blob": Method(CreateBlobParams, blobs.create_blob),
    "read_blob": Method(ReadBlobParams, blobs.read_blob),
    "load_skills_protocol_guide": Method(LoadGuideParams, lambda ctx, p: skills.load_skills_protocol_guide(ctx, p, METHODS)),
    "create_skill": Method(CreateSkillParams, skills.create_skill),
    # Extensions beyond the spec's methods:
    "delete_blob": Method(DeleteBlobParams, blobs.delete_blob),
    "create_session": Method(CreateSessionParams, sessions.create_session),
    "fork_session": Method(SessionRef, sessions.fork_session),
    "close_session": Method(SessionRef, sessions.close_session),
    "interrupt_session": Method(SessionRef, sessions.interrupt_session),  # stop its run in flight
    "list_sessions": Method(ListSessionsParams, sessions.list_sessions),
    "run_command": Method(RunCommandParams, commands.run_command),  # the guest's shell (docs/commands.md)
    # code mode: answer a run's pending tool calls (docs/code-mode.md)
    "submit_tool_results": Method(SubmitToolResultsParams, toolcalls.submit_tool_results),
}

# Admitted by the run gate (tenants/quotas.py); every other method by the call gate (tenants/calls.py).
RUN_METHODS = frozenset({"execute_skill", "run_code", "run_command"})

logger = logging.getLogger("wasmrun.observe")
_encoder = msgspec.json.Encoder()
_MISSING = re.compile(r"Object missing required field `([^`]*)`")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`")


def _content_bytes(result: msgspec.Struct) -> int:
    """The bulk a call's result carries (a blob's or a file's content), without encoding it."""
    content = getattr(result, "content", None)
    return len(content) if isinstance(content, (str, bytes)) else 0


def decode_params(params_type: type[Params], raw: msgspec.Raw) -> Params:
    """Raw JSON params → the method's Struct. Absent, null and `[]` mean no params;
    a member set to null counts as omitted."""
    try:
        value = msgspec.json.decode(raw) if len(raw) else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        # JSON the wire accepted that Python cannot hold (e.g. 1e400): find the member.
        raise _undecodable(raw, params_type) from None
    if value is None or value == []:
        value = {}
    if not isinstance(value, dict):
        raise InvalidParams("params must be an object (by-name params)", field="params")
    value = {k: v for k, v in value.items() if v is not None}
    if "limits" in params_type.__struct_fields__:
        value = _limits_moved_in(params_type, value)
    try:
        return msgspec.convert(value, params_type)
    except msgspec.ValidationError as exc:
        found = paramcheck.problems(params_type, value)
        if not found:  # a problem no single member shows
            raise _invalid(str(exc)) from None
        fields = [p.field for p in found]
        extra = {"fields": fields} if len(fields) > 1 else {}
        raise InvalidParams(paramcheck.describe(found), field=fields[0], **extra) from None


def _limits_moved_in(params_type: type[Params], value: dict[str, Any]) -> dict[str, Any]:
    """A limit given at the top level (`timeout_ms` beside `code`) where the method
    takes it in `limits`: moved there, the one place it can mean; given in both
    places with different values, -32602 naming `limits.<name>`."""
    stray = [k for k in RunLimits.__struct_fields__ if k in value and k not in params_type.__struct_fields__]
    if not stray:
        return value
    limits = value.get("limits", {})
    if not isinstance(limits, dict):
        raise InvalidParams(f"limits must be an object, like {{\"{stray[0]}\": ...}}", field="limits")
    limits = dict(limits)
    for name in stray:
        given = value.pop(name)
        if name in limits and limits[name] != given:
            raise InvalidParams(
                f"{name} is given twice, at the top level and as limits.{name}, with different values:"
                f" give it once, as limits.{name}",
                field=f"limits.{name}",
            )
        limits[name] = given
    return {**value, "limits": limits}


def _undecodable(raw: msgspec.Raw, within: type[msgspec.Struct] | None = None, prefix: str = "") -> InvalidParams:
    """-32602 naming the member Python cannot hold; inside a member that is itself a
    Struct of ours (`limits`), the member within it (`limits.timeout_ms`)."""
    try:
        members = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError):
        members = {}
    for name, member in members.items():
        try:
            msgspec.json.decode(member)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            inner = _struct_member(within, name)
            if inner is not None:
                return _undecodable(member, inner, f"{prefix}{name}.")
            text = str(exc).partition(" - at `$")[0]
            return InvalidParams(f"invalid params: {text} (in `{prefix}{name}`)", field=prefix + name)
    return InvalidParams("invalid params: a value cannot be decoded", field=prefix.rstrip(".") or "params")


def _struct_member(struct: type[msgspec.Struct] | None, name: str) -> type[msgspec.Struct] | None:
    """The Struct type of `struct`'s member `name` (plain or optional), if it is one."""
    if struct is None or name not in struct.__struct_fields__:
        return None
    kind = msgspec.inspect.type_info(struct)
    for field in getattr(kind, "fields", ()):
        if field.name == name:
            inner = field.type
            if isinstance(inner, msgspec.inspect.UnionType):
                inner = next((t for t in inner.types if isinstance(t, msgspec.inspect.StructType)), None)
            if isinstance(inner, msgspec.inspect.StructType):
                found: type[msgspec.Struct] = inner.cls
                return found
    return None


def _invalid(message: str) -> InvalidParams:
    text, _, where = message.partition(" - at `$")
    path = where.rstrip("`").lstrip(".")
    leaf = _MISSING.fullmatch(text) or _UNKNOWN.fullmatch(text)
    if leaf:
        path = f"{path}.{leaf[1]}" if path else leaf[1]
    return InvalidParams(f"invalid params: {text}" + (f" (at `{path}`)" if path else ""), field=path or None)


def describe_result(record: CallRecord, result: object) -> None:
    """Fill in what the result says (run id and outcome, blobs written)."""
    if isinstance(result, types.ExecutionResult):
        record.run_id = result.run_id
        record.run_status = result.status
        record.blobs_created = list(result.output_blobs)
        if isinstance(result.error, types.RunError):
            record.error_type = result.error.type
        if isinstance(result.session_rolled_back, bool):
            record.session_rolled_back = result.session_rolled_back
    elif isinstance(result, types.CreateBlobResult):
        record.blobs_created = [result.blob_id]
    elif isinstance(result, types.CreateSkillResult):
        record.skill, record.version = result.name, result.version


class Dispatcher:
    """Calls a method by name with raw params, on behalf of `caller` (the wire layer
    authenticates it); raises RPCError subclasses."""

    def __init__(self, context: Context, observer: Observer | None = None, *, require_caller: bool = False) -> None:
        self.context = context
        self.observer = observer  # told of every call that names a known method (audit, metrics)
        # The server's dispatcher: a transport that did not authenticate its call
        # (passed no caller) is refused, never served as the context's default caller.
        self.require_caller = require_caller

    async def __call__(self, method: str, raw_params: msgspec.Raw, caller: Caller | None = None) -> msgspec.Struct:
        if not tracing.enabled():
            return await self._dispatch(method, raw_params, caller)
        with tracing.span(f"rpc {method}" if method in METHODS else "rpc (unknown method)"):  # every door's calls
            return await self._dispatch(method, raw_params, caller)

    async def _dispatch(self, method: str, raw_params: msgspec.Raw, caller: Caller | None) -> msgspec.Struct:
        entry = METHODS.get(method)
        if entry is None:
            raise MethodNotFound(f"method not found: {method!r}", {"methods": sorted(METHODS)})
        if caller is None and self.require_caller:
            raise Unauthorized("unauthorized: this transport did not identify the caller")
        ctx = self._context_of_call(caller)
        if method in RUN_METHODS:
            return await self._call(ctx, method, entry, raw_params)
        started = time.perf_counter()
        try:
            async with ctx.calls.admit(ctx.caller) as charge:
                result = await self._call(ctx, method, entry, raw_params)
                charge.bytes = len(raw_params) + _content_bytes(result)
                return result
        except CallsBusy as exc:
            refused = QuotaExceeded(exc.message, exc.limit, exc.value, retry_after_s=1)
            if self.observer is not None:  # a refusal is a call too: counted and audited
                self._observe(ctx, method, raw_params, None, started, None, refused)
            raise refused from None

    def _context_of_call(self, caller: Caller | None) -> Context:
        """The server's context as this call sees it: its caller's, and, when calls are
        observed, with a `resolved` list of its own (one copy, made only when needed)."""
        changes: dict[str, Any] = {}
        if caller is not None and caller != self.context.caller:
            changes["caller"] = caller
        if self.observer is not None:
            changes["resolved"] = []
        return dataclasses.replace(self.context, **changes) if changes else self.context

    async def _call(self, ctx: Context, method: str, entry: Method, raw_params: msgspec.Raw) -> msgspec.Struct:
        if self.observer is None:
            return await entry.handler(ctx, decode_params(entry.params, raw_params))
        started = time.perf_counter()
        phases.mark("call")
        params: Params | None = None
        try:
            params = decode_params(entry.params, raw_params)
            result = await entry.handler(ctx, params)
        except RPCError as exc:
            self._observe(ctx, method, raw_params, params, started, None, exc)
            raise
        self._observe(ctx, method, raw_params, params, started, result, None)
        phases.mark("audited")
        return result

    def _observe(
        self, ctx: Context, method: str, raw: msgspec.Raw, params: Params | None, started: float,
        result: msgspec.Struct | None, error: RPCError | None,
    ) -> None:
        """Tell the observer of the call. Observing never changes a call's answer: a call
        that completed (a run that happened) is never reported to its client as failed."""
        try:
            self._record(ctx, method, raw, params, started, result, error)
        except Exception:
            logger.exception("cannot record a call of %s", method)

    def _record(
        self, ctx: Context, method: str, raw: msgspec.Raw, params: Params | None, started: float,
        result: msgspec.Struct | None, error: RPCError | None,
    ) -> None:
        assert self.observer is not None
        record = CallRecord(
            time=datetime.now(UTC).isoformat(timespec="milliseconds"),
            tenant=ctx.caller.tenant,
            method=method,
            status="ok" if error is None else "error",
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            bytes_in=len(raw),
            bytes_out=len(_encoder.encode(result)) if result is not None else 0,
        )
        session_id = getattr(params, "session_id", None)
        if isinstance(session_id, str):  # a prefix of its key: the id itself is a bearer secret
            record.session = key_of(session_id)[:16]
        created = getattr(result, "session_id", None)
        if isinstance(created, str) and created != session_id:  # create_session, fork_session
            record.session_created = key_of(created)[:16]
        name = getattr(params, "name", None)
        if isinstance(name, str):
            record.skill = name[:200]
            # The version the call itself resolved (none when it found no skill): never a
            # second lookup, which could answer otherwise or fail after the call succeeded.
            record.version = ctx.resolved[0].version if ctx.resolved else None
        if error is not None:
            record.error_code = error.code
            record.error_type = type(error).__name__
        describe_result(record, result)
        self.observer.record(record)
