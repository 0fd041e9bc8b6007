"""An execute_request's cell, run in its kernel's session as IPython would run it.

The cell is split per line, as IPython's transforms see it: a `!cmd` line at the start
of a line is a command (run_command: the guest's shell, in the same session, its files
and cwd shared), and so are the install lines agents write (`!pip install x`, `%pip install
-q x`, `!{sys.executable} -m pip install x`, `%uv pip install x`): the shell's `pip install`
installs on demand (docs/packages.md), importable in the cell's next lines and later cells;
`%matplotlib ...` is nothing (charts are displays already), any other magic a clear error;
the Python lines between them run as session runs, each padded to its line number so
tracebacks name the cell's lines. Only the last step's last expression is the cell's
`execute_result`, as IPython shows only the cell's last. The E2B and Azure doors split
their cells here too. Output is streamed as it is written (run_code's stream listener);
displays come from each run's display results, their large forms read back from blobs
within the tenant's room (the E2B door's Expansion)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wasmrun.e2b.calls import Front, FrontError
from wasmrun.e2b.results import Expansion, Lines, image_blobs
from wasmrun.jupyter import messages
from wasmrun.jupyter.kernels import Connection, Kernel
from wasmrun.protocol.streaming import RUN_OUTPUT
from wasmrun.sandbox import OutputChunk

# An install line, `!` or `%` (IPython's %pip magic): run as the shell's command.
PIP_LINE = re.compile(
    r"^\s*[!%]{1,2}\s*((?:pip3?|python3?\s+-m\s+pip|\{sys\.executable\}\s+-m\s+pip|uv\s+pip|conda|mamba)"
    r"\s+install\b.*)$"
)
COMMAND_LINE = re.compile(r"^!(?!=)(.*)$")  # at the start of the line only
# IPython expands `{expr}` in a `!` line; the one agents write is the interpreter's path.
EXECUTABLE = "{sys.executable}"
INDENTED_COMMAND = re.compile(r"^\s+!(?!=)")
NOTHING_MAGIC = re.compile(r"^\s*%matplotlib\b")
MAGIC = re.compile(r"^\s*%")
KERNEL_GONE = (
    "the kernel's session is gone (unused past the server's session idle timeout, WASMRUN_SESSION_MAX_IDLE_S,"
    " or closed): start a new kernel"
)


class CellRefused(Exception):
    """A line this kernel does not run: its message, as the cell's error."""


@dataclass
class Step:
    kind: str  # "python" or "command"
    text: str
    line: int  # the cell's line it starts on, from 1


def split(code: str) -> list[Step]:
    """The cell's steps in order (blank ones dropped)."""
    steps: list[Step] = []
    python: list[str] = []
    start = 1

    def flush(next_line: int) -> None:
        nonlocal python, start
        if any(text.strip() for text in python):
            steps.append(Step("python", "\n".join(python), start))
        python, start = [], next_line

    for number, text in enumerate(code.split("\n"), start=1):
        if (pip := PIP_LINE.match(text)) is not None:
            flush(number + 1)
            steps.append(Step("command", pip.group(1).strip().replace(EXECUTABLE, "python"), number))
        elif (found := COMMAND_LINE.match(text)) is not None:
            flush(number + 1)
            steps.append(Step("command", found.group(1).strip().replace(EXECUTABLE, "python"), number))
        elif INDENTED_COMMAND.match(text):
            raise CellRefused(f"line {number}: a `!` command runs only at the start of a line, not inside a block")
        elif NOTHING_MAGIC.match(text):
            python.append("")
        elif MAGIC.match(text):
            raise CellRefused(
                f"line {number}: IPython magics do not run in a wasmrun kernel (only `!cmd` lines, `%matplotlib` and"
                f" `%pip install`): write the step in Python. {text.strip()[:200]}"
            )
        else:
            python.append(text)
    flush(0)
    return steps


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
