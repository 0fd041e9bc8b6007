"""A session's pages: its memory on disk, the pages written since the guest snapshot.

A version's memory is one or two files, each a header and spans of pages:

    memory        the base: every page written since the snapshot, when it was made
    memory.delta  (optional) every written page that now differs from the base,
                  read over it

A run that keeps its state hard-links the base into the next version and
writes only a new delta: the pages the session changed since the base, found
by comparing memory with the base (memcmp, ~10 GB/s) rather than by writing
all of it again (a session holding 100 MB would write 100 MB per run). Once
the delta outgrows half the base, the next version writes a new base.

Which pages were written since the snapshot: /proc/self/pagemap says which of
the instance's pages are present and no longer backed by the snapshot's
image (copied on write, or grown and touched); where it cannot be read, the
whole memory counts.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import re
import struct
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import wasmtime

from wasmrun.sandbox.guest.guestmemory import memory_view
from wasmrun.sandbox.memory.skillpages import WASM_PAGE

PAGE = 4096
MAGIC = b"WRSESS01"
BASE = "memory"
DELTA = "memory.delta"
_HEADER = struct.Struct("<8sH")  # magic, length of the guest key that follows
_SIZES = struct.Struct("<QI")  # memory size in bytes, number of spans
_SPAN = struct.Struct("<QQ")  # offset, length
Spans = list[tuple[int, int]]


class PagesMismatch(Exception):
    """The pages were written by another guest build: this server cannot resume them."""

    def __init__(self, path: Path, made_by: str) -> None:
        super().__init__(str(path))
        self.made_by = made_by  # the guest key of the build that made it


_compare = ctypes.CDLL(None).memcmp
_compare.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_compare.restype = ctypes.c_int


def made_by(folder: Path) -> str | None:
    """The guest key that wrote the pages of the version `folder`: None when it
    has none (a session's first run), "" when its file is not one of ours."""
    try:
        with open(folder / BASE, "rb") as f:
            magic, key_len = _HEADER.unpack(f.read(_HEADER.size))
            return f.read(key_len).decode(errors="replace") if magic == MAGIC else ""
    except (OSError, struct.error):
        return None


def load(folder: Path, store: wasmtime.Store, memory: wasmtime.Memory, guest_key: str) -> None:
    """Write a version's memory into a fresh instance (nothing if it has none yet)."""
    for name in (BASE, DELTA):
        if (folder / name).exists():
            _read(folder / name, store, memory, guest_key)


class TooLarge(Exception):
    """The pages would take more than the room they were given; nothing was written."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


def save(
    previous: Path, folder: Path, store: wasmtime.Store, memory: wasmtime.Memory, guest_key: str,
    room: int | None = None, written: Spans | None = None,
) -> int:
    """`folder`'s memory from the instance, whose memory is `previous`'s after a
    run; its bytes on disk. TooLarge, before a byte is written, when that would
    be more than `room` (the base a delta is laid on counts in full).

    `written`: the pages the run wrote, where the kernel says (writes.py): the instance's
    memory was exactly `previous`'s when it began. Then only those are compared with the
    base; the rest of the delta is `previous`'s own (those pages are as it saved them)."""
    base = previous / BASE
    spans: Spans | None = None
    if base.exists():
        base_spans = _span_table(base, guest_key)
        if written is not None:
            kept = [(o, n) for o, n, _ in _span_table(previous / DELTA, guest_key)] if (previous / DELTA).exists() else []
            delta = _union(kept, _changed(written, base, base_spans, store, memory))
        else:
            spans = written_spans(store, memory)
            delta = _changed(spans, base, base_spans, store, memory)
        base_bytes = base.stat().st_size
        if sum(length for _, length in delta) * 2 <= base_bytes:
            _check_room(base_bytes + _file_size(delta, guest_key), room)
            _link(base, folder / BASE)
            return base_bytes + _write(folder / DELTA, delta, store, memory, guest_key)
    if spans is None:
        spans = written_spans(store, memory)
    _check_room(_file_size(spans, guest_key), room)
    return _write(folder / BASE, spans, store, memory, guest_key)


def _union(a: Spans, b: Spans) -> Spans:
    """Two sorted lists of spans as one, overlaps and neighbours joined."""
    out: Spans = []
    for offset, length in sorted(a + b):
        if out and offset <= out[-1][0] + out[-1][1]:
            last_offset, last_length = out[-1]
            out[-1] = (last_offset, max(last_length, offset + length - last_offset))
        else:
            out.append((offset, length))
    return out


def _file_size(spans: Spans, guest_key: str) -> int:
    """What `_write` writes for `spans`: its header, span table and the spans."""
    header = _HEADER.size + len(guest_key.encode()) + _SIZES.size + _SPAN.size * len(spans)
    return header + sum(length for _, length in spans)


def _check_room(needed: int, room: int | None) -> None:
    if room is not None and needed > room:
        raise TooLarge(needed)


def copy(source: Path, target: Path) -> None:
    """A fork's memory: hard links (the files are never changed in place)."""
    for name in (BASE, DELTA):
        if (source / name).exists():
            _link(source / name, target / name)


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or no hard links here
        import shutil

        shutil.copyfile(source, target)


def _changed(spans: Spans, base: Path, base_spans: list[tuple[int, int, int]], store: wasmtime.Store,
             memory: wasmtime.Memory) -> Spans:
    """The parts of `spans` (at page grain) whose memory differs from the base file's;
    pages the base does not hold are changed by definition. A warm session's written
    spans are the base's own, hundreds of them: each piece is one memcmp, and only a
    piece that differs is halved down to its pages (a ctypes call costs more than
    comparing a page, and a Python step per 64 KiB chunk cost a save ~2 ms)."""
    starts = [offset for offset, _, _ in base_spans]
    address = ctypes.addressof(memory.data_ptr(store).contents)
    changed: Spans = []
    with _base_maps.mapped(base) as file_address:
        _compare_spans(spans, base_spans, starts, address, file_address, changed)
    return changed


def _compare_spans(spans: Spans, base_spans: list[tuple[int, int, int]], starts: list[int], address: int,
                   file_address: int, changed: Spans) -> None:
    last = len(base_spans) - 1
    i = 0
    for offset, length in spans:
        end = offset + length
        while offset < end:
            if not (0 <= i <= last and base_spans[i][0] <= offset < base_spans[i][0] + base_spans[i][1]):
                # the next base span (in a warm session the written spans are the base's, in order), else a search
                i = i + 1 if 0 <= i < last and starts[i + 1] <= offset < starts[i + 1] + base_spans[i + 1][1] \
                    else bisect.bisect_right(starts, offset) - 1
            held = i >= 0 and offset < base_spans[i][0] + base_spans[i][1]
            if not held:  # up to the next base span: not in the base
                upto = min(end, starts[i + 1]) if i + 1 < len(starts) else end
                _add(changed, offset, upto - offset)
                offset = upto
                continue
            span_start, span_length, file_offset = base_spans[i]
            upto = min(end, span_start + span_length)
            source = file_address + file_offset + (offset - span_start)
            if _compare(address + offset, source, upto - offset):
                _add_changed_pages(changed, address, source, offset, upto)
            offset = upto


class _BaseMaps:
    """Base files mapped read-only, with their pages mapped in at once (MAP_POPULATE: a
    page fault each would cost more than comparing the page), kept for the next save:
    a warm session compares with the same base run after run, and mapping it again each
    time cost ~0.7 ms for 6 MB. A base is never changed in place (a version hard-links
    it; a new base is a new file), so (device, inode, size, mtime) names its content.
    A few are kept, the least recent unmapped first, never one a save is reading (runs
    of one process save at once); a mapped file that was deleted keeps its blocks until
    it is unmapped."""

    KEEP = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: OrderedDict[tuple[int, int, int, int], list[int]] = OrderedDict()  # [address, size, readers]

    @contextmanager
    def mapped(self, path: Path) -> Iterator[int]:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
            with self._lock:
                entry = self._maps.get(key)
                if entry is None:
                    address = _libc.mmap(None, info.st_size, mmap.PROT_READ, mmap.MAP_PRIVATE | _MAP_POPULATE,
                                         f.fileno(), 0)
                    if not isinstance(address, int) or address == ctypes.c_void_p(-1).value:
                        raise OSError(ctypes.get_errno(), "cannot map a session's pages")
                    entry = self._maps[key] = [address, info.st_size, 0]
                self._maps.move_to_end(key)
                entry[2] += 1
        try:
            yield entry[0]
        finally:
            with self._lock:
                entry[2] -= 1
                self._evict()

    def _evict(self) -> None:
        for key in [k for k, (_, _, readers) in self._maps.items() if not readers][: max(0, len(self._maps) - self.KEEP)]:
            address, size, _ = self._maps.pop(key)
            _libc.munmap(address, size)


_base_maps = _BaseMaps()


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munmap.restype = ctypes.c_int
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
_libc.ioctl.restype = ctypes.c_int
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def _add_changed_pages(changed: Spans, address: int, source: int, start: int, end: int) -> None:
    """Within a chunk that differs (memory at `address + start`, the base's copy at
    `source`), the pages that do, in order: the chunk halved until a part is one page,
    each half compared. A run changes a few scattered pages (the delta, written every
    run, stays that small): one changed page of 16 costs 8 compares, not 16, and each is
    a call through ctypes, which costs more than comparing the page."""
    if end - start <= PAGE:
        _add(changed, start, end - start)
        return
    middle = start + max(PAGE, (end - start) // (2 * PAGE) * PAGE)  # a page boundary inside
    for part_start, part_end in ((start, middle), (middle, end)):
        part_source = source + (part_start - start)
        if _compare(address + part_start, part_source, part_end - part_start):
            _add_changed_pages(changed, address, part_source, part_start, part_end)


def _add(spans: Spans, offset: int, length: int) -> None:
    if spans and spans[-1][0] + spans[-1][1] == offset:
        spans[-1] = (spans[-1][0], spans[-1][1] + length)
    else:
        spans.append((offset, length))


def written_spans(store: wasmtime.Store, memory: wasmtime.Memory) -> Spans:
    """(offset, length) spans covering every page written since the snapshot."""
    size = memory.data_len(store)
    spans = _scan_written(store, memory)
    if spans is None:
        spans = _pagemap_written(store, memory)
    if spans is None:
        return [(0, size)] if size else []
    return spans


# Each pagemap entry's top byte, mapped to 1 when the page is present (bit 63)
# and not file-backed (bit 61): written since the snapshot's image was mapped.
_WRITTEN = bytes(int(b & 0xA0 == 0x80) for b in range(256))
_RUNS = re.compile(b"\x01+")


def _pagemap_written(store: wasmtime.Store, memory: wasmtime.Memory) -> Spans | None:
    """Spans of written pages, from one read of /proc/self/pagemap (8 bytes a
    page) scanned in C (translate, then a regex for runs of ones)."""
    if not sys.platform.startswith("linux"):
        return None
    base = ctypes.addressof(memory.data_ptr(store).contents)
    size = memory.data_len(store)
    try:
        with open("/proc/self/pagemap", "rb", buffering=0) as f:
            raw = os.pread(f.fileno(), size // PAGE * 8, base // PAGE * 8)
    except OSError:
        return None
    flags = raw[7::8].translate(_WRITTEN)
    return [(m.start() * PAGE, (m.end() - m.start()) * PAGE) for m in _RUNS.finditer(flags)]


class _ScanArg(ctypes.Structure):
    """Linux's `struct pm_scan_arg` (PAGEMAP_SCAN, 6.7+)."""

    _fields_ = [(name, ctypes.c_uint64) for name in (
        "size", "flags", "start", "end", "walk_end", "vec", "vec_len", "max_pages",
        "category_inverted", "category_mask", "category_anyof_mask", "return_mask")]


_PAGE_IS_FILE, _PAGE_IS_PRESENT = 1 << 2, 1 << 3
_PAGEMAP_SCAN = (3 << 30) | (ctypes.sizeof(_ScanArg) << 16) | (ord("f") << 8) | 16  # _IOWR('f', 16, ...)
_REGIONS = 512  # (start, end, categories) triples per call; a session's pages come in a few hundred runs
_scan_works = sys.platform.startswith("linux")


def _scan_written(store: wasmtime.Store, memory: wasmtime.Memory) -> Spans | None:
    """The same spans as `_pagemap_written` (present and not file-backed: bit 63 set, 61
    clear), found by the kernel: PAGEMAP_SCAN hands back the runs themselves, where the
    read hands back 8 bytes for each of the memory's pages (the data image's 83 MiB: 170 KB
    read and scanned, ~2 ms a save under load). None where the kernel has no PAGEMAP_SCAN."""
    global _scan_works
    if not _scan_works:
        return None
    try:
        with open("/proc/self/pagemap", "rb", buffering=0) as f:
            return pagemap_scan(f.fileno(), ctypes.addressof(memory.data_ptr(store).contents), memory.data_len(store),
                                category_inverted=_PAGE_IS_FILE, category_mask=_PAGE_IS_PRESENT | _PAGE_IS_FILE,
                                return_mask=_PAGE_IS_PRESENT)
    except OSError:
        _scan_works = False  # an older kernel (ENOTTY/EINVAL): read the pagemap from now on
        return None


def pagemap_scan(pagemap: int, start: int, size: int, flags: int = 0, category_inverted: int = 0,
                 category_mask: int = 0, return_mask: int = 0) -> Spans:
    """PAGEMAP_SCAN over [start, start + size) on the open /proc/self/pagemap `pagemap`: the
    (offset from `start`, length) spans of the pages in the categories asked, joined; the
    kernel's flags as given (writes.py asks it to write-protect what it reports). OSError
    where the kernel refuses."""
    regions = (ctypes.c_uint64 * (3 * _REGIONS))()
    arg = _ScanArg(size=ctypes.sizeof(_ScanArg), flags=flags, vec=ctypes.addressof(regions), vec_len=_REGIONS,
                   category_inverted=category_inverted, category_mask=category_mask, return_mask=return_mask)
    spans: Spans = []
    end = start + size
    at = start
    while at < end:
        arg.start, arg.end, arg.walk_end = at, end, 0
        found = _libc.ioctl(pagemap, _PAGEMAP_SCAN, ctypes.byref(arg))
        if found < 0:
            raise OSError(ctypes.get_errno(), "PAGEMAP_SCAN")
        flat = memoryview(regions).cast("B").cast("Q")[: 3 * found].tolist()  # one copy, not 3 per region
        for i in range(0, 3 * found, 3):
            _add(spans, flat[i] - start, flat[i + 1] - flat[i])
        if arg.walk_end <= at:
            raise OSError("PAGEMAP_SCAN made no progress")
        at = arg.walk_end
    return spans


def _write(path: Path, spans: Spans, store: wasmtime.Store, memory: wasmtime.Memory, guest_key: str) -> int:
    """`spans` of memory to `path`, straight from linear memory; the file's size.
    No temporary name: `path` is in a version folder that becomes the session's
    only once the server records it, after this returns."""
    key = guest_key.encode()
    header = [_HEADER.pack(MAGIC, len(key)), key, _SIZES.pack(memory.data_len(store), len(spans))]
    header += [_SPAN.pack(offset, length) for offset, length in spans]
    view = memory_view(store, memory)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(header))
            for offset, length in spans:
                f.write(view[offset : offset + length])
            size: int = f.tell()
    finally:
        view.release()
    return size


def _header(f: object, path: Path, guest_key: str) -> tuple[int, list[tuple[int, int]]]:
    read = f.read  # type: ignore[attr-defined]
    magic, key_len = _HEADER.unpack(read(_HEADER.size))
    made_by = read(key_len).decode(errors="replace") if magic == MAGIC else ""
    if made_by != guest_key:
        raise PagesMismatch(path, made_by)
    memory_bytes, count = _SIZES.unpack(read(_SIZES.size))
    table = read(_SPAN.size * count)
    return memory_bytes, [_SPAN.unpack_from(table, i * _SPAN.size) for i in range(count)]


def _span_table(path: Path, guest_key: str) -> list[tuple[int, int, int]]:
    """(memory offset, length, file offset) of each span of a pages file."""
    with open(path, "rb") as f:
        _, spans = _header(f, path, guest_key)
        file_offset = f.tell()
    table = []
    for offset, length in spans:
        table.append((offset, length, file_offset))
        file_offset += length
    return table


def _read(path: Path, store: wasmtime.Store, memory: wasmtime.Memory, guest_key: str) -> None:
    """Grow the instance's memory to the pages' size and read its pages
    straight into it (one read per span, no copy in between)."""
    with open(path, "rb", buffering=0) as f:
        memory_bytes, spans = _header(f, path, guest_key)
        size = memory.data_len(store)
        if memory_bytes > size:
            memory.grow(store, (memory_bytes - size + WASM_PAGE - 1) // WASM_PAGE)
        view = memory_view(store, memory)
        try:
            for offset, length in spans:
                if offset + length > len(view) or f.readinto(view[offset : offset + length]) != length:
                    raise ValueError(f"damaged session pages {path}")
        finally:
            view.release()
