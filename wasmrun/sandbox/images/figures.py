"""A run's figures: the pictures (PNG, SVG) a data-image run left at the top of its /workspace,
stored as blobs of the run's owner and listed in its result (`RunResult.images`, the wire's name).

In a session, a run's /workspace began as a copy of the session's (`Workspace.started_from`):
a picture an earlier run left there, unchanged, is not returned again.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from wasmrun.blobs.quota import BlobQuotaExceeded
from wasmrun.sandbox.contract.blobaccess import BlobAccess
from wasmrun.sandbox.contract.types import Figure, RunRequest, RunResult
from wasmrun.sandbox.files.workspace import Workspace

FIGURE_KINDS = {".png": "image/png", ".svg": "image/svg+xml"}
MAX_FIGURES = 16


def add_figures(result: RunResult, workspace: Workspace, request: RunRequest, blobs: BlobAccess) -> None:
    """The PNG and SVG files at the top of the run's /workspace (plt.savefig there, or
    plt.show()) stored as blobs of the run's owner and named in `result.images` (and
    `output_blobs`): regular files only (no symlink is followed), at most MAX_FIGURES,
    together within the run's blob I/O budget. One that does not fit is left out,
    with a line in the run's logs; the run still completes. In a session, only the
    pictures this run wrote: one an earlier run left in /workspace is not returned again."""
    earlier = workspace.started_from
    with os.scandir(workspace.path) as entries:
        files = sorted(
            (e for e in entries if e.is_file(follow_symlinks=False) and Path(e.name).suffix.lower() in FIGURE_KINDS
             and not (earlier is not None and _left_by_earlier_run(e, earlier))),
            key=lambda e: e.name,
        )
    budget = request.limits.blob_io_bytes - result.usage.blob_io_bytes
    notes = []
    for entry in files[:MAX_FIGURES]:
        kind = FIGURE_KINDS[Path(entry.name).suffix.lower()]
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                data = f.read(budget + 1)
            if len(data) > budget:
                notes.append(f"{entry.name}: not returned, over the run's blob I/O budget")
                continue
            blob = blobs.create(data, kind, run_id=result.run_id, owner=request.owner, quota=request.blob_quota)
        except BlobQuotaExceeded as exc:
            notes.append(f"{entry.name}: not returned ({exc.message})")
            continue
        except (OSError, ValueError):
            notes.append(f"{entry.name}: not returned (unreadable)")
            continue
        budget -= len(data)
        result.usage.blob_io_bytes += len(data)
        if blob not in result.output_blobs:
            result.output_blobs.append(blob)
        result.images.append(Figure(blob_id=blob, kind=kind, name=entry.name))
    if len(files) > MAX_FIGURES:
        notes.append(f"{len(files) - MAX_FIGURES} more images not returned (at most {MAX_FIGURES} per run)")
    if notes:
        result.logs += "".join(f"wasmrun: {note}\n" for note in notes)


def _left_by_earlier_run(entry: os.DirEntry[str], earlier: Path) -> bool:
    """Whether `entry` is the file of that name the session's /workspace held before
    this run (the run's folder began as a copy of it, times kept): same size, same
    modification time, same bytes."""
    try:
        before = os.stat(earlier / entry.name, follow_symlinks=False)
        now = entry.stat(follow_symlinks=False)
        if not stat.S_ISREG(before.st_mode) or (before.st_size, before.st_mtime_ns) != (now.st_size, now.st_mtime_ns):
            return False
        with open(earlier / entry.name, "rb") as old, open(entry.path, "rb") as new:
            return old.read() == new.read()
    except OSError:
        return False
