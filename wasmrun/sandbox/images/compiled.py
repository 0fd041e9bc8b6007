"""The compiled-module cache: wasmtime's machine code for a module, made once.

Compiling the guest snapshot takes seconds (about 10 s on 2 cores); loading
the serialized result takes about 0.1 s. Files live in `<cache>/compiled`,
named by wasmtime's version, the engine settings and the module's hash.

Several processes may start at once (the server's workers): one compiles
under a lock while the others wait and then load its result. A cached file
this wasmtime cannot load (another CPU's features, a damaged file) is
compiled again, never fatal.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

import wasmtime

from python_wasm import build as guest_build
from python_wasm import downloads
from wasmrun.durable import atomic_write, sweep_temporaries

logger = logging.getLogger("wasmrun.sandbox")
PROGRESS_EVERY_S = 5.0


def cache_dir() -> Path:
    return downloads.cache_root() / "compiled"


def private_cache_dir() -> Path:
    """The cache folder, created if needed."""
    path = cache_dir()
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_private(path)
    return path


def check_private(path: Path) -> None:
    """Refuse a folder that others can write: deserialising trusts its input."""
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(f"compiled-module cache {path} is writable by others")


def cached_path(wasm: Path, engine_settings: str) -> Path:
    """Where the compiled form of `wasm` is (or will be) kept."""
    digest = file_digest(wasm)
    key = hashlib.sha256(f"{version('wasmtime')}|{engine_settings}|{digest}".encode()).hexdigest()[:32]
    return cache_dir() / f"{key}.cwasm"


def file_digest(wasm: Path) -> str:
    """The sha256 of `wasm`, remembered for the file as it is now (its inode, size and mtime) in
    `<cache>/compiled/digests/`: a data image is 170 MB, and every server start (its lease) and
    every worker (its module) asked for it, 0.4 s of hashing each. The memo is as private as
    the compiled modules beside it (check_private), so it is trusted as far as they are."""
    st = wasm.stat()
    stamp = f"{st.st_ino} {st.st_size} {st.st_mtime_ns}"
    memo = cache_dir() / "digests" / hashlib.sha256(str(wasm.resolve()).encode()).hexdigest()[:32]
    try:
        kept_stamp, _, kept = memo.read_text().partition("\n")
        if kept_stamp == stamp and len(kept) == 64:
            return kept
    except (OSError, UnicodeDecodeError):
        pass
    digest = hashlib.sha256(wasm.read_bytes()).hexdigest()
    try:
        private_cache_dir()
        memo.parent.mkdir(mode=0o700, exist_ok=True)
        atomic_write(memo, f"{stamp}\n{digest}".encode(), sync_dir=False)
    except OSError:
        pass  # a read-only cache: hashed again next time
    return digest


def deserialize(engine: wasmtime.Engine, path: Path) -> wasmtime.Module | None:
    """The cached module, or None if there is none. Raises wasmtime.WasmtimeError
    if this engine cannot load it (compiled for another CPU, or damaged)."""
    try:
        # Read into memory rather than mapped from the file: a file-backed
        # image's pages can be reclaimed when idle (and re-read from disk on
        # the next page fault); anonymous memory stays put.
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    module = wasmtime.Module.deserialize(engine, data)
    downloads.mark_used(path)
    return module


def _cached(engine: wasmtime.Engine, path: Path) -> wasmtime.Module | None:
    try:
        return deserialize(engine, path)
    except wasmtime.WasmtimeError as exc:
        logger.warning("compiled module %s cannot be loaded (%s); compiling again", path, str(exc).partition("\n")[0])
        return None


def shipped_path(cached: Path) -> Path:
    """Where a one-file executable (scripts/onefile.py) carries the compiled module
    it was built with, next to its packaged guest, under the cache's file name."""
    return guest_build.PACKAGED_DIR / "compiled" / cached.name


def _shipped(engine: wasmtime.Engine, cached: Path) -> wasmtime.Module | None:
    """The shipped compiled module if this machine can load it. Its name holds
    wasmtime's version, the engine settings and the module's hash; wasmtime itself
    refuses one made for CPU features this machine lacks: then we compile."""
    path = shipped_path(cached)
    if not path.is_file():
        return None
    try:
        return wasmtime.Module.deserialize(engine, path.read_bytes())
    except wasmtime.WasmtimeError as exc:
        logger.warning("the shipped compiled module cannot be loaded here (%s); compiling", str(exc).partition("\n")[0])
        return None


def load_module(engine: wasmtime.Engine, wasm: Path, engine_settings: str) -> wasmtime.Module:
    """`wasm` compiled for `engine` (whose configuration `engine_settings`
    names), from the cache (or shipped with a one-file executable), or compiled
    now and cached."""
    sweep_temporaries(private_cache_dir())  # left by a process killed while writing
    path = cached_path(wasm, engine_settings)
    module = _cached(engine, path) or _shipped(engine, path)
    if module is not None:
        return module
    with _exclusive(path.with_suffix(".lock")):
        module = _cached(engine, path)  # another process may have made it meanwhile
        if module is not None:
            return module
        with _progress(f"compiling {wasm.name} to machine code (once; cached in {path.parent})"):
            module = wasmtime.Module.from_file(engine, str(wasm))
        atomic_write(path, module.serialize())  # all or nothing, on disk; no temporary left on error
    return module


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with open(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say("another process is compiling the guest; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def _progress(label: str) -> Iterator[None]:
    """Say on stderr what is being done, then how long it has taken so far
    every few seconds (compiling is one call that reports nothing itself)."""
    start = time.monotonic()
    done = threading.Event()

    def tick() -> None:
        while not done.wait(PROGRESS_EVERY_S):
            _say(f"... still compiling, {time.monotonic() - start:.0f} s so far")

    _say(label)
    ticker = threading.Thread(target=tick, name="wasmrun-compile-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
    _say(f"compiled in {time.monotonic() - start:.1f} s")


def _say(message: str) -> None:
    print(f"wasmrun: {message}", file=sys.stderr, flush=True)

