"""The host side of the guest's `wasmrun` imports, and the per-run state they use.

Host functions are defined once per engine (store-independent, so that an
`InstancePre` can be reused); each call finds its run through `current()`,
set by the engine around the call into the guest. A worker runs one guest
at a time per thread.

Nothing the guest passes is trusted: every pointer/length is checked
against linear memory and a bad one stops the run (`InvalidHostCall`),
never the host.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import msgspec
import wasmtime

from wasmrun.abi import (
    DISPLAY_LEVEL,
    EINVAL,
    ENOENT,
    MAX_BLOB_ID,
    MAX_DISPLAY_BYTES,
    MAX_HTTP_META,
    MAX_PACKAGES_REQUEST,
    U32,
)
from wasmrun.blobs.kinds import MAX_KIND, is_valid_kind
from wasmrun.blobs.quota import BlobQuota, BlobQuotaExceeded
from wasmrun.egress.client import EgressSession, RunDeadline
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.blobaccess import BlobAccess
from wasmrun.sandbox.contract.limits import Limits
from wasmrun.sandbox.contract.tools import TOOL_CALL_LIMIT
from wasmrun.sandbox.guest.capture import HeadTail, log_line
from wasmrun.sandbox.guest.displays import Displays
from wasmrun.sandbox.guest.guestmemory import context_reader, guest_memory, read_guest, span, write_guest
from wasmrun.sandbox.guest.outstream import OutputStream, Stream
from wasmrun.sandbox.guest.toolwait import ToolSession
from wasmrun.sandbox.guest.wasmtime_internals import FastFunc

if TYPE_CHECKING:
    from wasmrun.sandbox.files.workspace import Workspace
    from wasmrun.sandbox.guest.packagecall import PackageCall


_local = threading.local()


class RunContext:
    """Everything one run's host calls may touch."""

    def __init__(
        self,
        run_id: str,
        request_bytes: bytes,
        limits: Limits,
        blobs: BlobAccess,
        input_blobs: list[str],
        workspace: Workspace,
        buffers: GuestBuffers | None = None,
        egress: EgressSession | None = None,
        owner: str = "local",
        blob_quota: BlobQuota | None = None,
        stream: OutputStream | None = None,
    ) -> None:
        self.run_id = run_id
        self.stream = stream  # the caller asked for the output as it is written
        self.owner = owner  # the tenant whose blobs this run reads and writes
        self.blob_quota = blob_quota
        self.request_bytes = request_bytes
        self.limits = limits
        self.blobs = blobs
        self.readable = set(input_blobs)
        self.output_blobs: list[str] = []
        self.logs = HeadTail(limits.output_bytes)
        self.response: bytes | None = None
        self.blob_io = 0
        self.deadline = 0.0  # time.monotonic() when the run must stop
        self.workspace = workspace
        self.buffers = buffers
        self.wasi_funcs: dict[str, FastFunc] = {}  # the real WASI calls: its store's (instances.Fresh)
        # Preopen fds whose folders cannot hold a FIFO or device (see Image.preopens).
        self.plain_fds: set[int] = set()
        # fd -> how far past its file's end the guest last seeked it: the next write
        # there makes the file that much longer (a hole, counted at its size).
        self.seek_gaps: dict[int, int] = {}
        self.egress = egress or EgressSession(None)
        self.http_reply: bytes | None = None  # the last request's reply, until the guest reads it
        self.displays = Displays()
        self.packages: PackageCall | None = None  # its installs from inside (packagecall.py); None: none
        self.packages_reply: bytes | None = None  # the last install's reply, until the guest reads it
        self.tools: ToolSession | None = None  # code mode: the client's tools it declared (toolwait.py)
        self.tool_reply: bytes | None = None  # the last batch's answers, until the guest reads them

    def charge_blob_io(self, n: int) -> None:
        self.blob_io += n
        if self.blob_io > self.limits.blob_io_bytes:
            raise errors.RunAborted(
                errors.BLOB_BUDGET,
                f"the run moved more than {self.limits.blob_io_bytes} bytes through blob calls",
            )

    def write_output(self, data: bytes, stream: Stream = "log") -> None:
        self.logs.write(data)
        if self.stream is not None:
            self.stream.write(stream, data)

    def show(self, frame: bytes) -> None:
        """A display result the guest showed (checked; streamed when the run streams)."""
        display = self.displays.add(frame, self.output_blobs)
        if display is not None and self.stream is not None:
            self.stream.display(display)

    def flush_stream(self, caller: wasmtime.Caller) -> None:
        """Before the guest waits in host code (a sleep, a network call): send
        what it wrote so far, its output buffer included."""
        if self.stream is not None:
            self.drain_guest_output(caller, guest_memory(caller))
            self.stream.flush()

    def peek_guest_output(self, read: Callable[[int, int], bytes | None]) -> None:
        """While the guest runs (at an epoch check, see watchdog.py): stream what
        its output buffer gained since the last look, without emptying it (the
        guest may be midway through appending to it). `read(address, n)` reads
        guest memory, None when out of bounds."""
        b, stream = self.buffers, self.stream
        if b is None or stream is None or not stream.open:
            return
        raw = read(b.out_len, 4)
        if raw is None:
            return
        (length,) = struct.unpack("<i", raw)
        length = max(0, min(length, b.out_capacity))
        if length > stream.guest_seen:
            data = read(b.out_buffer + stream.guest_seen, min(length - stream.guest_seen, stream.left + 1))
            if data is not None:
                stream.write("stdout", data)
                stream.guest_seen = length
        stream.flush()

    def drain_guest_output(self, store: wasmtime.Store | wasmtime.Caller, memory: wasmtime.Memory) -> None:
        """Move what the guest's output buffer holds into the logs and empty it.
        Done before any direct write to fd 1/2 and after the run (even after a
        trap), so output stays in order. The guest could have scribbled over
        the fill counter: it is clamped."""
        b = self.buffers
        if b is None:
            return
        (length,) = struct.unpack("<i", memory.read(store, b.out_len, b.out_len + 4))
        length = max(0, min(length, b.out_capacity))
        if length:
            data = bytes(memory.read(store, b.out_buffer, b.out_buffer + length))
            self.logs.write(data)
            memory.write(store, b"\0\0\0\0", b.out_len)
            if self.stream is not None:
                self.stream.write("stdout", data[self.stream.guest_seen :])
                self.stream.guest_seen = 0


def output_poll(ctx: RunContext, memory: wasmtime.Memory) -> Callable[[object], None]:
    """The watchdog's `on_tick` for a streamed run: reads the guest's memory
    through the context wasmtime hands the epoch callback (the run is stopped
    at a safe point on this thread), bounds-checked."""
    reader = context_reader(memory)

    def poll(context: object) -> None:
        ctx.peek_guest_output(reader(context))

    return poll


class GuestBuffers(NamedTuple):
    """Addresses of the guest's static buffers (python_wasm/bridge.c)."""

    io_buffer: int
    io_capacity: int
    out_buffer: int
    out_len: int  # the address of the int32 holding the output buffer's fill
    out_capacity: int


def current() -> RunContext:
    ctx: RunContext | None = getattr(_local, "ctx", None)
    if ctx is None:  # a guest calling in outside a run: cannot happen through the engine
        raise errors.RunAborted(errors.HOST_CALL_ERROR, "host call outside a run")
    return ctx


def set_current(ctx: RunContext | None) -> None:
    _local.ctx = ctx


def _text(caller: wasmtime.Caller, ptr: int, length: int, limit: int) -> str | None:
    if length & U32 > limit:
        return None
    try:
        return read_guest(caller, ptr, length).decode("utf-8")
    except UnicodeDecodeError:
        return None


# --- the `wasmrun` import module --------------------------------------------

def request_len(caller: wasmtime.Caller) -> int:
    return len(current().request_bytes)


def request_read(caller: wasmtime.Caller, ptr: int, cap: int) -> int:
    data = current().request_bytes
    write_guest(caller, ptr, cap, data)
    return len(data)


def respond(caller: wasmtime.Caller, ptr: int, length: int) -> None:
    ctx = current()
    if length & U32 > ctx.limits.result_bytes:
        raise errors.RunAborted(errors.INVALID_OUTPUT, errors.result_too_large(ctx.limits.result_bytes))
    ctx.response = read_guest(caller, ptr, length)


def blob_size(caller: wasmtime.Caller, id_ptr: int, id_len: int) -> int:
    ctx = current()
    blob_id = _text(caller, id_ptr, id_len, MAX_BLOB_ID)
    if blob_id is None or blob_id not in ctx.readable:
        return ENOENT
    size = ctx.blobs.size(blob_id, ctx.owner)
    return ENOENT if size is None else size


def blob_read(
    caller: wasmtime.Caller, id_ptr: int, id_len: int, offset: int, buf: int, cap: int
) -> int:
    ctx = current()
    blob_id = _text(caller, id_ptr, id_len, MAX_BLOB_ID)
    if blob_id is None or blob_id not in ctx.readable:
        return ENOENT
    if offset < 0:
        return EINVAL
    span(caller, buf, cap)  # check before doing any I/O
    # Any offset up to 2**63-1 is fine: the store answers b"" at or past the end.
    ctx.charge_blob_io(cap & U32)
    try:
        data = ctx.blobs.read(blob_id, offset, cap & U32, ctx.owner)
    except KeyError:  # deleted while the run had it: gone for the run too, not a crash
        return ENOENT
    write_guest(caller, buf, cap, data)
    return len(data)


def blob_write(
    caller: wasmtime.Caller,
    ptr: int,
    length: int,
    kind_ptr: int,
    kind_len: int,
    out_ptr: int,
    out_cap: int,
) -> int:
    ctx = current()
    kind = _text(caller, kind_ptr, kind_len, MAX_KIND)
    if kind is None or not is_valid_kind(kind):  # create_blob's rule, before any copying
        return EINVAL
    span(caller, out_ptr, out_cap)
    ctx.charge_blob_io(length & U32)
    quota = ctx.blob_quota
    if quota is not None and len(ctx.output_blobs) >= quota.max_per_run:
        raise errors.RunAborted(
            errors.BLOB_QUOTA, f"the run wrote {len(ctx.output_blobs)} blobs, its limit (blobs_per_run)"
        )
    data = read_guest(caller, ptr, length)
    try:
        blob_id = ctx.blobs.create(data, kind, run_id=ctx.run_id, owner=ctx.owner, quota=quota)
    except BlobQuotaExceeded as exc:
        raise errors.RunAborted(errors.BLOB_QUOTA, exc.message) from None
    except ValueError:  # the store refusing the kind too
        return EINVAL
    if blob_id not in ctx.output_blobs:  # the same bytes again are the same blob
        ctx.output_blobs.append(blob_id)
    ctx.readable.add(blob_id)
    encoded = blob_id.encode()
    write_guest(caller, out_ptr, out_cap, encoded)
    return len(encoded)


def log(caller: wasmtime.Caller, level: int, ptr: int, length: int) -> None:
    ctx = current()
    if level == DISPLAY_LEVEL:  # a display result, not a log line (abi.DISPLAY_LEVEL)
        ctx.show(read_guest(caller, ptr, min(length & U32, MAX_DISPLAY_BYTES + 1)))
        return
    # Read at most what the capture could keep; a huge message is cut, not copied.
    keep = min(length & U32, ctx.limits.output_bytes)
    message = read_guest(caller, ptr, keep).decode("utf-8", "replace")
    ctx.write_output(log_line(level, message), "log")


def http_request(caller: wasmtime.Caller, meta_ptr: int, meta_len: int, body_ptr: int, body_len: int) -> int:
    """Make the guest's HTTP(S) request (wasmrun/egress/client.py checks and
    bounds it); the reply waits in the run's context for `http_reply_read`."""
    ctx = current()
    ctx.http_reply = None
    ctx.flush_stream(caller)
    grant = ctx.egress.grant
    limit = grant.max_request_bytes if grant is not None else 0
    meta = read_guest(caller, meta_ptr, min(meta_len & U32, MAX_HTTP_META))
    body = read_guest(caller, body_ptr, min(body_len & U32, limit + 1))
    try:
        reply = ctx.egress.handle(meta, body, ctx.deadline)
    except RunDeadline:
        raise errors.RunAborted(errors.TIMEOUT, errors.timed_out(ctx.limits.timeout_ms)) from None
    ctx.http_reply = reply
    return len(reply)


def http_reply_read(caller: wasmtime.Caller, ptr: int, cap: int) -> int:
    ctx = current()
    reply = ctx.http_reply
    if reply is None:
        return ENOENT
    write_guest(caller, ptr, cap, reply)
    ctx.http_reply = None
    return len(reply)


def tool_calls(ctx: RunContext, raw_length: int, read: Callable[[int], bytes]) -> bytes:
    """The answers to the batch of tool calls the guest sends (`read(n)` reads its first n
    bytes), checked against the run's tools and limits (toolwait.py)."""
    if ctx.tools is None:
        raise errors.RunAborted(errors.HOST_CALL_ERROR, "the run declared no tools: runtime.tools has nothing to call")
    if raw_length > ctx.tools.limits.max_argument_bytes:
        raise errors.RunAborted(
            TOOL_CALL_LIMIT,
            f"the tool calls' arguments were {raw_length} bytes of JSON, over max_tool_argument_bytes"
            f" ({ctx.tools.limits.max_argument_bytes})",
        )
    return ctx.tools.handle(read(raw_length))


def tool_call(caller: wasmtime.Caller, ptr: int, length: int) -> int:
    ctx = current()
    ctx.tool_reply = None
    ctx.flush_stream(caller)
    reply = tool_calls(ctx, length & U32, lambda n: read_guest(caller, ptr, n))
    ctx.tool_reply = reply
    return len(reply)


def tool_reply_read(caller: wasmtime.Caller, ptr: int, cap: int) -> int:
    ctx = current()
    reply = ctx.tool_reply
    if reply is None:
        return ENOENT
    write_guest(caller, ptr, cap, reply)
    ctx.tool_reply = None
    return len(reply)


def install_packages(ctx: RunContext, request: bytes) -> bytes:
    """Both guests' `packages_install` (packagecall.py): the reply's JSON."""
    if ctx.packages is None:
        from wasmrun.abi import PackagesInstallReply

        return msgspec.json.encode(PackagesInstallReply(ok=False, error="no packages may be installed here", rule="off"))
    return ctx.packages.install(request, ctx.deadline, ctx.workspace.charge)


def packages_install(caller: wasmtime.Caller, ptr: int, length: int) -> int:
    ctx = current()
    ctx.packages_reply = None
    ctx.flush_stream(caller)
    request = read_guest(caller, ptr, min(length & U32, MAX_PACKAGES_REQUEST + 1))
    ctx.packages_reply = install_packages(ctx, request)
    return len(ctx.packages_reply)


def packages_reply_read(caller: wasmtime.Caller, ptr: int, cap: int) -> int:
    ctx = current()
    reply = ctx.packages_reply
    if reply is None:
        return ENOENT
    write_guest(caller, ptr, cap, reply)
    ctx.packages_reply = None
    return len(reply)


HOST_FUNCTIONS: dict[str, Callable[..., object]] = {
    "request_len": request_len,
    "request_read": request_read,
    "respond": respond,
    "blob_size": blob_size,
    "blob_read": blob_read,
    "blob_write": blob_write,
    "log": log,
    "http_request": http_request,
    "http_reply_read": http_reply_read,
    "tool_call": tool_call,
    "tool_reply_read": tool_reply_read,
    "packages_install": packages_install,
    "packages_reply_read": packages_reply_read,
}
