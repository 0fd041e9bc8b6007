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

Runs from a skill's pages (memory/skillpages.py) write a few hundred more pages
before the guest starts; a page fault on each cost such a run more than the
copying itself (about 1.6 ms of 2.7 here). So a few spares are set aside for
them, with the pages of the cached skills copied in too; a run from a
skill's pages takes one of those first, other runs take them last. And for the
most recently used skills' pages, one spare each has them already written in
(the copy itself, about 1.2 ms here): it serves a run from exactly those pages
and nothing else, and is torn down once they are no longer among the most
recent.

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
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol

import wasmtime

from wasmrun.sandbox.budget.alarm import Alarm
from wasmrun.sandbox.files.workspace import Workspace, WorkspaceDirs
from wasmrun.sandbox.guest import wasmtime_internals

logger = logging.getLogger("wasmrun.sandbox")

PAGE = 4096
MADV_POPULATE_READ = 22  # Linux 5.14+
MADV_POPULATE_WRITE = 23
SPARES = 8  # enough for a burst; each holds about a megabyte of prefaulted pages
MAX_RETIRED = 16  # past this, teardown goes on even while runs are in flight
HARD_MAX_RETIRED = 32  # past this, the run that retires an instance tears one down itself
QUIET_S = 0.002  # how long without runs before housekeeping starts
SKILL_PAGE_SPARES = 2  # spares that also have the skills' pages copied in
APPLIED_SPARES = 2  # skills' pages (the most recently used) that get a spare with them written in
APPLIED_MAX_BYTES = 16 << 20  # larger pages get none: an idle spare would hold all of it


@dataclass
class Fresh:
    store: wasmtime.Store
    run: Callable[[wasmtime.Store, int], Any]  # the guest's run export (or images.DoorTurn)
    memory: wasmtime.Memory
    prepared_ahead: bool = False
    prefaulted_pages: frozenset[int] | None = None  # the skills' pages copied in too, if any
    applied: PagesToApply | None = None  # a skill's pages already written in: it serves only a run from them
    interrupt: wasmtime.Func | None = None  # the guest's wasmrun_interrupt (bridge.c; dataimage.py)
    interrupt_args: tuple[int, ...] = ()  # its i32 arguments (the data image's: the signal)
    interrupt_results: int = 0
    # The real WASI calls behind the host's guard (wasi_guard), made once per store: each
    # is an instance in the store, kept until the store closes, so made per run a session's
    # warm store would gather one a run, up to the pool's instance limit (a crashed run).
    wasi_funcs: dict[str, Any] = field(default_factory=dict)

    @property
    def has_skill_pages(self) -> bool:
        return self.prefaulted_pages is not None

    def interrupt_caller(self) -> Callable[[object], None] | None:
        """A caller of the guest's `wasmrun_interrupt` export (with its arguments), for the
        epoch callback's own store context (the watchdog's soft stop); None: the guest has none."""
        if self.interrupt is None:
            return None
        return wasmtime_internals.context_caller(self.interrupt, self.interrupt_args, self.interrupt_results)


class PagesToApply(Protocol):
    """A skill's pages as the supply sees them (memory/skillpages.py)."""

    def apply(self, store: wasmtime.Store, memory: wasmtime.Memory) -> None: ...

    def pages(self) -> set[int]: ...

    @property
    def nbytes(self) -> int: ...


class HotPages:
    """The pages of linear memory a typical run writes, to be copied in ahead,
    and those it only reads, to be mapped in ahead.

    Learned from a sample run by reading /proc/self/pagemap: pages of the
    memory mapping that are present and anonymous were copied on write; those
    present and file-backed were read from the snapshot image. A page only read
    still costs a run a page fault (the kernel maps 16 at a time): about 40 per
    hello here, for about 600 pages of the interpreter's heap it reads.
    Where that is unavailable (not Linux, old kernel), nothing is prefaulted.
    """

    def __init__(self, spans: list[tuple[int, int]], read_spans: list[tuple[int, int]] | None = None) -> None:
        self.spans = spans  # (offset, length) in bytes, page-aligned
        self.read_spans = read_spans or []  # pages only read: mapped in, not copied
        self._madvise = _madvise() if spans or self.read_spans else None

    @staticmethod
    def _present(store: wasmtime.Store, memory: wasmtime.Memory, file_backed: bool) -> set[int]:
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
            if entry >> 63 & 1 and bool(entry >> 61 & 1) == file_backed  # present; file page or copied on write
        }

    @staticmethod
    def written_pages(store: wasmtime.Store, memory: wasmtime.Memory) -> set[int]:
        """Indexes of the pages of `memory` this instance has written so far."""
        return HotPages._present(store, memory, file_backed=False)

    @staticmethod
    def read_pages(store: wasmtime.Store, memory: wasmtime.Memory) -> set[int]:
        """Indexes of the pages of `memory` mapped from the snapshot image (read, never written)."""
        return HotPages._present(store, memory, file_backed=True)

    @classmethod
    def from_pages(cls, pages: AbstractSet[int], read: AbstractSet[int] = frozenset()) -> HotPages:
        return cls(_spans(pages), _spans(set(read) - set(pages)))

    @property
    def supported(self) -> bool:
        """False once copying in failed as unsupported here (or there is nothing to copy)."""
        return self._madvise is not None

    def read_set(self) -> set[int]:
        return {i for offset, length in self.read_spans for i in range(offset // PAGE, (offset + length) // PAGE)}

    def page_set(self) -> set[int]:
        return {i for offset, length in self.spans for i in range(offset // PAGE, (offset + length) // PAGE)}

    @property
    def pages(self) -> int:
        return sum(length for _, length in self.spans) // PAGE

    def populate(
        self, store: wasmtime.Store, memory: wasmtime.Memory, interrupted: Callable[[], bool] = lambda: False
    ) -> bool:
        """Copy the pages in; False if interrupted (or unsupported here) before the end."""
        if self._madvise is None:
            return False
        base = ctypes.addressof(memory.data_ptr(store).contents)
        size = memory.data_len(store)
        for offset, length in self.spans:
            if interrupted():  # a run started: leave the rest to its own page faults
                return False
            length = min(length, size - offset)  # pages past the end are not mapped yet
            if length <= 0:
                continue
            if self._madvise(base + offset, length, MADV_POPULATE_WRITE) != 0:
                self._madvise = None  # unsupported here: stop trying
                return False
        for offset, length in self.read_spans:  # after the copies: a run needs those more
            length = min(length, size - offset)
            if interrupted() or length <= 0:
                continue
            if self._madvise(base + offset, length, MADV_POPULATE_READ) != 0:
                self.read_spans = []  # (a read fault is only slower)
                break
        return True


def _spans(pages: AbstractSet[int]) -> list[tuple[int, int]]:
    """Page indexes as (offset, length) byte spans, adjacent pages joined."""
    spans: list[tuple[int, int]] = []
    for i in sorted(pages):
        if spans and spans[-1][0] + spans[-1][1] == i * PAGE:
            spans[-1] = (spans[-1][0], spans[-1][1] + PAGE)
        else:
            spans.append((i * PAGE, PAGE))
    return spans


def _same(a: frozenset[int] | None, b: frozenset[int] | None) -> bool:
    """Equal page sets; by identity first (the skill pages hand out one object until they change)."""
    return a is b or a == b


def _madvise() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


# A used instance whose memory grew past this has its pages given back to the system
# as soon as its run ends (see release_pages).
RELEASE_ABOVE_BYTES = 64 << 20
_PAGE = 4096
_MADV_DONTNEED = 4  # Linux
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _initial_bytes(store: wasmtime.Store, memory: wasmtime.Memory) -> int:
    return int(memory.type(store).limits.min) * 65536


def release_pages(store: wasmtime.Store, memory: wasmtime.Memory) -> None:
    """Give a used instance's linear memory back to the system now, when it is large.

    wasmtime's pooling allocator frees used instances' pages in batches (stdlibimage.py's
    DECOMMIT_BATCH, for speed on small runs): until a batch is full, a worker would keep
    up to that many runs' whole memories resident. A run's memory is never read again
    once it ended, so for a large one the pages are dropped here (MADV_DONTNEED: the
    mapping stays, its pages go), and the host's memory returns to its baseline."""
    size = memory.data_len(store)
    if _libc is None or size <= RELEASE_ABOVE_BYTES:
        return
    initial = _initial_bytes(store, memory)
    if initial > RELEASE_ABOVE_BYTES and size - initial <= RELEASE_ABOVE_BYTES:
        return  # an image that large (the data image's) is mostly shared pages: only a run's growth counts
    base = ctypes.addressof(memory.data_ptr(store).contents)
    start = (base + _PAGE - 1) & ~(_PAGE - 1)
    length = (base + size - start) & ~(_PAGE - 1)
    _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), _MADV_DONTNEED)


class InstanceSupply:
    """Hands out fresh instances and takes used ones back; a thread does the
    housekeeping in quiet moments."""

    def __init__(
        self,
        make: Callable[[], Fresh],
        dirs: WorkspaceDirs,
        hot: HotPages | None = None,
        prefault_pages: Callable[[], frozenset[int]] = frozenset,
        recent_pages: Callable[[int], Sequence[PagesToApply]] = lambda n: (),
    ) -> None:
        self._make = make
        self._dirs = dirs
        self.hot = hot or HotPages([])
        self._prefault_pages = prefault_pages
        self._recent_pages = recent_pages
        self._applied: list[Fresh] = []  # spares with a skill's pages written in, one per skill
        self._can_fill = True  # off once copying pages in proves unsupported here
        self._prefault_hot: tuple[frozenset[int], HotPages] = (frozenset(), self.hot)
        self._spares: deque[Fresh] = deque()
        self._retired: deque[tuple[wasmtime.Store, Workspace]] = deque()
        self._cond = threading.Condition()  # drain() and wait_idle() wait on it
        # The housekeeper sleeps on this: a run retiring an instance sets it for the
        # quiet moment to come, without waking the thread now (alarm.py).
        self._alarm = Alarm()
        self._closing = False
        self._tearing_down = 0
        self._in_flight = 0
        self._last_retire = 0.0
        self._thread = threading.Thread(target=self._loop, name="wasmrun-instances", daemon=True)
        self._thread.start()

    def take(self, skill_pages: PagesToApply | None = None) -> Fresh:
        """A fresh instance; `skill_pages`: for a run from those pages (which the
        instance may have written in already: see `Fresh.applied`)."""
        with self._cond:
            self._in_flight += 1
            spare = next((s for s in self._applied if s.applied is skill_pages), None) if skill_pages is not None else None
            if spare is not None:
                self._applied.remove(spare)
            else:
                spare = self._pick_spare(skill_pages is not None)
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

    def _pick_spare(self, from_skill_pages: bool) -> Fresh | None:
        """The oldest spare, one with the skills' pages if `from_skill_pages` (else one
        without), if there is one (the lock is held)."""
        for spare in self._spares:
            if spare.has_skill_pages == from_skill_pages:
                self._spares.remove(spare)
                return spare
        return self._spares.popleft() if self._spares else None

    def wake(self) -> None:
        """The skills' pages changed: spares for runs from them may need them."""
        with self._cond:
            self._alarm.set(time.monotonic())

    def _skill_page_spares_wanted(self, pages: frozenset[int]) -> bool:
        """Whether fewer than SKILL_PAGE_SPARES spares have `pages` (the lock is held)."""
        return bool(pages) and sum(_same(spare.prefaulted_pages, pages) for spare in self._spares) < SKILL_PAGE_SPARES

    def _applied_work(self) -> tuple[Fresh | None, PagesToApply | None]:
        """(an applied spare whose pages are no longer among the most recent, to
        tear down) or else (None, recent pages that have no applied spare yet),
        or (None, None) (the lock is held)."""
        recent = [skill_pages for skill_pages in self._recent_pages(APPLIED_SPARES) if skill_pages.nbytes <= APPLIED_MAX_BYTES]
        for spare in self._applied:
            if not any(spare.applied is skill_pages for skill_pages in recent):
                return spare, None
        for skill_pages in recent:
            if not any(spare.applied is skill_pages for spare in self._applied):
                return None, skill_pages
        return None, None

    def _spare_to_fill(self) -> Fresh | None:
        """A spare to copy the skills' current pages into, while too few have
        them: one with an older set of pages first (the lock is held)."""
        pages = self._prefault_pages()
        if not self._can_fill or not self._skill_page_spares_wanted(pages):
            return None
        stale = [spare for spare in self._spares if not _same(spare.prefaulted_pages, pages)]
        stale.sort(key=lambda spare: spare.prefaulted_pages is None)
        return stale[0] if stale else None

    def retire(self, store: wasmtime.Store, workspace: Workspace) -> None:
        with self._cond:
            self._in_flight -= 1
            self._last_retire = time.monotonic()
            self._retired.append((store, workspace))
            # No notify: nothing waiting on the condition is helped by a used
            # instance, and the housekeeper has nothing to do before a quiet moment.
            soon = len(self._retired) >= MAX_RETIRED
            self._alarm.set(self._last_retire + (0.0 if soon else QUIET_S))
            # Instances live in a fixed number of engine slots: never let used
            # ones pile up past a bound, even if runs outpace the housekeeper.
            backlog = len(self._retired) > HARD_MAX_RETIRED
        if backlog:
            self._step(teardown_now=True)

    def running(self) -> None:
        """A run on an instance the supply did not hand out (a session's, kept warm) has
        begun: housekeeping waits for its end (`forget`) as for a run of its own. Else the
        teardown and the next spare's making (page copies, munmaps: the mm's lock) ran
        beside the warm run 2 ms after any other run retired, and slowed it ~2x."""
        with self._cond:
            self._in_flight += 1

    def forget(self) -> None:
        """A taken instance that will not come back through `retire` (a session keeps or
        closes it itself): no longer in flight, so housekeeping is not held off for good."""
        with self._cond:
            self._in_flight -= 1
            self._last_retire = time.monotonic()
            self._alarm.set(self._last_retire + QUIET_S)

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
            or (quiet and self._spare_to_fill() is not None)
            or (quiet and self._applied_work() != (None, None))
        )

    def _next_check(self) -> float | None:
        """When the quiet period that would make work begins, if it will."""
        if self._in_flight or not (
            self._retired
            or len(self._spares) < SPARES
            or self._spare_to_fill() is not None
            or self._applied_work() != (None, None)
        ):
            return None
        return max(self._quiet_for(QUIET_S), 1e-4)

    def _prepare(self) -> Fresh:
        fresh = self._make()
        with self._cond:
            pages = self._prefault_pages()
            # A spare holding an older set of skills' pages is brought up to date in place
            # (_spare_to_fill) rather than joined by a new one: at most SKILL_PAGE_SPARES
            # spares hold skills' pages, whatever the skills' pages did meanwhile.
            stale = any(spare.has_skill_pages and not _same(spare.prefaulted_pages, pages) for spare in self._spares)
            if stale or not self._skill_page_spares_wanted(pages):
                pages = frozenset()
        hot = self._hot_with(pages) if pages else self.hot
        if hot.populate(fresh.store, fresh.memory, interrupted=lambda: self._in_flight > 0) and pages:
            fresh.prefaulted_pages = pages
        fresh.prepared_ahead = True
        return fresh

    def _prepare_applied(self, skill_pages: PagesToApply) -> Fresh:
        """A spare with `skill_pages` written in (the union of pages and the hot ones copied in first)."""
        fresh = self._make()
        pages = self._prefault_pages()  # the union: these pages too, unless past their bound
        hot = self._hot_with(pages) if pages else self.hot
        hot.populate(fresh.store, fresh.memory, lambda: self._in_flight > 0)
        try:
            skill_pages.apply(fresh.store, fresh.memory)
        except BaseException:
            fresh.store.close()
            raise
        fresh.applied = skill_pages
        fresh.prepared_ahead = True
        return fresh

    def _fill_skill_pages(self, spare: Fresh) -> None:
        """Copy the skills' current pages into an unused spare (its content stays
        the snapshot's: populating only makes the pages its own)."""
        pages = self._prefault_pages()
        if not pages:
            return
        hot = self._hot_with(pages)
        if hot.populate(spare.store, spare.memory, lambda: self._in_flight > 0):
            spare.prefaulted_pages = pages
        elif not hot.supported:
            with self._cond:
                self._can_fill = False  # never again: it would be tried in every quiet moment

    def _hot_with(self, pages: frozenset[int]) -> HotPages:
        """The hot pages and `pages`; rebuilt only when `pages` change."""
        known, hot = self._prefault_hot
        if not _same(pages, known):
            hot = HotPages.from_pages(pages | self.hot.page_set(), self.hot.read_set())
            self._prefault_hot = (pages, hot)
        return hot

    def _step(self, teardown_now: bool = False) -> bool:
        """One unit of housekeeping: tear one instance down, make one spare, or
        copy the skills' pages into one. Returns False when there is nothing
        (more) to do or the supply is closing. `teardown_now`: tear down a used
        instance if there is one, quiet or not."""
        with self._cond:
            if teardown_now:
                if not self._retired:
                    return False
            elif not self._has_work() or (self._closing and not self._retired):
                return False
            retired = self._retired.popleft() if self._retired else None
            self._tearing_down += retired is not None
            to_fill = stale = None
            to_apply: PagesToApply | None = None
            make_spare = retired is None and len(self._spares) < SPARES
            if retired is None and not make_spare:
                to_fill = self._spare_to_fill()
                if to_fill is not None:
                    self._spares.remove(to_fill)  # no run may take it meanwhile
                else:
                    stale, to_apply = self._applied_work()
                    if stale is not None:
                        self._applied.remove(stale)
        try:
            if retired is not None:  # teardown first: it frees memory
                store, workspace = retired
                store.close()  # first: the store holds the workspace open
                self._dirs.give_back(workspace.root)
            elif to_fill is not None:
                try:
                    self._fill_skill_pages(to_fill)
                finally:
                    with self._cond:
                        self._spares.append(to_fill)
            elif stale is not None:
                stale.store.close()
            elif to_apply is not None:
                applied = self._prepare_applied(to_apply)
                with self._cond:
                    self._applied.append(applied)
            elif make_spare:  # (else the skills' pages changed meanwhile: look again)
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
                self._alarm.woke()
                if self._closing and not self._retired:
                    return
                work = self._has_work()
                if not work:  # wake when a quiet period may have begun, or when told
                    check = self._next_check()
                    if check is not None:
                        self._alarm.set(time.monotonic() + check)
            if work:
                self._step()
            else:
                self._alarm.wait()

    def drain(self) -> None:
        """Wait until every retired instance is torn down."""
        with self._cond:
            self._cond.wait_for(lambda: not self._retired and not self._tearing_down)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until housekeeping is done: nothing to tear down, spares ready."""
        with self._cond:
            self._cond.wait_for(
                lambda: not self._retired
                and not self._tearing_down
                and len(self._spares) >= SPARES
                and self._spare_to_fill() is None
                and self._applied_work() == (None, None),
                timeout,
            )

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._alarm.set(0.0)
        self._thread.join()
        self._alarm.close()
        while self._spares:
            self._spares.popleft().store.close()
        while self._applied:
            self._applied.pop().store.close()
