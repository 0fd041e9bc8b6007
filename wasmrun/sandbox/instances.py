"""Fresh instances, made ahead of demand, and torn down after use, off the latency path.

Every run gets its own never-used instance of the snapshot. What makes a
short run slow is not wasm but memory: the run's first write to each page
of the copy-on-write snapshot image costs a page fault and a copy (a few
hundred pages, about two thirds of a hello-world run here). So a
housekeeping thread keeps a spare instance ready, its commonly written
pages already copied in (`MADV_POPULATE_WRITE`), and tears used instances
down (dropping a Store unmaps its memory; the workspace is emptied).

Measured here: housekeeping beside a running instance (preparing a spare,
and even more so unmapping a used one) slows the run by more than it saves.
So housekeeping waits for a quiet moment with no run in flight (runs often
come in bursts; the copying-in of a spare stops as soon as a run starts),
and several spares are kept so a burst finds them ready. Under sustained
back-to-back load runs make their instance on the spot, and used ones are
torn down anyway once too many pile up.

A spare holds no run state: per-run WASI (preopens), epoch deadline and
memory limit are set on it when a run takes it, and it serves that run only.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import wasmtime

from wasmrun.sandbox.wasi_guard import Workspace, WorkspaceDirs

logger = logging.getLogger("wasmrun.sandbox")

PAGE = 4096
MADV_POPULATE_WRITE = 23  # Linux 5.14+
SPARES = 8  # enough for a burst; each holds about a megabyte of prefaulted pages
MAX_RETIRED = 16  # past this, teardown goes on even while runs are in flight
HARD_MAX_RETIRED = 32  # past this, the run that retires an instance tears one down itself
QUIET_S = 0.002  # how long without runs before housekeeping starts


@dataclass
class Fresh:
    store: wasmtime.Store
    run: wasmtime.Func
    memory: wasmtime.Memory
    prepared_ahead: bool = False


class HotPages:
    """The pages of linear memory a typical run writes, to be copied in ahead.

    Learned from a sample run by reading /proc/self/pagemap: pages of the
    memory mapping that are present and anonymous were copied on write.
    Where that is unavailable (not Linux, old kernel), nothing is prefaulted.
    """

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans  # (offset, length) in bytes, page-aligned
        self._madvise = _madvise() if spans else None

    @staticmethod
    def written_pages(store: wasmtime.Store, memory: wasmtime.Memory) -> set[int]:
        """Indexes of the pages of `memory` this instance has written so far."""
        if not sys.platform.startswith("linux"):
            return set()
        base = ctypes.addressof(memory.data_ptr(store).contents)
        size = memory.data_len(store)
        try:
            with open("/proc/self/pagemap", "rb") as f:
                f.seek(base // PAGE * 8)
                raw = f.read(size // PAGE * 8)
        except OSError:
            return set()
        return {
            i
            for i, entry in enumerate(struct.unpack(f"<{len(raw) // 8}Q", raw))
            if entry >> 63 & 1 and not entry >> 61 & 1  # present, and anonymous: copied on write
        }

    @classmethod
    def from_pages(cls, pages: set[int]) -> HotPages:
        spans: list[tuple[int, int]] = []
        for i in sorted(pages):
            if spans and spans[-1][0] + spans[-1][1] == i * PAGE:
                spans[-1] = (spans[-1][0], spans[-1][1] + PAGE)
            else:
                spans.append((i * PAGE, PAGE))
        return cls(spans)

    @property
    def pages(self) -> int:
        return sum(length for _, length in self.spans) // PAGE

    def populate(
        self, store: wasmtime.Store, memory: wasmtime.Memory, interrupted: Callable[[], bool] = lambda: False
    ) -> None:
        if self._madvise is None:
            return
        base = ctypes.addressof(memory.data_ptr(store).contents)
        for offset, length in self.spans:
            if interrupted():  # a run started: leave the rest to its own page faults
                return
            if self._madvise(base + offset, length, MADV_POPULATE_WRITE) != 0:
                self._madvise = None  # unsupported here: stop trying
                return


def _madvise() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


class InstanceSupply:
    """Hands out fresh instances and takes used ones back; a thread does the
    housekeeping in quiet moments."""

    def __init__(self, make: Callable[[], Fresh], dirs: WorkspaceDirs, hot: HotPages | None = None) -> None:
        self._make = make
        self._dirs = dirs
        self.hot = hot or HotPages([])
        self._spares: deque[Fresh] = deque()
        self._retired: deque[tuple[wasmtime.Store, Workspace]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._tearing_down = 0
        self._in_flight = 0
        self._last_retire = 0.0
        self._thread = threading.Thread(target=self._loop, name="wasmrun-instances", daemon=True)
        self._thread.start()

    def take(self) -> Fresh:
        with self._cond:
            self._in_flight += 1
            spare = self._spares.popleft() if self._spares else None
        if spare is not None:
            return spare
        try:
            return self._make()
        except wasmtime.WasmtimeError:
            # Every engine slot taken (more runs at once than it was sized
            # for): free the ones used instances still hold, then try again.
            while self._step(teardown_now=True):
                pass
            return self._make()

    def retire(self, store: wasmtime.Store, workspace: Workspace) -> None:
        with self._cond:
            self._in_flight -= 1
            self._last_retire = time.monotonic()
            self._retired.append((store, workspace))
            self._cond.notify_all()
            # Instances live in a fixed number of engine slots: never let used
            # ones pile up past a bound, even if runs outpace the housekeeper.
            backlog = len(self._retired) > HARD_MAX_RETIRED
        if backlog:
            self._step(teardown_now=True)

    def _quiet_for(self, seconds: float) -> float:
        """Seconds until no run will have been in flight for `seconds` (0: already)."""
        if self._in_flight:
            return seconds
        return max(0.0, self._last_retire + seconds - time.monotonic())

    def _has_work(self) -> bool:
        quiet = self._quiet_for(QUIET_S) == 0.0
        return (
            self._closing
            or (bool(self._retired) and (quiet or len(self._retired) >= MAX_RETIRED))
            or (quiet and len(self._spares) < SPARES)
        )

    def _next_check(self) -> float | None:
        """When the quiet period that would make work begins, if it will."""
        if self._in_flight or not (self._retired or len(self._spares) < SPARES):
            return None
        return max(self._quiet_for(QUIET_S), 1e-4)

    def _prepare(self) -> Fresh:
        fresh = self._make()
        self.hot.populate(fresh.store, fresh.memory, interrupted=lambda: self._in_flight > 0)
        fresh.prepared_ahead = True
        return fresh

    def _step(self, teardown_now: bool = False) -> bool:
        """One unit of housekeeping: tear one instance down, or make one spare.
        Returns False when there is nothing (more) to do or the supply is closing.
        `teardown_now`: tear down a used instance if there is one, quiet or not."""
        with self._cond:
            if teardown_now:
                if not self._retired:
                    return False
            elif not self._has_work() or (self._closing and not self._retired):
                return False
            retired = self._retired.popleft() if self._retired else None
            self._tearing_down += retired is not None
        try:
            if retired is not None:  # teardown first: it frees memory
                store, workspace = retired
                store.close()  # first: the store holds the workspace open
                self._dirs.give_back(workspace.root)
            else:
                spare = self._prepare()
                with self._cond:
                    self._spares.append(spare)
        except Exception:
            logger.exception("instance housekeeping failed")
            time.sleep(0.1)
        finally:
            with self._cond:
                self._tearing_down -= retired is not None
                self._cond.notify_all()
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                # Wake for new work, or when a quiet period may have begun.
                while not self._has_work():
                    self._cond.wait(timeout=self._next_check())
                if self._closing and not self._retired:
                    return
            self._step()

    def drain(self) -> None:
        """Wait until every retired instance is torn down."""
        with self._cond:
            self._cond.wait_for(lambda: not self._retired and not self._tearing_down)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until housekeeping is done: nothing to tear down, spares ready."""
        with self._cond:
            self._cond.wait_for(
                lambda: not self._retired and not self._tearing_down and len(self._spares) >= SPARES,
                timeout,
            )

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        while self._spares:
            self._spares.popleft().store.close()
