"""The kernels this server holds: each a wasmrun session of one tenant, its cells run one
at a time (a bounded queue of those waiting), the WebSocket connections attached to it.
A kernel outlives its connections (a client that goes, or whose socket dies half-open,
finds the kernel and its state again on reconnecting); it ends when deleted, shut down,
or when its session ends (closed over /rpc, or unused past the session idle timeout)."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from wasmrun.tenants.caller import Caller

# Cells waiting while one runs, per kernel: past it an execute_request is answered with an
# error at once (each holds its code until it runs).
MAX_QUEUED_CELLS = 8
# What one connection may have waiting to be sent (a client that does not read): past it
# the connection is closed (the kernel stays; a reconnect finds it).
MAX_PENDING_BYTES = 64 * 1024 * 1024
# WebSocket connections open on one kernel at once (a notebook UI, an executor, a reconnect
# racing the old socket's end): past it a new one is accepted and closed at once with
# TRY_AGAIN_LATER and a reason naming the cap (each open one holds a concurrent_requests place).
MAX_CONNECTIONS = 8
TRY_AGAIN_LATER = 1013  # the WebSocket close code (RFC 6455's registry): try again later
MAX_HISTORY = 100  # the cells a history_request may see, newest last
# Messages kept for a client session that lost its last socket (jupyter_server's buffering):
# replayed when a socket of the same session (`?session_id=`) connects again, dropped when
# another connects. Past these bounds the oldest go first.
MAX_REPLAY_BYTES = 8 * 1024 * 1024
MAX_REPLAY_FRAMES = 10_000
MAX_SESSION_KEY_CHARS = 128
KERNEL_ID_CHARS = 36  # a UUID, as Jupyter's


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Connection:
    """One WebSocket to a kernel: what waits to be sent to it, as frames' bytes, bounded."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.pending = 0
        self.closed = False

    def put(self, frame: bytes) -> None:
        if self.closed:
            return
        if self.pending + len(frame) > MAX_PENDING_BYTES:
            self.close()  # its client does not read: it is let go, the kernel is not
            return
        self.pending += len(frame)
        self.queue.put_nowait(frame)

    def sent(self, frame: bytes) -> None:
        self.pending -= len(frame)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


class Replay:
    """What the kernel sent while none of its sockets was open, for the client session that
    had the last one (its `session_id`): the oldest dropped past the bounds."""

    def __init__(self, session_key: str) -> None:
        self.session_key = session_key
        self.frames: deque[bytes] = deque()
        self.bytes = 0
        self.dropped = 0

    def keep(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.bytes += len(frame)
        while self.frames and (self.bytes > MAX_REPLAY_BYTES or len(self.frames) > MAX_REPLAY_FRAMES):
            self.bytes -= len(self.frames.popleft())
            self.dropped += 1


def session_key(value: str | None) -> str | None:
    """A socket's client session (jupyter_server's `?session_id=`), if it is a usable one."""
    if value is None or not 0 < len(value) <= MAX_SESSION_KEY_CHARS or not value.isprintable():
        return None
    return value


@dataclass
class Kernel:
    kernel_id: str
    caller: Caller
    session_id: str
    started_at: float
    last_activity: float
    execution_count: int = 0
    ended: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    cells: set[asyncio.Task[None]] = field(default_factory=set, repr=False)
    connections: set[Connection] = field(default_factory=set, repr=False)
    history: deque[tuple[int, int, str]] = field(default_factory=lambda: deque(maxlen=MAX_HISTORY), repr=False)
    running_since: float | None = None
    # Each execute_request queued gets the next ticket; a cell that errors with stop_on_error
    # aborts those queued before it ended (tickets up to abort_through), as ipykernel does.
    tickets: int = 0
    abort_through: int = 0
    replay: Replay | None = field(default=None, repr=False)  # while no socket is open (see Replay)

    def model(self) -> dict[str, Any]:
        """The kernel as /api/kernels answers it."""
        return {
            "id": self.kernel_id, "name": "python3", "last_activity": iso(self.last_activity),
            "execution_state": "busy" if self.cells else "idle", "connections": len(self.connections),
        }

    def broadcast(self, frame: bytes) -> None:
        """An iopub message: to every connection of the kernel; with none open, kept for the
        client session that had the last one."""
        if not self.connections and self.replay is not None:
            self.replay.keep(frame)
        for connection in list(self.connections):
            connection.put(frame)

    def attach(self, connection: Connection, key: str | None) -> None:
        """A new socket: what was kept for its client session is sent to it first; what was
        kept for another is dropped (as jupyter_server does)."""
        replay, self.replay = self.replay, None
        self.connections.add(connection)
        if replay is not None and key is not None and replay.session_key == key:
            for frame in replay.frames:
                connection.put(frame)

    def detach(self, connection: Connection, key: str | None) -> None:
        """A socket gone: the last one of a client session starts keeping what is sent."""
        self.connections.discard(connection)
        if not self.connections and key is not None and not self.ended:
            self.replay = Replay(key)


class KernelTable:
    def __init__(self) -> None:
        self._kernels: dict[str, Kernel] = {}

    def add(self, kernel: Kernel) -> None:
        self._kernels[kernel.kernel_id] = kernel

    def find(self, kernel_id: str, tenant: str) -> Kernel | None:
        """The tenant's kernel of that id; another tenant's is not found, as a missing one."""
        kernel = self._kernels.get(kernel_id) if len(kernel_id) == KERNEL_ID_CHARS else None
        return kernel if kernel is not None and kernel.caller.tenant == tenant else None

    def remove(self, kernel_id: str) -> Kernel | None:
        return self._kernels.pop(kernel_id, None)

    def owned(self, tenant: str) -> list[Kernel]:
        return sorted((k for k in self._kernels.values() if k.caller.tenant == tenant), key=lambda k: k.started_at)


def new_kernel_id() -> str:
    return str(uuid.uuid4())
