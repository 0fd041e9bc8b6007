"""The kernel's channels over one WebSocket (`/api/kernels/{id}/channels`): each text frame
a message with its `channel`. Shell and control requests are answered on their channel
between iopub `status` busy and idle, as ipykernel does; an execute_request's cell waits
its turn in the kernel's bounded queue. What is not a message, or is too large, or of a
type this kernel does not serve, gets an error reply and the socket stays open; a client
that sends only garbage, or does not read what it is sent, is let go (its kernel stays)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from wasmrun.e2b.calls import FrontError
from wasmrun.jupyter import messages
from wasmrun.jupyter.cells import CellRun
from wasmrun.jupyter.kernels import (
    MAX_CONNECTIONS,
    MAX_QUEUED_CELLS,
    TRY_AGAIN_LATER,
    Connection,
    Kernel,
    session_key,
)

if TYPE_CHECKING:
    from wasmrun.jupyter.front import JupyterFront

MAX_BAD_FRAMES = 32  # in a row: then the socket is closed (1008), the kernel kept
Handler = Callable[["Channel", str, dict[str, Any], dict[str, Any]], Awaitable[None]]


class Channel:
    """One connection's side of a kernel: what it asks, answered."""

    def __init__(self, front: JupyterFront, kernel: Kernel, connection: Connection) -> None:
        self.front, self.kernel, self.connection = front, kernel, connection

    def cell(self, parent: dict[str, Any]) -> CellRun:
        return CellRun(self.front.front, self.kernel, self.connection, parent)

    async def handle(self, frame: str | bytes | None) -> bool:
        """Answers one frame; False when it was not a message."""
        try:
            channel, parent, content = messages.parse(frame)
        except messages.BadFrame as exc:
            error = messages.error_content("BadMessage", str(exc))
            self.connection.put(messages.message("shell", "error", {}, error, self.kernel.kernel_id))
            return False
        self.kernel.last_activity = self.front.clock()
        handler = HANDLERS.get(parent["msg_type"])
        if handler is None:
            await unknown(self, channel, parent, content)
        else:
            await handler(self, channel, parent, content)
        return True

    async def around(self, channel: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
        """A reply between iopub busy and idle."""
        cell = self.cell(parent)
        cell.iopub("status", {"execution_state": "busy"})
        cell.reply(channel, messages.reply_type(parent["msg_type"]), content)
        cell.iopub("status", {"execution_state": "idle"})


async def kernel_info(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    await channel.around(name, parent, channel.front.kernel_info())


async def complete(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    code = content.get("code")
    await channel.around(name, parent, messages.complete(code if isinstance(code, str) else "", content.get("cursor_pos")))


async def inspect(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    await channel.around(name, parent, {"status": "ok", "found": False, "data": {}, "metadata": {}})


async def is_complete(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    code = content.get("code")
    await channel.around(name, parent, messages.is_complete(code) if isinstance(code, str) else {"status": "unknown"})


async def history(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    entries = [list(entry) for entry in channel.kernel.history]
    n = content.get("n")
    if content.get("hist_access_type") == "tail" and isinstance(n, int) and n >= 0:
        entries = entries[-n:] if n else []
    await channel.around(name, parent, {"status": "ok", "history": entries})


async def comm_info(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    await channel.around(name, parent, {"status": "ok", "comms": {}})


async def comm_open(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    """No comm targets here: the comm is closed at once, as a kernel without its target does."""
    comm_id = content.get("comm_id")
    if isinstance(comm_id, str) and len(comm_id) <= messages.MAX_ID_CHARS:
        channel.cell(parent).iopub("comm_close", {"comm_id": comm_id, "data": {}})


async def ignored(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    """Messages that ask for no answer (an input_reply: cells cannot read stdin here)."""


async def interrupt(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    await channel.front.interrupt(channel.kernel)
    await channel.around(name, parent, {"status": "ok"})


async def shutdown(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    restart = content.get("restart") is True
    try:
        if restart:
            await channel.front.restart(channel.kernel)
        else:
            await channel.front.end(channel.kernel)
        answer: dict[str, Any] = {"status": "ok", "restart": restart}
    except FrontError as exc:
        answer = messages.error_content("ShutdownFailed", exc.message)
    await channel.around(name, parent, answer)


async def unknown(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    msg_type = parent["msg_type"]
    error = messages.error_content(
        "UnsupportedMessage", f"wasmrun's kernel does not serve {msg_type[:80]!r} messages (docs/jupyter.md)"
    )
    await channel.around(name, parent, error)


async def execute(channel: Channel, name: str, parent: dict[str, Any], content: dict[str, Any]) -> None:
    kernel, cell = channel.kernel, channel.cell(parent)
    code = content.get("code")
    refusal = None
    if not isinstance(code, str) or "\x00" in code:
        refusal = messages.error_content("BadMessage", "content.code must be text without NUL characters")
    elif len(kernel.cells) > MAX_QUEUED_CELLS:
        refusal = messages.error_content("QueueFull", (
            f"this kernel already has a cell running and {MAX_QUEUED_CELLS} waiting, its most:"
            " wait for one to end before sending another"
        ))
    if refusal is not None or kernel.ended:
        refusal = refusal or messages.error_content("KernelEnded", "the kernel has ended: start a new one")
        cell.iopub("status", {"execution_state": "busy"})
        cell.iopub("error", refusal)
        cell.reply(name, "execute_reply", {**refusal, "execution_count": kernel.execution_count})
        cell.iopub("status", {"execution_state": "idle"})
        return
    assert isinstance(code, str)
    kernel.tickets += 1
    work = asyncio.get_running_loop().create_task(run_cell(cell, name, code, content, kernel.tickets))
    kernel.cells.add(work)
    work.add_done_callback(kernel.cells.discard)


async def run_cell(cell: CellRun, name: str, code: str, content: dict[str, Any], ticket: int) -> None:
    """The cell after those queued before it: busy, its input, its output as it comes,
    its results or error, the reply, idle. A cell that errors with `stop_on_error` (the
    default; not when silent) aborts the cells queued behind it: each answers busy, an
    execute_reply with status "aborted", idle, and does not run (ipykernel's answer)."""
    kernel = cell.kernel
    async with kernel.lock:
        if ticket <= kernel.abort_through:
            cell.iopub("status", {"execution_state": "busy"})
            cell.reply(name, "execute_reply", {"status": "aborted"})
            cell.iopub("status", {"execution_state": "idle"})
            return
        silent = content.get("silent") is True
        if not silent and content.get("store_history", True) is not False:
            kernel.execution_count += 1
            kernel.history.append((0, kernel.execution_count, code[:64 * 1024]))
        count = kernel.execution_count
        cell.iopub("status", {"execution_state": "busy"})
        if not silent:
            cell.iopub("execute_input", {"code": code, "execution_count": count})
        error: dict[str, Any] | None
        if kernel.ended:
            error = messages.error_content("KernelEnded", "the kernel ended before this cell ran: it was dropped")
        elif not code.strip():
            error = None
        else:
            error = await cell.run(code, count)
        if error is not None:
            if not silent and content.get("stop_on_error", True) is not False:
                kernel.abort_through = kernel.tickets  # those queued now; a later request runs
            cell.iopub("error", error)
            cell.reply(name, "execute_reply", {**error, "execution_count": count})
        else:
            cell.reply(name, "execute_reply", {
                "status": "ok", "execution_count": count, "user_expressions": {}, "payload": [],
            })
        cell.iopub("status", {"execution_state": "idle"})


HANDLERS: dict[str, Handler] = {
    "kernel_info_request": kernel_info,
    "execute_request": execute,
    "complete_request": complete,
    "inspect_request": inspect,
    "is_complete_request": is_complete,
    "history_request": history,
    "comm_info_request": comm_info,
    "comm_open": comm_open,
    "comm_msg": ignored,
    "comm_close": ignored,
    "input_reply": ignored,
    "interrupt_request": interrupt,
    "shutdown_request": shutdown,
}


async def _send(websocket: WebSocket, connection: Connection) -> None:
    while (frame := await connection.queue.get()) is not None:
        await websocket.send_text(frame.decode())
        connection.sent(frame)
    with contextlib.suppress(Exception):  # let go: not reading, or gone
        await websocket.close(code=1008)


async def serve(front: JupyterFront, kernel: Kernel, websocket: WebSocket) -> None:
    """The socket's life: frames answered as they come (a client that sends MAX_BAD_FRAMES
    in a row that are not messages is let go), what it is sent written as it reads. Past
    the kernel's MAX_CONNECTIONS the socket is closed at once (TRY_AGAIN_LATER, the reason)."""
    if len(kernel.connections) >= MAX_CONNECTIONS:
        await websocket.accept()
        await websocket.close(code=TRY_AGAIN_LATER, reason=(
            f"this kernel has {len(kernel.connections)} connections open, its most ({MAX_CONNECTIONS}): close one"
        ))
        return
    connection = Connection()
    key = session_key(websocket.query_params.get("session_id"))
    kernel.attach(connection, key)  # counted before the accept's await: the cap holds for concurrent ones
    sender: asyncio.Task[None] | None = None
    bad = 0
    try:
        await websocket.accept()
        channel = Channel(front, kernel, connection)
        sender = asyncio.get_running_loop().create_task(_send(websocket, connection))
        while not connection.closed:
            received = await websocket.receive()
            if received["type"] == "websocket.disconnect":
                break
            ok = await channel.handle(received.get("text") if received.get("text") is not None else None)
            bad = 0 if ok else bad + 1
            if bad >= MAX_BAD_FRAMES:
                break
    except (WebSocketDisconnect, RuntimeError):  # gone mid-frame, or closed under us
        pass
    finally:
        kernel.detach(connection, key)
        connection.close()
        if sender is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sender, 5)
