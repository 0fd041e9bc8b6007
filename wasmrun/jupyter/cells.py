"""An execute_request's cell, run in its kernel's session as IPython would run it.

The cell is split per line by the doors' splitter (wasmrun/doors/cells.py, the E2B and
Azure doors' too): a `!cmd` line, and the install lines agents write, are commands
(run_command: the guest's shell, in the same session, its files and cwd shared; the shell's
`pip install` installs on demand, docs/packages.md, importable in the cell's next lines and
later cells); the Python lines between them run as session runs, each padded to its line
number so tracebacks name the cell's lines. Only the last step's last expression is the
cell's `execute_result`, as IPython shows only the cell's last. Output is streamed as it is
written (run_code's stream listener); displays come from each run's display results, their
large forms read back from blobs within the tenant's room (the E2B door's Expansion)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wasmrun.doors.cells import CellRefused, Step, split
from wasmrun.e2b.calls import Front, FrontError
from wasmrun.e2b.results import Expansion, Lines, image_blobs
from wasmrun.jupyter import messages
from wasmrun.jupyter.kernels import Connection, Kernel
from wasmrun.protocol.streaming import RUN_OUTPUT
from wasmrun.sandbox import OutputChunk

KERNEL_GONE = (
    "the kernel's session is gone (unused past the server's session idle timeout, WASMRUN_SESSION_MAX_IDLE_S,"
    " or closed): start a new kernel"
)


class CellRun:
    """One cell of a kernel: its messages, to the kernel's connections (iopub) and to the
    connection that asked (shell), all parented to the request's header."""

    def __init__(self, front: Front, kernel: Kernel, origin: Connection, parent: dict[str, Any]) -> None:
        self.front, self.kernel, self.origin, self.parent = front, kernel, origin, parent
        self.lines = Lines()
        self.session = parent.get("session", kernel.kernel_id)

    def iopub(self, msg_type: str, content: Mapping[str, Any]) -> None:
        self.kernel.broadcast(messages.message("iopub", msg_type, self.parent, content, self.session))

    def reply(self, channel: str, msg_type: str, content: Mapping[str, Any]) -> None:
        """To the connection that asked; to the kernel's others when it has gone (a reconnect)."""
        frame = messages.message(channel, msg_type, self.parent, content, self.session)
        if not self.origin.closed:
            self.origin.put(frame)
        else:
            self.kernel.broadcast(frame)

    def on_output(self, chunks: list[OutputChunk]) -> None:
        for chunk in chunks:
            if isinstance(chunk, OutputChunk) and chunk.stream in ("stdout", "stderr", "log"):
                for event in self.lines.feed(chunk.stream, chunk.text):
                    self.iopub("stream", {"name": event["type"], "text": event["text"]})

    def flush(self) -> None:
        for event in self.lines.flush():
            self.iopub("stream", {"name": event["type"], "text": event["text"]})

    async def run(self, code: str, count: int) -> dict[str, Any] | None:
        """Runs the cell's steps in order until one fails: its error content, or None."""
        RUN_OUTPUT.set(self.on_output)
        try:
            steps = split(code)
        except CellRefused as exc:
            return messages.error_content("SyntaxError", str(exc))
        try:
            for index, step in enumerate(steps):
                error = await self.step(step, count, last=index == len(steps) - 1)
                if error is not None:
                    return error
        except FrontError as exc:
            return messages.error_content("SandboxError", exc.message)
        finally:
            self.flush()
        return None

    async def step(self, step: Step, count: int, last: bool) -> dict[str, Any] | None:
        if step.kind == "command":
            result = await self.call("run_command", {"command": step.text})
        else:
            result = await self.call("run_code", {"language": "python", "code": "\n" * (step.line - 1) + step.text})
        self.flush()  # a step's output before its displays, as the cell wrote them
        await self.displays(result, count, last)
        error = result.get("error")
        if result.get("status") == "failed" and isinstance(error, Mapping):
            return messages.run_error(error)
        return None

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.front.call(
                self.kernel.caller, method, {**params, "session_id": self.kernel.session_id, "stream": True}
            )
        except FrontError as exc:
            if exc.status == 404:
                self.kernel.ended = True
                raise FrontError(502, KERNEL_GONE) from None
            raise

    async def displays(self, result: dict[str, Any], count: int, last: bool) -> None:
        """The run's displays as display_data, its main one (the last expression) as the
        execute_result when this step ends the cell; within the tenant's room."""
        tenant = self.kernel.caller.tenant
        room = self.front.take_room(tenant, self.front.dispatcher.context.limits.defaults.result_bytes)
        try:
            blobs = await self.read_blobs(result, room)
            expansion = Expansion(blobs.get, room)
            for display in result.get("displays") or []:
                if not isinstance(display, Mapping) or (display.get("main") is True and not last):
                    continue
                data = messages.bundle(display, expansion)
                if not data:
                    continue
                if display.get("main") is True:
                    self.iopub("execute_result", {"execution_count": count, "data": data, "metadata": {}})
                else:
                    self.iopub("display_data", {"data": data, "metadata": {}, "transient": {}})
            if (note := expansion.note()) is not None:
                self.iopub("stream", {"name": "stderr", "text": note["text"]})
        finally:
            self.front.give_room(tenant, room)

    async def read_blobs(self, result: dict[str, Any], budget: int) -> dict[str, bytes]:
        read: dict[str, bytes] = {}
        held = 0
        for blob_id in image_blobs(result):
            if held >= budget:
                break
            try:
                read[blob_id] = content = await self.front.read_blob(self.kernel.caller, blob_id)
            except FrontError:  # deleted since, or past the full-read limit: its forms are left out
                continue
            held += len(content)
        return read
