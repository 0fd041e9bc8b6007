"""The Jupyter Kernel Gateway front's routes, at the root of the server's port (the paths
Jupyter clients build from a host, a port and a token): `GET /api`, `/api/kernelspecs`,
`/api/kernels` (create, list, get, delete, restart, interrupt) and the channels WebSocket.
A token is a wasmrun tenant key, sent as `Authorization: token <key>` (or Bearer) or
`?token=<key>`; a server without tenants is open, on loopback only, as its other doors."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from wasmrun.doors.admission import Busy, admit
from wasmrun.doors.callers import Authenticate, KeyForm, Unauthenticated, resolve
from wasmrun.e2b import guestfiles
from wasmrun.e2b.calls import Front, FrontError, read_json_object
from wasmrun.e2b.sandboxes import E2BSandbox
from wasmrun.jupyter import channels, messages
from wasmrun.jupyter.kernels import Kernel, KernelTable, new_kernel_id
from wasmrun.protocol.methods import Dispatcher
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import RequestsInFlight
from wasmrun.wire.guard import RequestGuard

API_VERSION = "2.14.0"  # the Jupyter Server REST API this front answers as
KERNEL_NAME = "python3"
# Jupyter's clients send the token as `Authorization: token <key>`, or on the URL.
KEY_FORMS = (KeyForm.TOKEN_HEADER, KeyForm.TOKEN_QUERY)


def _version() -> str:
    try:
        return version("wasmrun")
    except PackageNotFoundError:
        return "0"


def error(status: int, message: str) -> JSONResponse:
    """An error as Jupyter Server answers one."""
    return JSONResponse({"message": message, "reason": None}, status_code=status)


class JupyterFront:
    def __init__(
        self, dispatcher: Dispatcher, authenticate: Authenticate, in_flight: RequestsInFlight,
        guard: RequestGuard | None = None,
    ) -> None:
        self.front = Front(dispatcher, authenticate, in_flight)
        self.table = KernelTable()
        self.guard = guard
        self.clock = time.time
        self.version = _version()

    def caller(self, connection: HTTPConnection) -> Caller:
        """The tenant a token names: `Authorization: token|Bearer <key>` or `?token=<key>`."""
        caller = resolve(self.front.authenticate, connection, KEY_FORMS)
        if isinstance(caller, Unauthenticated):
            raise FrontError(401, "unauthorized: send a wasmrun tenant key as the Jupyter token")
        return caller

    def kernel_of(self, caller: Caller, kernel_id: str) -> Kernel:
        kernel = self.table.find(kernel_id, caller.tenant)
        if kernel is None or kernel.ended:
            raise FrontError(404, f"Kernel does not exist: {kernel_id[:80]}")
        return kernel

    def kernel_info(self) -> dict[str, Any]:
        served = self.front.dispatcher.context.served
        return messages.kernel_info(served.facts().python, self.version, served.name)

    def spec(self) -> dict[str, Any]:
        served = self.front.dispatcher.context.served
        return {"name": KERNEL_NAME, "resources": {}, "spec": {
            "argv": [], "display_name": f"Python {served.facts().python} (wasmrun, {served.name} image)",
            "language": "python", "interrupt_mode": "message", "env": {}, "metadata": {"wasmrun_image": served.name},
        }}

    async def prune(self, tenant: str) -> None:
        """Ends the tenant's kernels whose sessions ended without them (closed over /rpc,
        expired idle): so its kernels are never more than its sessions."""
        sessions = self.front.dispatcher.context.sessions
        kernels = self.table.owned(tenant)
        if sessions is None or not kernels:
            return
        metas = await asyncio.to_thread(sessions.owned, tenant) if sessions.blocking else sessions.owned(tenant)
        live = {meta.session_id for meta in metas}
        for kernel in kernels:
            if kernel.session_id not in live and not kernel.lock.locked():
                self.drop(kernel)

    def drop(self, kernel: Kernel) -> None:
        kernel.ended = True
        self.table.remove(kernel.kernel_id)
        for connection in list(kernel.connections):
            connection.close()

    async def start(self, caller: Caller) -> Kernel:
        await self.prune(caller.tenant)
        policy = self.front.session_policy
        info = await self.front.call(
            caller, "create_session", {"language": "python", "idle_timeout_s": policy.max_idle_timeout_s}
        )
        now = self.clock()
        kernel = Kernel(new_kernel_id(), caller, info["session_id"], now, now)
        self.table.add(kernel)
        return kernel

    async def interrupt(self, kernel: Kernel) -> None:
        with contextlib.suppress(FrontError):  # its session gone: nothing runs
            await self.front.call(kernel.caller, "interrupt_session", {"session_id": kernel.session_id})

    async def end(self, kernel: Kernel) -> None:
        """Its cells still queued are dropped, the one running interrupted, its session closed."""
        self.drop(kernel)
        await self.interrupt(kernel)
        await self.front.close_session(kernel.caller, kernel.session_id)

    async def restart(self, kernel: Kernel) -> None:
        """A fresh interpreter in a new session with the old one's files (as a restarted
        kernel keeps its machine's), its execution count from 0."""
        await self.interrupt(kernel)
        async with kernel.lock:
            fresh = (await self.front.call(kernel.caller, "create_session", {
                "language": "python", "idle_timeout_s": self.front.session_policy.max_idle_timeout_s,
            }))["session_id"]
            # carry_files needs only a holder of the caller.
            holder = E2BSandbox("", kernel.caller, "", {}, 0.0, 0.0, "")
            try:
                await guestfiles.carry_files(self.front, holder, kernel.session_id, fresh)
            except FrontError:
                await self.front.close_session(kernel.caller, fresh)
                raise
            old, kernel.session_id, kernel.execution_count = kernel.session_id, fresh, 0
            kernel.history.clear()
        await self.front.close_session(kernel.caller, old)


Endpoint = Callable[[JupyterFront, Request, Caller], Awaitable[Response]]


async def api(request: Request) -> Response:
    """The API's version: public, as Jupyter Server's is."""
    return JSONResponse({"version": API_VERSION, "implementation": "wasmrun", "implementation_version": _version()})


async def kernelspecs(front: JupyterFront, request: Request, caller: Caller) -> Response:
    return JSONResponse({"default": KERNEL_NAME, "kernelspecs": {KERNEL_NAME: front.spec()}})


async def kernelspec(front: JupyterFront, request: Request, caller: Caller) -> Response:
    name = request.path_params["name"]
    if name != KERNEL_NAME:
        return error(404, f"Kernel spec {name[:80]!r} not found: this server serves {KERNEL_NAME!r}")
    return JSONResponse(front.spec())


async def resource(front: JupyterFront, request: Request, caller: Caller) -> Response:
    return error(404, "this kernel spec has no resources (no logo files)")


async def create(front: JupyterFront, request: Request, caller: Caller) -> Response:
    body = await read_json_object(request)
    name = body.get("name", KERNEL_NAME)
    if name not in (KERNEL_NAME, None, ""):
        shown = name[:80] if isinstance(name, str) else type(name).__name__
        return error(404, f"No such kernel named {shown!r}: this server serves {KERNEL_NAME!r}")
    kernel = await front.start(caller)
    headers = {"Location": f"/api/kernels/{kernel.kernel_id}"}
    return JSONResponse(kernel.model(), status_code=201, headers=headers)


async def list_kernels(front: JupyterFront, request: Request, caller: Caller) -> Response:
    await front.prune(caller.tenant)
    return JSONResponse([kernel.model() for kernel in front.table.owned(caller.tenant)])


async def get_kernel(front: JupyterFront, request: Request, caller: Caller) -> Response:
    return JSONResponse(front.kernel_of(caller, request.path_params["kernel_id"]).model())


async def delete_kernel(front: JupyterFront, request: Request, caller: Caller) -> Response:
    await front.end(front.kernel_of(caller, request.path_params["kernel_id"]))
    return Response(status_code=204)


async def restart_kernel(front: JupyterFront, request: Request, caller: Caller) -> Response:
    kernel = front.kernel_of(caller, request.path_params["kernel_id"])
    await front.restart(kernel)
    return JSONResponse(kernel.model())


async def interrupt_kernel(front: JupyterFront, request: Request, caller: Caller) -> Response:
    await front.interrupt(front.kernel_of(caller, request.path_params["kernel_id"]))
    return Response(status_code=204)


async def refused(front: JupyterFront, request: Request, caller: Caller) -> Response:
    return error(404, (
        f"{request.url.path[:120]} is not served: wasmrun's Jupyter front serves /api, /api/kernelspecs,"
        " /api/kernels and the kernels' channels (docs/jupyter.md)"
    ))


def _rest(endpoint: Endpoint, front: JupyterFront) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            caller = front.caller(request)
            held = admit(front.front.in_flight, caller)
            if isinstance(held, Busy):
                return error(held.status, held.message)
            with held:
                return await endpoint(front, request, caller)
        except FrontError as exc:
            return error(exc.status, exc.message)

    return handle


def _channels(front: JupyterFront) -> Callable[[WebSocket], Awaitable[None]]:
    async def handle(websocket: WebSocket) -> None:
        """The kernel's channels; refused before the upgrade (an HTTP answer) when the
        Host or Origin is not this server's, the token names nobody, or the kernel is not
        the tenant's. The socket holds a place in its tenant's concurrent_requests."""
        try:
            if front.guard is not None:
                why = front.guard.refusal(websocket.headers.get("host"), websocket.headers.get("origin"))
                if why is not None:
                    raise FrontError(403, f"forbidden: {why}")
            caller = front.caller(websocket)
            kernel = front.kernel_of(caller, websocket.path_params["kernel_id"])
            held = admit(front.front.in_flight, caller)
            if isinstance(held, Busy):
                raise FrontError(held.status, held.message)
            with held:
                await channels.serve(front, kernel, websocket)
        except FrontError as exc:
            await _deny(websocket, exc)

    return handle


async def _deny(websocket: WebSocket, exc: FrontError) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error(exc.status, exc.message))
    else:
        await websocket.close(code=1008, reason=exc.message[:120])


def jupyter_routes(
    dispatcher: Dispatcher, authenticate: Authenticate, in_flight: RequestsInFlight | None = None,
    guard: RequestGuard | None = None,
) -> list[BaseRoute]:
    """The front's routes, for the server's app (so its middleware applies to the HTTP
    ones; the WebSocket checks the same guard itself)."""
    front = JupyterFront(dispatcher, authenticate, in_flight if in_flight is not None else RequestsInFlight(), guard)
    table: list[tuple[str, Endpoint, list[str]]] = [
        ("/api/kernelspecs", kernelspecs, ["GET"]),
        ("/api/kernelspecs/{name}", kernelspec, ["GET"]),
        ("/kernelspecs/{name}/{file:path}", resource, ["GET"]),
        ("/api/kernels", create, ["POST"]),
        ("/api/kernels", list_kernels, ["GET"]),
        ("/api/kernels/{kernel_id}", get_kernel, ["GET"]),
        ("/api/kernels/{kernel_id}", delete_kernel, ["DELETE"]),
        ("/api/kernels/{kernel_id}/restart", restart_kernel, ["POST"]),
        ("/api/kernels/{kernel_id}/interrupt", interrupt_kernel, ["POST"]),
        ("/api/{rest:path}", refused, ["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]
    return [
        WebSocketRoute("/api/kernels/{kernel_id}/channels", _channels(front)),
        Route("/api", api, methods=["GET"]),
        *(Route(path, _rest(endpoint, front), methods=methods) for path, endpoint, methods in table),
    ]
