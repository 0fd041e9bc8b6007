"""The dynamic-sessions front, mounted on the server under a pool endpoint,
`/azure/pools/<name>` (the clients' `pool_management_endpoint`): `code/execute`, `files`,
`files/upload`, `files/content/{name}`, `files/{name}` and `session`, each with
`?identifier=`, each as the tenant whose key is the call's `Authorization: Bearer` token."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from wasmrun.abi import USER_HOME
from wasmrun.azure import endpoints
from wasmrun.azure.endpoints import DELETED
from wasmrun.azure.identifiers import (
    COOLDOWN_S,
    DATA,
    MAX_QUEUED,
    AzureSession,
    IdentifierTable,
    Key,
    checked_identifier,
    checked_pool,
)
from wasmrun.doors.admission import Busy, admit
from wasmrun.doors.callers import Authenticate, KeyForm, Unauthenticated, resolve
from wasmrun.e2b.calls import SESSION_GONE, Front, FrontError
from wasmrun.e2b.sandboxes import DEFAULT_CONTEXT, CodeContext, E2BSandbox, new_id
from wasmrun.protocol.methods import Dispatcher
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import RequestsInFlight

PREFIX = "/azure/pools/{pool}"
SWEEP_EVERY_S = 5.0
CODES = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
         413: "PayloadTooLarge", 429: "TooManyRequests", 500: "InternalServerError", 502: "BadGateway",
         503: "ServiceUnavailable", 507: "InsufficientStorage"}
START_IN = "import runtime._boot as _b\n_b.start_in({folder!r})\ndel _b\n"
T = TypeVar("T")


def error(status: int, message: str) -> JSONResponse:
    """The service's error body; the E2B door's file code names its paths under /home/user,
    the same folder as /mnt/data here."""
    text = message.replace(USER_HOME, DATA)
    return JSONResponse({"error": {"code": CODES.get(status, "Error"), "message": text}}, status_code=status)


class AzureFront:
    """What every route works with: the calls into wasmrun (the E2B door's: the Dispatcher
    as the key's tenant, results and errors mapped, files moved through blobs), and the
    identifiers' sessions."""

    def __init__(self, dispatcher: Dispatcher, authenticate: Authenticate, in_flight: RequestsInFlight) -> None:
        self.calls = Front(dispatcher, authenticate, in_flight)
        self.idle_s = min(COOLDOWN_S, self.calls.session_policy.max_idle_timeout_s)
        self.table = IdentifierTable(self.idle_s)
        self._background: set[asyncio.Task[None]] = set()
        self._next_sweep = 0.0

    def caller(self, request: Request) -> Caller:
        caller = resolve(self.calls.authenticate, request, (KeyForm.AUTHORIZATION,))
        if isinstance(caller, Unauthenticated):
            raise FrontError(401, "unauthorized: the access token (Authorization: Bearer) must be a wasmrun tenant key")
        return caller

    def key(self, request: Request, caller: Caller) -> Key:
        """The session a request names: its tenant's, in its pool, by its `identifier` (checked)."""
        pool = checked_pool(request.path_params["pool"])
        return caller.tenant, pool, checked_identifier(request.query_params.get("identifier"))

    async def _make(self, caller: Caller) -> E2BSandbox:
        """A fresh session whose runs start in /mnt/data."""
        info = await self.calls.call(caller, "create_session", {"language": "python", "idle_timeout_s": self.idle_s})
        session_id = str(info["session_id"])
        code = START_IN.format(folder=DATA)
        started = await self.calls.call(caller, "run_code", {"language": "python", "code": code, "session_id": session_id})
        if started.get("status") != "completed":
            await self.calls.close_session(caller, session_id)
            raise FrontError(500, f"could not make {DATA} the session's working folder")
        now = time.time()
        return E2BSandbox(
            sandbox_id=new_id(), caller=caller, template="azure", metadata={}, started_at=now,
            end_at=now + self.idle_s, access_token="",
            contexts={DEFAULT_CONTEXT: CodeContext(DEFAULT_CONTEXT, session_id, cwd=DATA)},
        )

    async def _ready(self, entry: AzureSession, stale: E2BSandbox | None = None) -> E2BSandbox:
        """The identifier's session, made on first use (one for concurrent first calls), or
        again when `stale` is the one that is gone (expired, closed over /rpc)."""
        async with entry.making:
            if entry.holder is None or entry.holder is stale:
                entry.holder = None
                if self.table.find(entry.key) is not entry:  # deleted (or swept) while this call waited
                    raise FrontError(404, DELETED)
                entry.holder = await self._make(entry.caller)
            return entry.holder

    @contextlib.asynccontextmanager
    async def _queued(self, entry: AzureSession) -> AsyncIterator[None]:
        if entry.waiting >= MAX_QUEUED:
            raise FrontError(429, (
                f"this identifier already has {entry.waiting} calls running or queued, its most ({MAX_QUEUED}):"
                " wait for one to end"
            ))
        entry.waiting += 1
        try:
            yield
        finally:
            entry.waiting -= 1
            entry.last_used = time.monotonic()
            if entry.holder is None and not entry.waiting and self.table.find(entry.key) is entry:
                self.table.remove(entry.key)  # never made (a quota, say): nothing to keep

    async def in_session(self, key: Key, caller: Caller, work: Callable[[E2BSandbox], Awaitable[T]]) -> T:
        """`work` on the identifier's session, queued behind its other calls; once more on a
        new session when the one it had is gone (nothing of `work` ran in it then). The
        entry is taken and counted as waiting at once (no wait between: the sweep skips it)."""
        entry = self.table.get_or_add(key, caller)
        async with self._queued(entry):
            holder = await self._ready(entry)
            try:
                return await work(holder)
            except FrontError as exc:
                if exc.status != 502 or exc.message != SESSION_GONE:
                    raise
            return await work(await self._ready(entry, stale=holder))

    async def end(self, entry: AzureSession) -> None:
        """Closes the identifier's session: a run in flight is interrupted first."""
        holder, entry.holder = entry.holder, None  # its calls still queued make no new one (_ready)
        if holder is None:
            return
        holder.contexts[DEFAULT_CONTEXT].ended = True  # nor run in this one (endpoints.execute)
        with contextlib.suppress(FrontError):
            await self.calls.call(entry.caller, "interrupt_session", {"session_id": holder.session_id})
        await self.calls.close_session(entry.caller, holder.session_id)

    def sweep(self) -> None:
        """Every SWEEP_EVERY_S: the identifiers unused past their cooldown forgotten (their
        sessions, expired or not, closed in the background)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY_S
        for entry in self.table.take_idle(now):
            self._in_background(self.end(entry))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


Endpoint = Callable[[AzureFront, Request, Caller], Awaitable[Response]]


def _admit(front: AzureFront, caller: Caller) -> contextlib.ExitStack:
    """The request's place in its tenant's `concurrent_requests` (the doors' admission), or 429."""
    held = admit(front.calls.in_flight, caller)
    if isinstance(held, Busy):
        raise FrontError(held.status, held.message)
    return held


def _handler(endpoint: Endpoint, front: AzureFront) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        front.sweep()
        try:
            checked_pool(request.path_params["pool"])
            caller = front.caller(request)
            with _admit(front, caller):
                return await endpoint(front, request, caller)
        except FrontError as exc:
            return error(exc.status, exc.message)

    return handle


async def delete_session(front: AzureFront, request: Request, caller: Caller) -> Response:
    """`DELETE session?identifier=`: the session ends; the identifier's next use is a new one."""
    entry = front.table.remove(front.key(request, caller))
    if entry is not None:
        await front.end(entry)
    return Response(status_code=204)


async def refused(front: AzureFront, request: Request, caller: Caller) -> Response:
    raise FrontError(404, (
        f"{request.method} {request.url.path[:200]} is not served by this dynamic-sessions front: it answers"
        " code/execute, files, files/upload, files/content/{name}, files/{name} and session (docs/azure.md)"
    ))


def azure_routes(
    dispatcher: Dispatcher, authenticate: Authenticate, in_flight: RequestsInFlight | None = None
) -> list[BaseRoute]:
    """The front's routes, for the server's app (so its middleware applies); `in_flight`
    is the server's count of each tenant's requests, shared with the other doors."""
    front = AzureFront(dispatcher, authenticate, in_flight if in_flight is not None else RequestsInFlight())
    table: list[tuple[str, Endpoint, list[str]]] = [
        ("/code/execute", endpoints.execute, ["POST"]),
        ("/files/upload", endpoints.upload, ["POST"]),
        ("/files", endpoints.list_files, ["GET"]),
        ("/files/content/{name:path}", endpoints.content, ["GET"]),
        ("/files/{name:path}", endpoints.file_info, ["GET"]),
        ("/files/{name:path}", endpoints.delete_file, ["DELETE"]),
        ("/session", delete_session, ["DELETE"]),
        ("/{rest:path}", refused, ["GET", "POST", "PUT", "DELETE", "PATCH"]),
    ]
    routes = [Route(path, _handler(endpoint, front), methods=methods) for path, endpoint, methods in table]
    return [Mount(PREFIX, routes=routes)]
