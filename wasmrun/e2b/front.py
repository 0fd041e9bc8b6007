"""The E2B-compatible front, mounted on the server: `/e2b/api` is the control plane
(`E2B_API_URL`), `/e2b/sandbox` every sandbox endpoint (`E2B_SANDBOX_URL`: the SDK sends
them all to that one URL, with `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import Receive, Scope, Send

from wasmrun.doors.admission import Busy, admit
from wasmrun.doors.callers import Authenticate
from wasmrun.e2b import commands, control, envd, interpreter, sweeper
from wasmrun.e2b.calls import CallerOf, Front, FrontError
from wasmrun.e2b.sandboxes import E2BSandbox
from wasmrun.protocol.methods import Dispatcher
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import RequestsInFlight

API_PREFIX = "/e2b/api"
SANDBOX_PREFIX = "/e2b/sandbox"

SandboxEndpoint = Callable[[Front, Request, E2BSandbox], Awaitable[Response]]


def _admit(front: Front, caller: Caller) -> contextlib.ExitStack:
    """The request's place in its tenant's `concurrent_requests` (the doors' admission), or 429."""
    held = admit(front.in_flight, caller)
    if isinstance(held, Busy):
        raise FrontError(held.status, held.message)
    return held


def _control(endpoint: control.Endpoint, front: Front) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        front.sweep()
        try:
            caller = front.api_caller(request)
            # A kill only ends work: it is taken when the tenant's places are all held (by
            # the cells it ends, say), or nothing could stop what holds them.
            with contextlib.nullcontext() if endpoint in control.ENDING else _admit(front, caller):
                answer: Response = await endpoint(front, request)
                return answer
        except FrontError as exc:
            return control.error(exc.status, exc.message)

    return handle


class _Held(Response):
    """An answer whose request keeps its place in its tenant's `concurrent_requests`
    until it has been sent (streamed to its end, or its client gone), and past that until
    its `work` (a cell or a command, which goes on when its client leaves) has run or been dropped."""

    def __init__(self, answer: Response, hold: contextlib.ExitStack, work: asyncio.Future[None] | None) -> None:
        # Not Response.__init__: nothing of its own is sent; `answer` is, as it is.
        self.answer, self.hold, self.work = answer, hold, work
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.answer(scope, receive, send)
        except interpreter.SandboxGone:
            pass  # the answer stops unfinished: the server closes its connection
        finally:
            if isinstance(self.answer, interpreter.CellResponse):
                self.answer.stream.leave()  # sent, or its client gone: its lines wait for no one
            if self.work is None or self.work.done():
                self.hold.close()
            else:
                self.work.add_done_callback(lambda _: self.hold.close())


async def sandbox_of(front: Front, request: Request) -> E2BSandbox:
    """The sandbox a request names by `E2b-Sandbox-Id` (its id is the secret that reaches
    it, as a session id is), checked against `X-Access-Token` when the SDK sends one."""
    sandbox_id = request.headers.get("e2b-sandbox-id", "")
    sandbox = await front.lookup(sandbox_id)
    if sandbox is None:
        raise FrontError(502, f"The sandbox {sandbox_id[:80]!r} was not found")
    token = request.headers.get("x-access-token")
    if token is not None and not hmac.compare_digest(token.encode("utf-8", "replace"), sandbox.access_token.encode()):
        raise FrontError(401, "the sandbox's access token does not match")
    if sandbox.paused:
        raise FrontError(502, f"The sandbox {sandbox.sandbox_id} is paused: resume it with Sandbox.connect()")
    return sandbox


def _in_sandbox(endpoint: SandboxEndpoint, front: Front) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        front.sweep()
        try:
            sandbox = await sandbox_of(front, request)
            with contextlib.ExitStack() as unless_answered:
                unless_answered.enter_context(_admit(front, sandbox.caller))
                answer = await endpoint(front, request, sandbox)
                held = (interpreter.CellResponse, commands.CommandResponse)
                work = answer.work if isinstance(answer, held) else None
                return _Held(answer, unless_answered.pop_all(), work)
        except FrontError as exc:
            return envd.error_response(request, exc)

    return handle


def sandbox_routes(front: Front) -> list[BaseRoute]:
    table: list[tuple[str, SandboxEndpoint, list[str]]] = [
        ("/execute", interpreter.execute, ["POST"]),
        ("/contexts", interpreter.create_context, ["POST"]),
        ("/contexts", interpreter.list_contexts, ["GET"]),
        ("/contexts/{context_id}", interpreter.remove_context, ["DELETE"]),
        ("/contexts/{context_id}/restart", interpreter.restart_context, ["POST"]),
        ("/health", envd.health, ["GET"]),
        ("/files", envd.download, ["GET"]),
        ("/files", envd.upload, ["POST"]),
        ("/filesystem.Filesystem/{method}", envd.filesystem_rpc, ["POST"]),
        ("/process.Process/{method}", commands.process_rpc, ["POST"]),
        ("/{rest:path}", envd.refused, ["GET", "POST", "PUT", "DELETE"]),
    ]
    return [Route(path, _in_sandbox(endpoint, front), methods=methods) for path, endpoint, methods in table]


def e2b_routes(
    dispatcher: Dispatcher, authenticate: Authenticate, in_flight: RequestsInFlight | None = None,
    caller_of: CallerOf | None = None, lifespans: list[Callable[[], AbstractAsyncContextManager[None]]] | None = None,
    workspace_mb: int | None = None,
) -> list[BaseRoute]:
    """The front's routes, for the server's app (so its middleware applies); `in_flight`
    is the server's count of each tenant's requests, shared with /rpc and /mcp;
    `caller_of` a tenant by name (a sandbox's record names its tenant); the expiry sweep's
    lifespan is added to `lifespans` (sweeper.py); `workspace_mb` each sandbox's workspace
    quota (WASMRUN_E2B_WORKSPACE_MB; None: the runs' default)."""
    front = Front(
        dispatcher, authenticate, in_flight if in_flight is not None else RequestsInFlight(), caller_of, workspace_mb
    )
    if lifespans is not None:
        lifespans.append(sweeper.sweeping(front))
    return [
        Mount(API_PREFIX, routes=control.control_routes(front, _control)),
        Mount(SANDBOX_PREFIX, routes=sandbox_routes(front)),
    ]


