"""The C library parts the guest takes from wasi-libc instead of zig's own.

zig 0.17 replaces two pieces of wasi-libc with its own Zig code, and both
cost the guest its fidelity to CPython:

- malloc: zig's single-threaded wasm allocator rounds every block up to a
  power of two, never splits or merges free blocks and keeps each size in
  its own list. CPython's parser and compiler allocate blocks of every size
  (the PEG parser's memo and arena, pymalloc's 256 KiB arenas), so parsing
  grew super-linearly (16,000 statements: 3.5x the time of 8,000) and one xz
  compressor held ~176 MiB. wasi-libc's dlmalloc (what the official CPython
  WASI build uses) is linked instead.
- libm: zig's ports of log2/log10 lose the low word of a subnormal argument
  (math.log2(1e-308) was 2.7 million ulps off) and its cbrt is up to 3 ulps
  off. musl's own functions, as wasi-libc ships them, are linked instead.

Our objects are strong definitions; zig's are weak, so the linker takes ours.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from python_wasm import downloads, native

WASI_LIBC_SRC = downloads.Download(
    "wasi-libc 0.0~git20220510.9886d3d (Debian bookworm source)",
    "wasi-libc_0.0~git20220510.9886d3d.orig.tar.xz",
    "8f9b802736a856942839d32966937c389f46e9f156415a549a6675b7535e5f74",
    1,
    debian_source="wasi-libc",
)
ROOT = "wasi-libc-0.0~git20220510.9886d3d"
MUSL = f"{ROOT}/libc-top-half/musl"
# Every double-precision function zig implements itself (compiler_rt and
# lib/c/math.zig) that CPython calls, with musl's helpers and tables that
# zig's libc does not already take from musl.
LIBM_FILES = tuple(
    f"{MUSL}/src/math/{name}.c"
    for name in (
        "log", "log_data", "log2", "log2_data", "log10", "log1p", "exp", "exp2", "exp10",
        "cbrt", "acos", "asin", "atan", "cosh", "tanh", "sin", "cos", "tan", "sincos",
        "__sin", "__cos", "__tan", "__rem_pio2", "frexp", "modf", "hypot", "fmod",
    )
)
# String functions zig implements itself. Its strchr measures the whole rest
# of the string before searching it: CPython's tokenizer finds each line of a
# source string with strchr, so parsing was quadratic in the source's size
# (ast.parse of 16,000 lines: 1.9 s against 0.28 s with musl's).
STRING_FILES = tuple(
    f"{MUSL}/src/string/{name}.c"
    for name in (
        "memchr", "memrchr", "memmem", "memccpy", "mempcpy", "strlen", "strnlen", "strchr", "strchrnul",
        "strrchr", "strcmp", "strncmp", "strcpy", "strncpy", "stpcpy", "stpncpy", "strcat", "strncat",
        "strspn", "strcspn", "strpbrk", "strstr",
    )
)
DLMALLOC = f"{ROOT}/dlmalloc/src/dlmalloc.c"
FIXES = native.NATIVE_DIR / "libc_fixes.c"
FLAGS = ("-fno-trapping-math",)
LIBM_INCLUDES = (f"{MUSL}/src/include", f"{MUSL}/src/internal", f"{MUSL}/arch/wasm32", f"{MUSL}/arch/generic",
                 f"{ROOT}/libc-top-half/headers/private")
RECIPE = "1"


def inputs() -> str:
    """What the compiled objects depend on (part of the guest's key)."""
    recipe = (RECIPE, WASI_LIBC_SRC.sha256, LIBM_FILES, STRING_FILES, DLMALLOC, FLAGS, native.CFLAGS)
    return repr(recipe) + FIXES.read_text()


def objects(zig: Path, progress: downloads.Progress) -> list[Path]:
    """dlmalloc, musl's libm and string functions and libc_fixes.c for
    wasm32-wasi, compiled (cached by their inputs)."""
    key = hashlib.sha256((inputs() + downloads.ZIGLANG.sha256).encode()).hexdigest()[:16]
    final = downloads.cache_root() / "native" / f"libc-{key}"
    if (final / "done").exists():
        downloads.mark_used(final)
        return sorted(final.glob("*.o"))
    tarball = downloads.fetch(WASI_LIBC_SRC, progress)
    progress.step("compile wasi-libc's dlmalloc and musl's libm and string functions")
    tmp = Path(tempfile.mkdtemp(dir=downloads._private_dir(final.parent)))
    src = tmp / "src"
    wanted = (f"{ROOT}/dlmalloc/", f"{MUSL}/src/math/", f"{MUSL}/src/string/", f"{MUSL}/include/",
              *(f"{d}/" for d in LIBM_INCLUDES))
    native._extract(tarball, src, wanted)
    libm_flags = tuple(f"-I{src / d}" for d in LIBM_INCLUDES)
    jobs: list[tuple[Path, tuple[str, ...]]] = [(src / DLMALLOC, (f"-I{src / ROOT / 'dlmalloc/include'}",))]
    jobs += [(src / f, libm_flags) for f in LIBM_FILES + STRING_FILES]
    jobs.append((FIXES, ()))
    env = native._zig_env()
    same_paths = (f"-ffile-prefix-map={src}=/src",)
    for c_file, flags in jobs:
        obj = tmp / f"libc_{c_file.stem}.o"
        cmd = [str(zig), "cc", *native.CFLAGS, *FLAGS, *same_paths, *flags, "-c", str(c_file), "-o", str(obj)]
        subprocess.run(cmd, check=True, env=env)
    shutil.rmtree(src)
    (tmp / "done").write_text("")
    downloads._atomic_replace_dir(tmp, final)
    return sorted(final.glob("*.o"))
