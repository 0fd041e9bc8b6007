"""The front's way into wasmrun: protocol methods called through the server's
Dispatcher as the sandbox's tenant (so quotas, limits, audit and metrics apply), their
errors as HTTP statuses, request bodies read with a bound, the sandboxes' table."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request

from wasmrun.doors.callers import Authenticate, KeyForm, Unauthenticated, resolve
from wasmrun.e2b.records import KIND, apply, from_record, to_record
from wasmrun.e2b.sandboxes import DEFAULT_CONTEXT, SANDBOX_ID, E2BSandbox, SandboxTable
from wasmrun.protocol.errors import InvalidParams, QuotaExceeded, RPCError, SessionBusy, SessionNotFound, Unauthorized
from wasmrun.protocol.methods import Dispatcher
from wasmrun.sessionstore.records import Record, RecordGone, RecordStore
from wasmrun.sessionstore.store import Unavailable
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import RequestsInFlight
from wasmrun.tenants.limits import SessionPolicy

# E2B's SDK sends the key as X-API-KEY; a Bearer header is taken too.
KEY_FORMS = (KeyForm.API_KEY_HEADER, KeyForm.AUTHORIZATION)
CallerOf = Callable[[str], Caller | None]  # a tenant by its name (TenantStore.caller)
T = TypeVar("T")
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
# How long a cell or file call waits for its session's run on another server to end.
BUSY_WAIT_S, BUSY_POLL_S = 900.0, 0.05
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


def killed(sandbox: E2BSandbox) -> FrontError:
    """A call in progress when its sandbox was killed or timed out: 502 in the words of E2B's
    proxy for a sandbox that is gone ("was not found"), which the SDK raises as
    SandboxNotRunningException."""
    return FrontError(502, (
        f"The sandbox {sandbox.sandbox_id} was not found: it was killed or reached its timeout while"
        " the call was in progress"
    ))


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

    def __init__(
        self, dispatcher: Dispatcher, authenticate: Authenticate, in_flight: RequestsInFlight,
        caller_of: CallerOf | None = None, workspace_mb: int | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        # Each sandbox's workspace quota (its disk, the largest upload): the operator's, or the runs' default.
        self.workspace_mb = workspace_mb
        self.workspace_bytes = (
            workspace_mb * 1024 * 1024 if workspace_mb else dispatcher.context.limits.resolve().workspace_bytes
        )
        self.authenticate = authenticate
        self.in_flight = in_flight
        self.caller_of = caller_of
        self.table = SandboxTable()
        sessions = dispatcher.context.sessions
        self.session_policy = sessions.policy if sessions is not None else SessionPolicy()
        # The sandboxes' records, where the sessions are (records.py): every server's.
        self.records = sessions.records() if sessions is not None else RecordStore(None)
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
        caller = resolve(self.authenticate, request, KEY_FORMS)
        if isinstance(caller, Unauthenticated):
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

    async def in_turn(self, caller: Caller, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """`method` on a sandbox's session (a cell's run_code, a command's run_command). Running
        on another server of a shared deployment (this one's calls queue on the context's lock),
        it waits its turn there, as a call queued here would; a session gone is SESSION_GONE."""
        waited = 0.0
        while True:
            try:
                return await self.call(caller, method, params)
            except FrontError as exc:
                if exc.status == 404:  # the session is gone: ended idle, or the server lost it
                    raise FrontError(502, SESSION_GONE) from None
                if exc.status != 409 or waited >= BUSY_WAIT_S:
                    raise
            await asyncio.sleep(BUSY_POLL_S)
            waited += BUSY_POLL_S

    async def run(self, caller: Caller, params: dict[str, Any]) -> dict[str, Any]:
        """run_code's result, with an output too large to inline (stored as a blob, the
        result naming it) read back in its place."""
        result = await self.in_turn(caller, "run_code", params)
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
        sandbox.ended = True
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
        """Every PRUNE_EVERY_S, in the background: ends the sandboxes past their timeout
        (whichever server takes each) and those whose sessions ended without them."""
        now = time.monotonic()
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY_S
            self._in_background(self.prune_all())

    async def prune_all(self) -> None:
        with contextlib.suppress(FrontError):  # the records out of reach: next time
            for record in await self.stored(self.records.take_expired, KIND):
                self.table.drop(record.key)
                sandbox = self._sandbox_of(record)
                if sandbox is not None:
                    self.end_later(sandbox)
            for tenant in await self.stored(self.records.owners, KIND) | self.table.tenants():
                await self.prune(tenant)

    async def prune(self, tenant: str) -> None:
        """Ends what the records hold of the tenant's sessions that ended without them
        (closed over /rpc, expired idle, lost): a sandbox whose own session is gone, a
        context whose session is; and drops from this server's table the sandboxes whose
        records are gone (ended on another server). So there are no more sandboxes than
        the tenant has sessions."""
        sessions = self.dispatcher.context.sessions
        records = await self.stored(self.records.owned, KIND, tenant)
        stored = {r.key for r in records}
        for held in self.table.owned(tenant):
            if held.sandbox_id not in stored:
                self.table.drop(held.sandbox_id)
        if sessions is None or not records:
            return
        metas = await asyncio.to_thread(sessions.owned, tenant) if sessions.blocking else sessions.owned(tenant)
        live = {meta.session_id for meta in metas}
        for record in records:
            # Judged as it was before the look-up: a context made or restarted meanwhile is not.
            sandbox = self._sandbox_of(record)
            if sandbox is None:
                continue
            gone = {c.context_id: c.session_id for c in sandbox.contexts.values() if c.session_id not in live}
            if DEFAULT_CONTEXT in gone:
                if await self.stored(self.records.delete, KIND, record.key) is not None:
                    self.table.drop(record.key)
                    self.end_later(sandbox)
            elif gone:
                with contextlib.suppress(FrontError):
                    await self.change(sandbox, functools.partial(_without, gone=gone))

    # -- the records ------------------------------------------------------------

    async def stored(self, call: Callable[..., T], *args: Any) -> T:
        """A call of the records (off the event loop when it waits on a database); out of
        reach, 503."""
        try:
            if self.records.blocking:
                return await asyncio.to_thread(call, *args)
            return call(*args)
        except Unavailable as exc:
            raise FrontError(503, f"the sandboxes' records cannot be reached now, try again: {exc}") from None

    def _caller(self, tenant: str) -> Caller | None:
        found = self.caller_of(tenant) if self.caller_of is not None else None
        if found is None:  # a server without tenants: its one caller
            anonymous = self.authenticate(None)
            found = anonymous if anonymous is not None and anonymous.tenant == tenant else None
        return found

    def _sandbox_of(self, record: Record) -> E2BSandbox | None:
        """The sandbox a record names, as this server holds it (brought up to date), or
        made from it; None when its tenant is no more."""
        held = self.table.find(record.key)
        if held is not None and held.caller.tenant == record.owner:
            apply(held, record)
            return held
        caller = self._caller(record.owner)
        return None if caller is None else from_record(record, caller)

    async def lookup(self, sandbox_id: str, tenant: str | None = None) -> E2BSandbox | None:
        """The sandbox as its record says now (held in this server's table from here on),
        or None when unknown, malformed, ended, or (with `tenant`) another tenant's: the
        same answer for each."""
        if not isinstance(sandbox_id, str) or not SANDBOX_ID.fullmatch(sandbox_id):
            return None
        record = await self.stored(self.records.get, KIND, sandbox_id)
        if record is None:
            self.table.drop(sandbox_id)
            return None
        sandbox = self._sandbox_of(record)
        if sandbox is None or (tenant is not None and record.owner != tenant):
            return None
        if self.table.find(sandbox_id) is not sandbox:
            self.table.add(sandbox)
        return sandbox

    async def keep(self, sandbox: E2BSandbox) -> None:
        """A new sandbox's record stored (its sessions made), and held here."""
        await self.stored(self.records.insert, KIND, to_record(sandbox))
        self.table.add(sandbox)

    async def change(self, sandbox: E2BSandbox, edit: Callable[[E2BSandbox], None]) -> None:
        """`edit` made to the sandbox's stored record (as it is now, under its lock), and
        this server's copy brought up to date; 404 if it ended meanwhile."""
        def step(record: Record) -> Record:
            scratch = from_record(record, sandbox.caller)
            edit(scratch)
            return to_record(scratch)

        try:
            record = await self.stored(self.records.change, KIND, sandbox.sandbox_id, step)
        except RecordGone:
            self.table.drop(sandbox.sandbox_id)
            raise FrontError(404, f"sandbox {sandbox.sandbox_id} not found: it has ended") from None
        apply(sandbox, record)

    async def forget(self, sandbox: E2BSandbox) -> bool:
        """Its record deleted, and its sessions ended in the background, by this call alone
        (False: it had ended already)."""
        self.table.drop(sandbox.sandbox_id)
        if await self.stored(self.records.delete, KIND, sandbox.sandbox_id) is None:
            return False
        self.end_later(sandbox)
        return True


def _without(sandbox: E2BSandbox, *, gone: dict[str, str]) -> None:
    """The contexts whose sessions ended out of the sandbox (unless replaced meanwhile)."""
    for context_id, session_id in gone.items():
        context = sandbox.contexts.get(context_id)
        if context is not None and context.session_id == session_id:
            del sandbox.contexts[context_id]


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


Handler = Callable[[Request], Awaitable[Any]]
