"""A skill's pages: a skill's modules already imported when its run starts.

A skill's import work (its modules' top-level code: dataclasses, tables,
regexes) is the same on every run and costs most of a short skill run
(about 15 ms of 17 for `text.stats` here, against under 2 ms for hello
world). So after a skill version's first completed run, an *import run* in the
background (off the request path) imports the skill in a fresh instance and
stops before calling anything; the pages of linear memory it changed are
kept as that skill's pages. A later run that mounts exactly that skill (an
`execute_skill`, or a `run_code` mounting it alone) starts from a fresh
instance of the guest snapshot with those pages written in, before the guest
executes anything: `import skills.<name>` is then found in `sys.modules`.

Why pages over the base snapshot rather than a new snapshot module: a
derived module would need compiling by wasmtime (about 10 s of CPU per
skill here) and a copy of the machine code in memory for each; a skill's pages
are only the changed ones (about 2.4 MB for `text.stats`), made in about 0.1 s,
and writing it into an instance costs about as much as the page faults the
import would have taken anyway.

What stays true: every run still has its own never-used instance (the pages
are copied in, never shared); the run's own state starts where the import
ended, so nothing of one run reaches the next (the guest reseeds `random`
per run as before); mounts, read-only skill files and the listing of / and
/skills are the run's own WASI as before. The import run reads and writes no
blobs and has no environment and no network, so a run given secrets or a network
grant (which its import may read) imports for itself. What a skill's import printed is not in later
runs' logs (the import is not repeated), and module-level values are the
import run's: a timestamp taken, or a `random.Random()` of the skill's own
seeded, at import is the same in every run from the pages (the module-level
`random` functions are reseeded per run; `secrets`, `uuid4` and `os.urandom`
draw fresh bytes from the host).

A skill's pages are kept per key: the guest build, the skill's entrypoint and its
stamp (files/skillstamp.py: its name, folder and every file's identity, taken once
per run and shared with the data image's copy of it; a new version is a new
folder, a changed file a new key). The cache is an LRU bounded by count
and by bytes. They are only used when their memory size fits the run's
memory limit; otherwise the run imports as before.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import wasmtime

from wasmrun.blobs.quota import BlobQuota, BlobQuotaExceeded
from wasmrun.sandbox.contract.types import MountedSkill
from wasmrun.sandbox.files.skillstamp import SkillStamp
from wasmrun.sandbox.guest.guestmemory import host_address

logger = logging.getLogger("wasmrun.sandbox")

PAGE = 4096
ZERO_PAGE = bytes(PAGE)
WASM_PAGE = 65536
MAX_SKILLS = 32  # skills whose pages are kept
MAX_PAGES_BYTES = 256 << 20  # all skills' pages together
MAX_PENDING = 64  # import runs waiting; more are dropped (the skill just runs as before)
# A failed import run is tried again, on a later completed run of the skill, after
# RETRY_AFTER_S, then 4x that, ...; after MAX_ATTEMPTS failures the skill runs
# without its pages (it imports in each run, as before).
MAX_ATTEMPTS = 3
MAX_REMEMBERED_FAILURES = 1_024
RETRY_AFTER_S = 30.0
# Pages of skills' pages (most recently used first) that spares set aside for skill runs
# have copied in ahead (see instances.py): 4 MiB per such spare at most.
MAX_PREFAULT_PAGES = 1024


@dataclass(frozen=True)
class SkillPages:
    """The pages an import run changed, over the snapshot's memory."""

    memory_bytes: int  # linear memory size after the import
    spans: tuple[tuple[int, bytearray], ...]  # (offset, content), page-aligned

    @property
    def nbytes(self) -> int:
        return sum(len(data) for _, data in self.spans)

    @classmethod
    def difference(cls, base: memoryview, after: memoryview, max_bytes: int) -> SkillPages | None:
        """The pages of `after` that differ from `base`; past its end, those not
        all zero (growing memory zero-fills it). Views over the two instances'
        memories: only changed pages are copied. None if they come to more than
        `max_bytes`."""
        spans: list[tuple[int, bytearray]] = []
        total = 0
        start: int | None = None
        for offset in range(0, len(after) + PAGE, PAGE):
            page = after[offset : offset + PAGE]
            if not page:
                changed = False  # one step past the end: closes the last span
            elif offset >= len(base):
                changed = page != ZERO_PAGE[: len(page)]
            else:
                changed = page != base[offset : offset + PAGE]
            if changed and start is None:
                start = offset
            elif not changed and start is not None:
                total += offset - start
                if total > max_bytes:
                    return None
                spans.append((start, bytearray(after[start:offset])))
                start = None
        return cls(len(after), tuple(spans))

    def apply(self, store: wasmtime.Store, memory: wasmtime.Memory) -> None:
        """Write these pages into a fresh instance's memory (growing it first).

        One memmove per span into the memory's base address: `Memory.write`
        costs about 5 us a call in bindings, over a ms for a skill's few
        hundred spans (bounds: every span lies below `memory_bytes`)."""
        size = memory.data_len(store)
        if self.memory_bytes > size:
            memory.grow(store, (self.memory_bytes - size + WASM_PAGE - 1) // WASM_PAGE)
        if memory.data_len(store) < self.memory_bytes:
            raise ValueError("the memory did not grow to the skill's pages' size")
        base = host_address(store, memory)
        for offset, data in self.spans:
            ctypes.memmove(base + offset, (ctypes.c_char * len(data)).from_buffer(data), len(data))

    def pages(self) -> set[int]:
        """Indexes of the (4 KiB) pages these write."""
        return {i for offset, data in self.spans for i in range(offset // PAGE, (offset + len(data)) // PAGE)}


def pages_key(guest_key: str, skill: MountedSkill, stamp: SkillStamp) -> str:
    """Names the skill as `stamp` found it: any file added, removed or changed, another
    folder (a new version), another entrypoint or another guest build is a new key."""
    return hashlib.sha256(os.fsencode(f"{guest_key}\0{skill.entrypoint}\0{stamp.digest}")).hexdigest()


def single_skill(skills: list[MountedSkill]) -> MountedSkill | None:
    """The skill a run mounts, if it mounts exactly one action skill and nothing else."""
    if len(skills) == 1 and skills[0].entrypoint:
        return skills[0]
    return None


class SkillPagesCache:
    """An LRU of skills' pages by key, and one background thread making new ones.

    `make(skill)` does an import run (with background.IMPORT_LIMITS, never the limits
    of the run that asked) and returns the pages, or None when it failed: it is then
    tried again later with backoff, at most MAX_ATTEMPTS times for that key."""

    def __init__(
        self,
        make: Callable[[MountedSkill], SkillPages | None],
        max_skills: int = MAX_SKILLS,
        max_bytes: int = MAX_PAGES_BYTES,
        on_change: Callable[[], None] = lambda: None,
        key_of: Callable[[MountedSkill], str | None] | None = None,
        retry_after_s: float = RETRY_AFTER_S,
    ) -> None:
        self._make = make
        # Names the skill's files as they are after its import run: pages are kept
        # only if they are still what the request named (files changed or removed
        # meanwhile, e.g. a skill-cache folder evicted, would make wrong pages).
        self._key_of = key_of
        self._on_change = on_change  # called with no lock held: it may take the caller's
        self.max_skills = max_skills
        self.max_bytes = max_bytes
        self._pages: OrderedDict[str, SkillPages] = OrderedDict()
        # Keys whose import run failed: (failures, when it may be tried again).
        self._failed: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self.retry_after_s = retry_after_s
        self._pending: OrderedDict[str, MountedSkill] = OrderedDict()
        self._busy = False
        self._bytes = 0
        self._prefault: frozenset[int] = frozenset()
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._enabled = True

    @property
    def enabled(self) -> bool:
        """Off: runs neither use nor make skills' pages (the bench compares)."""
        return self._enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        with self._cond:
            self._enabled = on
        self._on_change()

    def get(self, key: str) -> SkillPages | None:
        with self._cond:
            if not self._enabled:
                return None
            found = self._pages.get(key)
            if found is not None:
                self._pages.move_to_end(key)
            return found

    def request(self, key: str, skill: MountedSkill) -> None:
        """Make the pages for `key` in the background, unless it is there, queued, or
        failed too recently or too often."""
        with self._cond:
            if (
                self._closing
                or not self._enabled
                or key in self._pages
                or key in self._pending
                or not self._may_try(key)
                or len(self._pending) >= MAX_PENDING
            ):
                return
            self._pending[key] = skill
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="wasmrun-skill-pages", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def put(self, key: str, pages: SkillPages) -> None:
        with self._cond:
            if pages.nbytes > self.max_bytes:
                return  # larger than the whole cache (the maker stops early at this bound too)
            old = self._pages.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._pages[key] = pages
            self._bytes += pages.nbytes
            while len(self._pages) > self.max_skills or self._bytes > self.max_bytes:
                _, evicted = self._pages.popitem(last=False)
                self._bytes -= evicted.nbytes
            self._prefault = self._union_of_pages()
        self._on_change()

    def _union_of_pages(self) -> frozenset[int]:
        """The pages the skills' pages write, the most recently used first, up to
        MAX_PREFAULT_PAGES (a skill's that would pass it are left out whole)."""
        union: set[int] = set()
        for skill_pages in reversed(self._pages.values()):
            written = skill_pages.pages()
            if len(union | written) <= MAX_PREFAULT_PAGES:
                union |= written
        return frozenset(union)

    def recent(self, count: int) -> list[SkillPages]:
        """The `count` most recently used skills' pages, the most recent first (none when off)."""
        with self._cond:
            if not self._enabled:
                return []
            return list(itertools.islice(reversed(self._pages.values()), count))

    def prefault_pages(self) -> frozenset[int]:
        """Pages worth copying into a spare ahead of a run from a skill's pages (empty
        when they are off): a run then writes them into pages that are
        already its own, instead of taking a page fault on each."""
        with self._cond:
            return self._prefault if self._enabled else frozenset()

    @property
    def total_bytes(self) -> int:
        with self._cond:
            return self._bytes

    def __len__(self) -> int:
        with self._cond:
            return len(self._pages)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                key, skill = self._pending.popitem(last=False)
                self._busy = True
            made: SkillPages | None = None
            try:
                made = self._make(skill)
                if made is not None and self._key_of is not None and self._key_of(skill) != key:
                    logger.info("skill %s changed while its pages were made: none this time", skill.name)
                    made = None
            except Exception:
                logger.exception("making the pages of skill %s failed", skill.name)
            if made is not None:
                self.put(key, made)  # before `_busy` clears: wait_ready then finds it
            with self._cond:
                self._busy = False
                if made is None:
                    self._record_failure(key)
                else:
                    self._failed.pop(key, None)
                self._cond.notify_all()

    def _may_try(self, key: str) -> bool:
        failures, retry_at = self._failed.get(key, (0, 0.0))
        return failures < MAX_ATTEMPTS and time.monotonic() >= retry_at

    def _record_failure(self, key: str) -> None:
        failures = self._failed.pop(key, (0, 0.0))[0] + 1
        self._failed[key] = (failures, time.monotonic() + self.retry_after_s * 4 ** (failures - 1))
        while len(self._failed) > MAX_REMEMBERED_FAILURES:
            self._failed.popitem(last=False)

    def failures(self, key: str) -> int:
        """How many import runs of `key` have failed (tests look)."""
        with self._cond:
            return self._failed.get(key, (0, 0.0))[0]

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Wait until no skill's pages are queued or being made (tests and benchmarks use it)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._pending.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()


class NoBlobs:
    """The import run's blob access: none (it runs for no tenant)."""

    def size(self, blob_id: str, owner: str = "") -> int | None:
        return None

    def read(self, blob_id: str, offset: int, length: int, owner: str = "") -> bytes:
        raise KeyError(blob_id)

    def create(
        self, data: bytes, kind: str, run_id: str | None = None, owner: str = "", quota: BlobQuota | None = None
    ) -> str:
        raise BlobQuotaExceeded("max_count", 0, "an import run stores no blobs")

    def local_path(self, blob_id: str, owner: str = "") -> Path | None:
        return None
