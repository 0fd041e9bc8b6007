"""The Skills Protocol tools over MCP (the official `mcp` SDK): stdio for
`wasmrun mcp`, streamable HTTP at `/mcp` for `wasmrun serve`.

There is no second implementation: `tools/list` answers the definitions of
wasmrun/tools.py, and `tools/call` hands the arguments, as raw JSON, to the same
`Dispatcher` that answers `/rpc`, so params are checked and errors worded
exactly as over JSON-RPC.

A tool result carries the method's whole result as `structuredContent` and a
text block for models that read only text: for a run, a short summary (status,
summary, error, where the output went); for file, blob and guide reads, the
content itself; otherwise the result as JSON. Large run outputs stay blobs, as
the run result has them (`output_blobs`); read them with `read_blob`. The PNG
pictures a run saved (the result's `images`) come as image content too. A
protocol error (unknown skill, bad params, busy) is an MCP tool error
(`isError: true`) whose text is the JSON-RPC error message.

The SDK is an optional extra (`pip install 'wasmrun[mcp]'`): importing this
module without it raises ImportError, and `wasmrun serve` then serves no /mcp.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import secrets
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

import mcp_types as types
import msgspec
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wasmrun.capabilities import facts_of
from wasmrun.mcp.displays import display_content
from wasmrun.mcp.events import JsonUnlessNotified, RunNotices, wanted
from wasmrun.mcp.listchanged import ToolListChanges
from wasmrun.protocol.errors import QuotaExceeded, RPCError, Unauthorized
from wasmrun.protocol.methods import RUN_METHODS, Dispatcher
from wasmrun.protocol.streaming import RUN_OUTPUT, RUN_TOOL_CALLS
from wasmrun.protocol.types import MAX_ARGS_DEPTH, CommandResult, ExecutionResult, ReadBlobResult
from wasmrun.tenants.caller import Caller
from wasmrun.tools import render, tools
from wasmrun.wire.app import error_response
from wasmrun.wire.jsonrpc import MAX_MESSAGE_CHARS, nests_deeper_than

logger = logging.getLogger("wasmrun.mcp")

SERVER_NAME = "wasmrun"
INSTRUCTIONS = (
    "Skills Protocol runtime: call load_skills_protocol_guide first, then list_skills, describe_skill and"
    " read_skill_file to learn a skill; run it with execute_skill, or compose skills in Python with run_code."
    " Keep large data in blobs (create_blob, read_blob). run_code calls main(args) (its return value is the"
    " output) or takes the value of the script's last line; a result's warnings say when that was misread."
)
MCP_SESSION_IDLE_S = 600.0  # an MCP session over HTTP unused this long is closed
MCP_MAX_SESSIONS = 1000  # beyond it, a new session is answered 503 until one ends
# Per tenant: its `mcp_sessions` limit (tenants/limits.py), so one tenant cannot take the 1,000.
PREVIEW_CHARS = 2000  # of a run's output, in the text block; the structured result has all of it
BLOB_TEMPLATE = types.ResourceTemplate(
    name="blob",
    uri_template="blob:{id}",
    description="A blob of this runtime by its ID (blob:<32 hex>), read whole; use the read_blob tool to sample a large one",
)
# Calls that may stream a run's output and its tool calls as notifications, when asked (mcp/events.py).
STREAMED_TOOLS = RUN_METHODS | {"submit_tool_results"}
_CONTENT_RESULTS = {"read_skill_file", "read_blob", "load_skills_protocol_guide"}


def _message(error: RPCError) -> str:
    """As the JSON-RPC error object words it (same cut)."""
    message = error.message
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 1] + "…"


# Pictures a tool result carries as image content (SVG stays a link: few MCP clients show it).
PICTURE_KINDS = ("image/png",)
MAX_PICTURES = 4
MAX_PICTURE_BYTES = 2 * 1024 * 1024


def run_summary(result: ExecutionResult) -> str:
    lines = [f"{result.status}: {result.summary} (run {result.run_id})"]
    if result.error is not msgspec.UNSET:
        lines.append(f"error: {result.error.type}: {result.error.message}")
    if result.output is not msgspec.UNSET:
        # msgspec, not json: a run's output is the guest's checked JSON text (msgspec.Raw)
        output = msgspec.json.encode(result.output).decode("utf-8")
        if len(output) > PREVIEW_CHARS:
            output = output[:PREVIEW_CHARS] + f"… ({len(output)} chars; all of it is in the structured result)"
        lines.append(f"output: {output}")
    if result.warnings:
        lines.extend(f"warning: {warning}" for warning in result.warnings)
    if result.displays:
        lines.append(f"displays: {len(result.displays)} (each follows as content; all forms in the structured result)")
    if result.output_blobs:
        lines.append("output blobs (read with read_blob): " + ", ".join(result.output_blobs))
    if result.images is not msgspec.UNSET:
        lines.append("pictures: " + ", ".join(f"{i.name} ({i.kind}, {i.blob_id})" for i in result.images))
    if isinstance(result, CommandResult):  # a command's two streams, as a terminal shows them
        for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            if text:
                cut = text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + f"… ({len(text)} chars in all)"
                lines.append(f"{name}:\n{cut}")
    elif result.logs_preview:
        lines.append("logs:\n" + result.logs_preview)
    return "\n".join(lines)


def _text(method: str, result: msgspec.Struct, plain: Any) -> str:
    if isinstance(result, ExecutionResult):
        return run_summary(result)
    if method in _CONTENT_RESULTS:
        return str(plain["content"])
    return json.dumps(plain, ensure_ascii=False, indent=1)


def _error(message: str, code: int, data: Any = None) -> types.CallToolResult:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return types.CallToolResult(
        content=[types.TextContent(text=message)], structured_content={"error": error}, is_error=True
    )


# Who an MCP request comes from: the request context to the caller (None: nobody).
Identify = Callable[[Any], "Caller | None"]


def build_server(
    dispatcher: Dispatcher, *, identify: Identify | None = None, with_create_skill: bool = False
) -> Server[Any]:
    """An MCP server whose tools call `dispatcher` (the one /rpc uses). With `identify`,
    every call is made on behalf of the caller it names, and refused when it names nobody;
    without it (stdio: the operator's own process), as the dispatcher's own caller."""
    handlers = _Handlers(dispatcher, identify, with_create_skill)
    changes = ToolListChanges()
    handlers.changes = changes
    dispatcher.context.served.on_switch(changes.changed)  # the tool texts follow the image served
    return _Server(
        SERVER_NAME, version=_version(), instructions=INSTRUCTIONS, on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool, on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_resource_templates, on_read_resource=handlers.read_resource,
        on_subscriptions_listen=changes.listen,
    )


class _Server(Server[Any]):
    """The SDK's server, its capabilities saying that the tool list may change (2025-era
    sessions: `tools.listChanged`; 2026-07-28 ones learn it from `subscriptions/listen`)."""

    def create_initialization_options(
        self, notification_options: NotificationOptions | None = None, *args: Any, **kwargs: Any
    ) -> InitializationOptions:
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, *args, **kwargs)


class _Handlers:
    """The MCP requests, each answered through the dispatcher as its caller."""

    def __init__(self, dispatcher: Dispatcher, identify: Identify | None, with_create_skill: bool) -> None:
        self.dispatcher = dispatcher
        self.identify = identify
        self.with_create_skill = with_create_skill
        self.changes: ToolListChanges | None = None
        self._listed: tuple[Any, types.ListToolsResult] | None = None  # (the facts, their listing)
        self.names = {tool.name for tool in tools(with_create_skill)}

    def listing(self) -> types.ListToolsResult:
        """The tools as they are now (their texts state the served image): made again when it changes."""
        context = self.dispatcher.context
        facts = facts_of(context.limits, context.egress.network.run_code, context.served.facts())
        listed = self._listed
        if listed is None or listed[0] != facts:
            offered = tools(self.with_create_skill, facts)
            listed = (facts, types.ListToolsResult(tools=[types.Tool.model_validate(render(t, "mcp")) for t in offered]))
            self._listed = listed
        return listed[1]

    async def dispatch(self, method: str, raw: msgspec.Raw, ctx: Any) -> msgspec.Struct:
        if self.identify is None:
            return await self.dispatcher(method, raw)
        caller = self.identify(ctx)
        if caller is None:
            raise Unauthorized("unauthorized: send a valid API key as `Authorization: Bearer <key>`")
        return await self.dispatcher(method, raw, caller=caller)

    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if self.changes is not None:
            self.changes.seen(ctx)
        return self.listing()

    async def list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])  # blobs are not listed, only read by ID

    async def list_resource_templates(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[BLOB_TEMPLATE])

    async def read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        if not uri.startswith("blob:"):
            raise MCPError(-32602, f"unknown resource {uri[:100]!r}: this server serves blob:<id> resources")
        ask = msgspec.Raw(json.dumps({"blob_id": uri, "mode": "full"}).encode())
        try:
            result = await self.dispatch("read_blob", ask, ctx)
        except RPCError as exc:
            raise MCPError(exc.code, _message(exc), exc.data) from None
        assert isinstance(result, ReadBlobResult)
        contents: types.TextResourceContents | types.BlobResourceContents
        if result.encoding == "base64":
            contents = types.BlobResourceContents(uri=uri, mime_type=result.kind, blob=result.content)
        else:
            contents = types.TextResourceContents(uri=uri, mime_type=result.kind, text=result.content)
        return types.ReadResourceResult(contents=[contents])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if self.changes is not None:
            self.changes.seen(ctx)
        if params.name not in self.names:
            return _error(f"unknown tool {params.name[:100]!r}; tools: {', '.join(sorted(self.names))}", -32601)
        raw = _arguments(params.arguments)
        if isinstance(raw, types.CallToolResult):
            return raw
        progress, log = wanted(getattr(ctx, "meta", None)) if params.name in STREAMED_TOOLS else (False, False)
        notices = RunNotices(ctx, progress, log) if progress or log else None
        listening = RUN_OUTPUT.set(notices.put) if notices is not None else None
        telling = RUN_TOOL_CALLS.set(notices.put_tool_calls) if notices is not None else None
        try:
            result = await self.dispatch(params.name, raw, ctx)
        except RPCError as exc:
            return _error(_message(exc), exc.code, exc.data)
        except Exception:
            ref = secrets.token_hex(4)
            logger.exception("internal error (ref %s) in MCP tool %r", ref, params.name)
            return _error(f"internal error (ref {ref})", -32603)
        finally:
            if listening is not None:
                RUN_OUTPUT.reset(listening)
            if telling is not None:
                RUN_TOOL_CALLS.reset(telling)
            if notices is not None:
                await notices.close()  # what the run wrote goes out before its result
        return await self.answer(params.name, result, ctx)

    async def answer(self, method: str, result: msgspec.Struct, ctx: Any) -> types.CallToolResult:
        # Through JSON rather than to_builtins: a run's output is JSON text (msgspec.Raw).
        plain = msgspec.json.decode(msgspec.json.encode(result))
        content: list[types.ContentBlock] = [types.TextContent(text=_text(method, result, plain))]
        if isinstance(result, ExecutionResult):
            shown, pictures = display_content(result, MAX_PICTURES)
            content.extend(shown)
            content.extend(await self.run_pictures(result, ctx, pictures))
            content.extend(types.ResourceLink(name=blob, uri=blob) for blob in result.output_blobs)
        return types.CallToolResult(content=content, structured_content=plain)

    async def run_pictures(self, result: ExecutionResult, ctx: Any, shown: set[str]) -> list[types.ContentBlock]:
        """The run's PNG pictures as image content (read as the caller, like read_blob):
        at most MAX_PICTURES with those its displays `shown` (base64), each at most
        MAX_PICTURE_BYTES, none twice; others stay resource links."""
        found: list[types.ContentBlock] = []
        images = result.images if result.images is not msgspec.UNSET else []
        for image in [i for i in images if i.kind in PICTURE_KINDS][: max(0, MAX_PICTURES - len(shown))]:
            ask = {"blob_id": image.blob_id, "mode": "sample_head", "max_bytes": MAX_PICTURE_BYTES + 1}
            try:
                read = await self.dispatch("read_blob", msgspec.Raw(json.dumps(ask).encode()), ctx)
            except RPCError:
                continue  # deleted since, or over a read limit: its link remains
            if isinstance(read, ReadBlobResult) and read.encoding == "base64" and not read.truncated:
                if read.content in shown:  # plt.show() saved it and showed it: given once
                    continue
                found.append(types.ImageContent(data=read.content, mime_type=image.kind))
        return found


def _arguments(arguments: dict[str, Any] | None) -> msgspec.Raw | types.CallToolResult:
    """A tool call's arguments back as the JSON the client sent, or the error to answer."""
    try:
        # The SDK's parser takes NaN and Infinity, which JSON (and /rpc) refuses:
        # refuse them here too rather than send null.
        encoded = json.dumps(arguments or {}, allow_nan=False).encode()
    except ValueError:
        return _error("invalid params: arguments hold NaN or Infinity, which JSON does not allow", -32602)
    if nests_deeper_than(encoded, MAX_ARGS_DEPTH + 1):  # /rpc's bound: the arguments object holds args
        return _error(f"invalid params: arguments nest deeper than {MAX_ARGS_DEPTH} levels", -32602)
    return msgspec.Raw(encoded)


def _version() -> str:
    try:
        return importlib.metadata.version("wasmrun")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def http_app(
    dispatcher: Dispatcher,
    *,
    authenticate: Callable[[str | None], Caller | None],
    max_body_bytes: int,
    with_create_skill: bool = False,
) -> tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[None]]]:
    """The ASGI app of `/mcp` (streamable HTTP), to be served by the wire app beside
    /rpc so that the same middleware (the Host/Origin guard) applies, and the lifespan
    that runs its session manager.

    Every HTTP request is authenticated like /rpc's (`authenticate` takes the
    Authorization header): one without a valid key is answered `unauthorized()` before
    the SDK sees it, and each tool call runs on behalf of the key on its own request,
    so a session's id alone lends nobody's identity.

    With sessions (the SDK's default mode): measured here, a tool call answers in about a
    third of the time of the stateless mode, which sets up a server per request. Sessions
    are bounded in number and closed when idle.
    """

    def identify(ctx: Any) -> Caller | None:
        request = getattr(ctx, "request", None)
        return authenticate(request.headers.get("authorization")) if request is not None else None

    # SSE mode, so that a tool call can send its run's output as notifications; a call
    # that sends none is still answered as one JSON body (mcp/events.py, JsonUnlessNotified).
    manager = StreamableHTTPSessionManager(
        build_server(dispatcher, identify=identify, with_create_skill=with_create_skill),
        json_response=False,
        max_request_body_size=max_body_bytes,
        session_idle_timeout=MCP_SESSION_IDLE_S,
        max_sessions=MCP_MAX_SESSIONS,
    )
    return TenantSessions(JsonUnlessNotified(StreamableHTTPASGIApp(manager)), authenticate), manager.run


async def serve_stdio(
    open_dispatcher: Callable[[], AbstractContextManager[Dispatcher]], *, with_create_skill: bool = False
) -> None:
    """Serve on stdin/stdout. The dispatcher (and so the sandbox worker processes) is
    made only once the SDK has pointed fd 1 at stderr, so that nothing a worker might
    write reaches the MCP stream."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        with open_dispatcher() as dispatcher:
            server = build_server(dispatcher, with_create_skill=with_create_skill)
            await server.run(read_stream, write_stream, server.create_initialization_options())


class TenantSessions:
    """The MCP session cap per tenant, in front of the SDK's server-wide one.

    A request without an `mcp-session-id` opens a session: refused (429, a JSON-RPC error
    naming `mcp_sessions`) while the tenant has `mcp_sessions` open, else passed on and,
    when the SDK answers it with a session id, counted for the tenant. A session stops
    counting when the client ends it (DELETE), when the SDK no longer knows it (404), or
    once it has been idle as long as the SDK keeps idle sessions (MCP_SESSION_IDLE_S).
    A session is its tenant's: another tenant's key naming it is answered 404, as if it
    did not exist (it can neither use nor end it)."""

    def __init__(self, app: ASGIApp, authenticate: Callable[[str | None], Caller | None]) -> None:
        self.app = app
        self.authenticate = authenticate
        self._sessions: dict[str, tuple[str, float]] = {}  # session id -> (tenant, last used)

    def open_sessions(self, tenant: str) -> int:
        horizon = time.monotonic() - MCP_SESSION_IDLE_S
        for sid in [sid for sid, (_, used) in self._sessions.items() if used < horizon]:
            del self._sessions[sid]
        return sum(1 for owner, _ in self._sessions.values() if owner == tenant)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        header = headers.get(b"authorization")
        caller = self.authenticate(header.decode("latin-1") if header is not None else None)
        session = headers.get(b"mcp-session-id", b"").decode("latin-1")
        if caller is None:  # Authenticated in front of this refuses it first; never counted
            await self.app(scope, receive, send)
            return
        known = self._sessions.get(session)
        if known is not None and known[0] != caller.tenant:  # another tenant's session: as if none
            await _not_found()(scope, receive, send)
            return
        pending = ""
        if not session:
            cap = caller.limits.mcp_sessions
            if self.open_sessions(caller.tenant) >= cap:
                await _busy(cap)(scope, receive, send)
                return
            pending = f"opening-{secrets.token_hex(8)}"  # counted while the SDK answers: no race past the cap
            self._sessions[pending] = (caller.tenant, time.monotonic())
        status: list[int] = []
        opened: list[str] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                if not session:
                    opened.extend(
                        v.decode("latin-1") for k, v in message.get("headers", []) if k.lower() == b"mcp-session-id"
                    )
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            now = time.monotonic()
            self._sessions.pop(pending, None)
            if opened and status and status[0] < 400:
                self._sessions[opened[0]] = (caller.tenant, now)
            elif session in self._sessions:
                if scope.get("method") == "DELETE" or (status and status[0] == 404):
                    del self._sessions[session]
                else:
                    self._sessions[session] = (self._sessions[session][0], now)


def _not_found() -> Response:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}})
    return Response(body, status_code=404, media_type="application/json")


def _busy(cap: int) -> Response:
    error = QuotaExceeded(
        f"busy for this tenant: it has {cap} MCP sessions open, its limit (mcp_sessions);"
        " end one (DELETE /mcp with its mcp-session-id) or let an idle one expire",
        "mcp_sessions", cap,
    )
    # A hint to poll, for the header alone: when a session frees up is not known, so `data` names no wait.
    error.retry_after_s = 1
    return error_response(error, 429)
