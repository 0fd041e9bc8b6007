"""The stdlib image: our CPython 3.11 guest (python_wasm), on a pooling-allocator engine.

The pre-initialised guest (python_wasm/snapshot.py) is entered through its
`wasmrun_run` export, with the request in and the reply out of its static
buffers (bridge.c) when they fit, else by host call. Its mounts: /lib, the
run's skills, their bytecode, the operator's package layer, /workspace, /tmp,
/home/user (/workspace again), /blobs and a read-only `/` (guestroot.py).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import wasmtime

from python_wasm import build as guest_build
from python_wasm import downloads
from python_wasm.exports import func, func_imports, memory
from wasmrun.abi import AZURE_DATA, BLOBS, GUEST_LIB, IMPORT_MODULE, SKILLS_ROOT, TMP, USER_HOME, WORKSPACE, Export
from wasmrun.sandbox.budget.wasi_guard import define_guarded_wasi
from wasmrun.sandbox.contract.limits import CEILING_LIMITS
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.files.packagelayer import PackageLayer
from wasmrun.sandbox.guest.hostcalls import HOST_FUNCTIONS, GuestBuffers, RunContext
from wasmrun.sandbox.guest.wasmtime_internals import FastFunc, set_async_stack_size, use_pooling_allocator
from wasmrun.sandbox.images import compiled
from wasmrun.sandbox.images.image import Image, Mounts
from wasmrun.sandbox.memory.bytecode import guest_dir as bytecode_guest_dir
from wasmrun.sandbox.memory.instances import Fresh

# Instances alive at once in one engine: spares, runs in flight and used ones
# awaiting teardown (bounded in instances.py) fit well within this.
POOL_SLOTS = 128
DECOMMIT_BATCH = 16
# The stack compiled wasm code may use on the thread that runs it. wasmtime's
# default (512 KiB) ended runs with a StackOverflow trap where CPython's own
# limits (the parser's nesting bound, the recursion limit, the compiler's 3x of
# it) raise a catchable MemoryError or RecursionError: those need about
# 1 MiB; this leaves room for C recursion through extension modules.
WASM_STACK_BYTES = 4 << 20
ENGINE_SETTINGS = f"fuel=0;epoch=1;pool={POOL_SLOTS};stack={WASM_STACK_BYTES}"

# Typical runs: the pages any of them writes are copied into every spare instance ahead.
WARMUP_REQUESTS = (
    RunRequest(kind="code", code="def main(args):\n    print('warm')\n    return args", args_json=b'{"x":[1]}'),
    RunRequest(
        kind="code",
        code=(
            "import csv, io, json, re\n"
            "def main(args):\n"
            "    rows = list(csv.reader(io.StringIO('a,b\\n1,2\\n')))\n"
            "    return json.loads(json.dumps({'rows': rows, 'n': len(re.findall(r'\\w+', 'x y'))}))\n"
        ),
    ),
    RunRequest(kind="code", code="def main(args):\n    raise ValueError('warm')"),
)


def engine_config() -> wasmtime.Config:
    config = wasmtime.Config()
    # CPU is measured by the run thread's clock, not fuel (see watchdog.py).
    config.epoch_interruption = True
    set_async_stack_size(config, WASM_STACK_BYTES + (1 << 20))
    config.max_wasm_stack = WASM_STACK_BYTES
    # Instances in pre-reserved slots, their memory reset in batches. Measured here
    # against the default allocator: instantiate, run and teardown together take
    # about 11% less (a slot keeps its mappings; freeing used pages is batched).
    use_pooling_allocator(config, POOL_SLOTS, CEILING_LIMITS.memory_bytes, DECOMMIT_BATCH)
    return config


def load_module(engine: wasmtime.Engine, wasm: Path) -> wasmtime.Module:
    """`wasm` compiled for an engine made by `engine_config`, from the cache when it is there."""
    return compiled.load_module(engine, wasm, ENGINE_SETTINGS)


def precompile(guest: guest_build.Guest | None = None) -> Path:
    """Compile the guest ahead of the first run (server start, `wasmrun warm`); returns the cached file."""
    guest = guest or guest_build.ready_guest(quiet=False)
    path = precompiled_path(guest)
    if not path.exists():  # (a cached module is not loaded to check it: each worker loads it, 0.2 s)
        load_module(wasmtime.Engine(engine_config()), guest.snapshot_wasm)
    return path


def precompiled_path(guest: guest_build.Guest) -> Path:
    """Where the cache keeps the guest's compiled module (there or not)."""
    return compiled.cached_path(guest.snapshot_wasm, ENGINE_SETTINGS)


def precompiled_state(guest: guest_build.Guest) -> tuple[Path, str | None]:
    """The guest's compiled-module file, and None if it is ready to load, else
    why not (never compiles; `wasmrun doctor` asks)."""
    path = precompiled_path(guest)
    if not path.exists() and compiled.shipped_path(path).is_file():
        path = compiled.shipped_path(path)  # a one-file executable's: loaded when this CPU can
    try:
        if compiled.deserialize(wasmtime.Engine(engine_config()), path) is None:
            return path, "not compiled yet"
    except wasmtime.WasmtimeError as exc:
        reason = str(exc).partition("\n")[0]
        return path, f"compiled for another CPU or damaged ({reason})"
    return path, None


class StdlibImage(Image):
    compiles_skills = True
    makes_skill_pages = True
    warmup = WARMUP_REQUESTS
    wasm_stack_bytes = WASM_STACK_BYTES

    def __init__(self, guest: guest_build.Guest | None = None, packages: Path | None = None) -> None:
        self.guest = guest or guest_build.ready_guest()
        # The operator's package layer for this guest's Python (wasmrun/packages), if any.
        self.python_tag = self.guest.python_tag
        self.packages = PackageLayer.for_engine(packages, self.python_tag)
        if not self.guest.packaged:
            downloads.mark_used(self.guest.folder)
        self.engine = wasmtime.Engine(engine_config())
        self.module = load_module(self.engine, self.guest.snapshot_wasm)
        self.linker = wasmtime.Linker(self.engine)
        define_guarded_wasi(self.engine, self.linker, self.module)
        for name, ty in func_imports(self.module, IMPORT_MODULE).items():
            self.linker.define_func(IMPORT_MODULE, name, ty, HOST_FUNCTIONS[name], access_caller=True)
        self._pre = self.linker.instantiate_pre(self.module)
        run_export = self.module.exports[[e.name for e in self.module.exports].index(Export.RUN)]
        assert isinstance(run_export.type, wasmtime.FuncType)
        self._run_type = run_export.type
        self.buffers = self._probe_buffers()

    def _probe_buffers(self) -> GuestBuffers:
        """Where the guest's static buffers live: the same addresses in every
        instance of this module, so asked once."""
        store = wasmtime.Store(self.engine)
        store.set_epoch_deadline(1 << 30)
        store.set_wasi(wasmtime.WasiConfig())
        exports = self._pre.instantiate(store).exports(store)
        found = GuestBuffers(*(func(exports, f"wasmrun_{name}")(store) for name in GuestBuffers._fields))
        store.close()
        return found

    def new_instance(self) -> Fresh:
        store = wasmtime.Store(self.engine)
        exports = self._pre.instantiate(store).exports(store)
        run = func(exports, Export.RUN)
        # Called through FastFunc: wasmtime-py's Func.__call__ rebuilds and checks the
        # function's type on every call (about 0.1 ms of a hello run here).
        return Fresh(store, FastFunc(run, self._run_type), memory(exports), interrupt=func(exports, Export.INTERRUPT))

    def enter(self, fresh: Fresh, ctx: RunContext) -> None:
        store, io = fresh.store, self.buffers
        request_len = -1  # too large for the buffer: the guest asks by host call
        if len(ctx.request_bytes) <= io.io_capacity:
            fresh.memory.write(store, ctx.request_bytes, io.io_buffer)
            request_len = len(ctx.request_bytes)
        response_len = fresh.run(store, request_len)
        if 0 <= response_len <= io.io_capacity:  # else it replied by host call (or not at all)
            ctx.response = bytes(fresh.memory.read(store, io.io_buffer, io.io_buffer + response_len))

    def preopens(self, mounts: Mounts) -> tuple[wasmtime.WasiConfig, frozenset[int]]:
        request, workspace = mounts.request, mounts.workspace
        wasi = wasmtime.WasiConfig()
        plain: set[int] = set()
        fds = itertools.count(3)  # WASI numbers preopens from fd 3 in the order they are given
        guest_paths: list[str] = []

        def preopen(host: str, guest: str, *, mutable: bool, may_hold_specials: bool = False) -> None:
            fd = next(fds)
            if not may_hold_specials:
                plain.add(fd)
            wasi.preopen_dir(host, guest, fs_mutable=mutable)
            guest_paths.append(guest)

        # Order matters only for fd numbers; the guest re-scans preopens every run.
        preopen(str(self.guest.lib_dir), GUEST_LIB, mutable=False)
        for skill in request.skills:
            preopen(skill.root, f"{SKILLS_ROOT}/{skill.name}", mutable=False, may_hold_specials=True)
        for name, folder in mounts.bytecode.items():
            preopen(str(folder), bytecode_guest_dir(name), mutable=mounts.bytecode_writable)
        for host, guest in PackageLayer.mounts(mounts.packages):
            preopen(host, guest, mutable=False)
        preopen(str(workspace.path), WORKSPACE, mutable=True)
        preopen(str(workspace.tmp), TMP, mutable=True)
        preopen(str(workspace.path), USER_HOME, mutable=True)  # the same folder (abi.USER_HOME)
        preopen(str(workspace.path), AZURE_DATA, mutable=True)  # and again (abi.AZURE_DATA)
        if request.input_blobs:  # each preopen costs every run a little
            preopen(str(workspace.blobs), BLOBS, mutable=False)
        # Last, so the others keep their fd numbers; see guestroot.py.
        mount_points = (guest_paths[0], SKILLS_ROOT, *guest_paths[1:])
        preopen(str(mounts.roots.for_mounts(mount_points)), "/", mutable=False)
        # No stdout/stderr here: the fd_write guard captures fds 1 and 2 itself
        # (wasmtime-py's custom-output callbacks also panic at interpreter exit).
        return wasi, frozenset(plain)
