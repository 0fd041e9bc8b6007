"""The front's way into wasmrun: protocol methods called through the server's
Dispatcher as the sandbox's tenant (so quotas, limits, audit and metrics apply), their
errors as HTTP statuses, request bodies read with a bound, the sandboxes' table."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any

import msgspec
from starlette.requests import Request

from wasmrun.e2b.sandboxes import DEFAULT_CONTEXT, E2BSandbox, SandboxTable
from wasmrun.protocol.errors import InvalidParams, QuotaExceeded, RPCError, SessionBusy, SessionNotFound, Unauthorized
from wasmrun.protocol.methods import Dispatcher
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import RequestsInFlight
from wasmrun.tenants.limits import SessionPolicy

Authenticate = Callable[[str | None], Caller | None]
MAX_JSON_BODY = 1024 * 1024  # control-plane and context bodies: small JSON
MAX_CODE_BODY = 16 * 1024 * 1024  # an /execute body: a cell of code
SESSION_GONE = (
    "the sandbox has ended: its session is gone (unused past the server's session idle timeout,"
    " WASMRUN_SESSION_MAX_IDLE_S); create a new sandbox"
)
# How often the table is checked against the sessions store (a sandbox's session closed
# over /rpc or expired); a tenant's own creates and lists check it at once.
PRUNE_EVERY_S = 5.0
# The bytes of cells' results a tenant may have waiting to be sent at once, all its cells
# together (each at most the server's result_bytes): past it, a cell's forms are left out.
RESULTS_ROOM = 64 * 1024 * 1024
# What a run answers for an output too large to inline (protocol/run_result.py).
STORED_OUTPUT = frozenset({"output_blob", "size_bytes", "kind", "preview"})


class _RawDisplay(msgspec.Struct):
    """A run's display with each form kept as its JSON text (sandbox's `Display`)."""

    data: dict[str, msgspec.Raw] = {}
    main: bool = False
    blobs: dict[str, str] = {}


_RAW_DISPLAYS = msgspec.json.Decoder(list[_RawDisplay])


class FrontError(Exception):
    """An answer other than success: its HTTP status and a message for the SDK to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def http_status(error: RPCError) -> int:
    if isinstance(error, SessionNotFound):
        return 404
    if isinstance(error, InvalidParams):
        return 400
    if isinstance(error, Unauthorized):
        return 401
    if isinstance(error, QuotaExceeded):
        return 429
    if isinstance(error, SessionBusy):
        return 409
    return 503 if error.retry_after_s is not None else 500


def whole_number(text: str | None, digits: int = 20) -> int | None:
    """`text` as a whole number when it is one in ASCII digits (str.isdigit also takes
    `²` and `５`, which int() refuses or reads), else None."""
    if text is None or not 0 < len(text) <= digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)


async def body_chunks(request: Request, limit: int, too_large: FrontError) -> AsyncGenerator[bytes, None]:
    """The body as it arrives, `too_large` raised past `limit` bytes, declared or as they
    come, without reading the rest."""
    declared = whole_number(request.headers.get("content-length"))
    if declared is not None and declared > limit:
        raise too_large
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        yield chunk


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) past `limit` bytes without reading the rest."""
    too_large = FrontError(413, f"the request body is over {limit} bytes")
    return b"".join([chunk async for chunk in body_chunks(request, limit, too_large)])


async def read_json_object(request: Request, limit: int = MAX_JSON_BODY) -> dict[str, Any]:
    """The body as a JSON object; empty means {}. Anything else is 400."""
    body = await read_body(request, limit)
    if not body.strip():
        return {}
    try:
        value = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):  # a string's bytes not UTF-8: the last
        raise FrontError(400, "the body is not valid JSON (UTF-8)") from None
    if not isinstance(value, dict):
        raise FrontError(400, "the body must be a JSON object")
    return value


class Front:
    """What every route of the front works with."""

    def __init__(self, dispatcher: Dispatcher, authenticate: Authenticate, in_flight: RequestsInFlight) -> None:
        self.dispatcher = dispatcher
        self.authenticate = authenticate
        self.in_flight = in_flight
        self.table = SandboxTable()
        sessions = dispatcher.context.sessions
        self.session_policy = sessions.policy if sessions is not None else SessionPolicy()
        self._background: set[asyncio.Task[None]] = set()
        self._next_prune = 0.0
        self._results_held: dict[str, int] = {}  # tenant -> bytes of cells' results not yet sent

    def take_room(self, tenant: str, wanted: int) -> int:
        """Room for a cell's results, at most `wanted` bytes and what is left of the
        tenant's RESULTS_ROOM (their lines wait for clients that may read slowly, or not
        at all), taken until given back."""
        held = self._results_held.get(tenant, 0)
        room = max(0, min(wanted, RESULTS_ROOM - held))
        self._results_held[tenant] = held + room
        return room

    def give_room(self, tenant: str, size: int) -> None:
        left = self._results_held.get(tenant, 0) - size
        if left > 0:
            self._results_held[tenant] = left
        else:
            self._results_held.pop(tenant, None)

    def api_caller(self, request: Request) -> Caller:
        """The control plane's caller: E2B's `X-API-KEY` (or a Bearer header) is a
        wasmrun tenant key; on a server without tenants every caller is the default one."""
        key = request.headers.get("x-api-key")
        authorization = f"Bearer {key}" if key else request.headers.get("authorization")
        caller = self.authenticate(authorization)
        if caller is None:
            raise FrontError(401, "unauthorized: set E2B_API_KEY to a wasmrun tenant key")
        return caller

    async def call(self, caller: Caller, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A protocol method's result, as plain data; its error as a FrontError."""
        raw = msgspec.Raw(msgspec.json.encode(params))
        try:
            result = await self.dispatcher(method, raw, caller)
        except RPCError as exc:
            raise FrontError(http_status(exc), exc.message) from None
        displays = getattr(result, "displays", msgspec.UNSET)
        if not isinstance(result, msgspec.Struct) or not isinstance(displays, list) or not displays:
            answer: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(result))
            return answer
        # A run's displays as their forms' JSON text, not a second tree of objects (a
        # megabyte of `[{}, ...]` is ~30 MB of them): results.Expansion sends that text.
        answer = msgspec.json.decode(msgspec.json.encode(msgspec.structs.replace(result, displays=msgspec.UNSET)))
        answer["displays"] = [msgspec.structs.asdict(d) for d in _RAW_DISPLAYS.decode(msgspec.json.encode(displays))]
        return answer

    async def read_blob(self, caller: Caller, blob_id: str) -> bytes:
        read = await self.call(caller, "read_blob", {
            "blob_id": blob_id, "mode": "full", "max_bytes": self.dispatcher.context.max_full_read_bytes,
        })
        content = str(read.get("content", ""))
        return base64.b64decode(content) if read.get("encoding") == "base64" else content.encode()

    async def run(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        """run_code's result, with an output too large to inline (stored as a blob, the
        result naming it) read back in its place."""
        try:
            result = await self.call(caller, "run_code", params)
        except FrontError as exc:
            if exc.status == 404:  # the session is gone: ended idle, or the server lost it
                raise FrontError(502, SESSION_GONE) from None
            raise
        output = result.get("output")
        if isinstance(output, dict) and set(output) == STORED_OUTPUT and isinstance(output["output_blob"], str):
            try:
                result["output"] = msgspec.json.decode(await self.read_blob(caller, output["output_blob"]))
            except msgspec.DecodeError:  # cut at the most a full read returns
                most = self.dispatcher.context.max_full_read_bytes
                raise FrontError(413, f"the answer is over the {most}-byte read limit of this server") from None
        return result

    async def close_session(self, caller: Caller, session_id: str) -> None:
        """Closes a session, waiting out a run in progress (one interrupted ends within its
        grace); one already gone is fine."""
        for _ in range(600):
            try:
                await self.call(caller, "close_session", {"session_id": session_id})
                return
            except FrontError as exc:
                if exc.status != 409:
                    return
            await asyncio.sleep(0.1)

    async def end(self, sandbox: E2BSandbox) -> None:
        """Closes the sandbox's sessions: its cells still queued are dropped, not run, and
        the one running is interrupted (it fails with `Interrupted`), as a killed sandbox's
        process would stop."""
        for context in sandbox.contexts.values():
            context.ended = True
        for context in list(sandbox.contexts.values()):
            with contextlib.suppress(FrontError):  # gone already: nothing runs
                await self.call(sandbox.caller, "interrupt_session", {"session_id": context.session_id})
            await self.close_session(sandbox.caller, context.session_id)

    def end_later(self, sandbox: E2BSandbox) -> None:
        """Ends a sandbox already out of the table in the background: a cell in progress
        finishes first, and no request waits for it."""
        self._in_background(self.end(sandbox))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)  # held: the loop keeps only a weak reference
        task.add_done_callback(self._background.discard)

    def sweep(self) -> None:
        """Ends the sandboxes past their timeout and, every PRUNE_EVERY_S in the background,
        those whose sessions ended without them."""
        for sandbox in self.table.take_expired(time.time()):
            self.end_later(sandbox)
        now = time.monotonic()
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY_S
            self._in_background(self.prune_all())

    async def prune_all(self) -> None:
        for tenant in self.table.tenants():
            await self.prune(tenant)

    async def prune(self, tenant: str) -> None:
        """Ends what the table holds of the tenant's sessions that ended without it (closed
        over /rpc, expired idle, lost): a sandbox whose own session is gone, a context whose
        session is. So the table holds no more sandboxes than the tenant has sessions."""
        sessions = self.dispatcher.context.sessions
        # Judged as they were before the look-up: a context made or restarted meanwhile is not.
        seen = [(s, c, c.session_id) for s in self.table.owned(tenant) for c in list(s.contexts.values())]
        if sessions is None or not seen:
            return
        metas = await asyncio.to_thread(sessions.owned, tenant) if sessions.blocking else sessions.owned(tenant)
        live = {meta.session_id for meta in metas}
        for sandbox, context, session_id in seen:
            if session_id in live or context.session_id != session_id:
                continue
            if context.context_id == DEFAULT_CONTEXT:
                if self.table.remove(sandbox.sandbox_id) is not None:
                    self.end_later(sandbox)
            elif sandbox.contexts.get(context.context_id) is context:
                context.ended = True
                del sandbox.contexts[context.context_id]


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


Handler = Callable[[Request], Awaitable[Any]]
