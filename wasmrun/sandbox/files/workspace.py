"""A run's writable folders (/workspace, /tmp) and their one quota, and the folders recycled between runs.

The WASI guards (wasi_guard.py) charge every call that may allocate disk
against `Workspace` before making it; the engine takes a run folder from
`WorkspaceDirs` for each run and gives it back emptied after its teardown.
"""

from __future__ import annotations

import itertools
import logging
import os
from pathlib import Path

from wasmrun import dirtree
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.blobaccess import BlobAccess
from wasmrun.sandbox.files import diskuse

logger = logging.getLogger("wasmrun.sandbox")


class Workspace:
    """One run's writable folders and their shared quota: `path` is mounted
    at /workspace and `tmp` at /tmp, both inside the run's host folder `root`;
    both are emptied after the run. `started_from`: the /workspace this one began as a
    copy of, files' times kept (a session's, at the version the run starts from), None
    when it began empty.

    The quota bounds the files' sizes, or the disk the host allocates for
    them where more (see diskuse), and every call that may add to either goes
    through `charge` first with the most it can add, so the check comes before
    the write: `write_bound` for the blocks of bytes written anywhere in a
    file (at most one more than their length covers), plus how far a write,
    allocation or truncate past the end grows the file (the wasi guards).
    While the estimate stays under the quota nothing is measured; when it would
    pass it, the disk is measured for real, and only a real excess stops the
    run (`WorkspaceQuotaExceeded`)."""

    def __init__(
        self, root: Path, max_bytes: int, max_files: int, block: int = 4096, started_from: Path | None = None,
        empty: Path | None = None,
    ) -> None:
        self.root = root
        self.started_from = started_from
        self.path = root / "workspace"
        self.tmp = root / "tmp"
        self.blobs = root / "blobs"  # the run's input blobs, read-only; not counted
        # A folder that stays empty (its engine's: WorkspaceDirs.empty), mounted read-only
        # where a run has nothing to show there, so that no run makes a folder for nothing.
        self.empty = empty if empty is not None else root / "empty"
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.block = block  # the filesystem's allocation unit
        self.est_bytes = 0
        self.est_files = 0

    def measure(self) -> tuple[int, int]:
        """(bytes allocated, entries) in /workspace and /tmp, open-but-unlinked files included."""
        return diskuse.usage([self.path, self.tmp], self.root)

    def write_bound(self, length: int) -> int:
        """The most a write (or an allocation) of `length` bytes can allocate, at any offset."""
        if length <= 0:
            return 0
        return (-(-length // self.block) + 1) * self.block

    def charge(self, nbytes: int = 0, nfiles: int = 0) -> None:
        if self.est_bytes + nbytes <= self.max_bytes and self.est_files + nfiles <= self.max_files:
            self.est_bytes += nbytes
            self.est_files += nfiles
            return
        used_bytes, used_files = self.measure()
        if used_bytes + nbytes > self.max_bytes:
            raise errors.RunAborted(
                errors.WORKSPACE_QUOTA,
                f"/workspace and /tmp would exceed their quota of {self.max_bytes} bytes"
                " (each file counted at its size, or at the disk it takes where more;"
                " open-but-deleted files included)",
            )
        if used_files + nfiles > self.max_files:
            raise errors.RunAborted(
                errors.WORKSPACE_QUOTA,
                f"/workspace and /tmp would exceed their quota of {self.max_files} files",
            )
        self.est_bytes = used_bytes + nbytes
        self.est_files = used_files + nfiles


class WorkspaceDirs:
    """Run folders (each holding an empty `workspace`, `tmp` and `blobs`),
    recycled between runs.

    A run gets a folder whose subfolders are empty; after the run (and after
    its Store, which holds them open, is closed) everything in them is
    deleted and the folder goes back on the shelf. Creating and removing a
    directory costs more than a short run on some filesystems; emptying one
    that the run did not touch costs a single scandir.
    """

    SUBFOLDERS = ("workspace", "tmp", "blobs")

    def __init__(self, root: Path, extra: tuple[str, ...] = (), kept: tuple[str, ...] = ()) -> None:
        self.root = root  # private to one engine (0700)
        self.subfolders = self.SUBFOLDERS + extra  # extra: e.g. the data image's skills view (images/dataimage.py)
        # Left as they are when a folder is given back: their owner reuses or redoes them (files/skillcopies.py).
        self._emptied = tuple(sub for sub in self.subfolders if sub not in kept)
        self.block = diskuse.block_size(root)  # measured once: the workspaces' allocation unit
        self._serial = itertools.count()
        self._spare: list[Path] = []
        self.empty = root / "empty"  # Workspace.empty: never written (mounted read-only only)
        self.empty.mkdir(mode=0o700, exist_ok=True)

    def take(self) -> Path:
        try:
            return self._spare.pop()
        except IndexError:
            path = self.root / f"run-{next(self._serial)}"
            path.mkdir(mode=0o700)
            for sub in self.subfolders:
                (path / sub).mkdir(mode=0o700)
            return path

    def give_back(self, path: Path) -> None:
        """Empty the run folder `path` (all but its kept subfolders) and shelve it; one that
        cannot be emptied is dropped."""
        try:
            for sub in self._emptied:
                dirtree.empty(path / sub)
        except OSError:
            _remove_quietly(path)
            return
        self._spare.append(path)

    def remove_all(self) -> None:
        for path in self._spare:
            _remove_quietly(path)
        self._spare.clear()
        _remove_quietly(self.empty)  # the engine is closing: no run mounts it any more


def _remove_quietly(path: Path) -> None:
    try:
        dirtree.remove(path)
    except OSError:
        pass  # left for the engine's close, which removes its whole root


def place_input_blobs(blobs: BlobAccess, blob_ids: list[str], folder: Path, owner: str) -> None:
    """Each input blob of `owner` as `folder/<blob id>` (mounted read-only at /blobs):
    a hard link to the store's file (no copy, whatever its size), or a copy where
    the store has no file on this filesystem. Only ids the store finds become names."""
    for blob_id in blob_ids:
        target = folder / blob_id
        if blobs.size(blob_id, owner) is None or target.parent != folder:
            continue
        source = blobs.local_path(blob_id, owner)
        if source is not None:
            try:
                os.link(source, target)
                continue
            except FileExistsError:
                continue
            except OSError:
                pass  # another filesystem: copy
        try:
            size = blobs.size(blob_id, owner) or 0
            with open(target, "wb") as f:
                for offset in range(0, size, 1 << 20):
                    f.write(blobs.read(blob_id, offset, 1 << 20, owner))
        except (OSError, KeyError):
            logger.warning("could not place input blob %s in /blobs", blob_id)
            target.unlink(missing_ok=True)
