"""A session's state on disk, one folder per version (the layout: run.py's docstring).

    <folder>/v<N>/memory[, memory.delta]   its pages (pages.py)
    <folder>/v<N>/workspace/, tmp/         its folders

Read by the session stores (staging, forking, removing versions) and by a session run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from wasmrun import dirtree
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.files import diskuse
from wasmrun.sandbox.images.names import image_name
from wasmrun.sandbox.sessions import pages

FOLDERS = ("workspace", "tmp")
# The pages' files of a version: the base first (a fork hard-links it), then its delta.
MEMORY_FILES = (pages.BASE, pages.DELTA)


def version_dir(folder: Path, version: int) -> Path:
    return folder / f"v{version}"


def image_of(request: RunRequest) -> str | None:
    """The image a session run must run on: the one that made its session's memory
    (None: not a session run, or the session's first, which any image can run)."""
    if request.session is None:
        return None
    made_by = pages.made_by(version_dir(Path(request.session.folder), request.session.version))
    return image_name(made_by) if made_by else None


def files_size(version: Path) -> int:
    """What a version's files count against `session_bytes`: each at its size, or
    at its blocks where more (as the workspace quota counts them, diskuse)."""
    return diskuse.usage([version / name for name in FOLDERS], None)[0]


def stage(current: Path, following: Path, run_only: tuple[str, ...]) -> None:
    """Version N+1's folders, as copies of N's (an earlier run's leftovers gone),
    and the empty `run_only` folders this run mounts."""
    if current.name != "v0" and not current.is_dir():
        raise FileNotFoundError(f"session state {current} is missing")  # never run it from a blank state
    discard(following)
    following.mkdir(mode=0o700)
    for name in FOLDERS:
        _copy_folder(current / name, following / name)
    for name in run_only:
        (following / name).mkdir(mode=0o700)


def _copy_folder(source: Path, target: Path, link: bool = False) -> None:
    """`source`'s tree at `target` (symbolic links copied as links, never
    followed); `link`: its files hard-linked rather than copied."""
    try:
        with os.scandir(source) as entries:
            empty = next(entries, None) is None
    except FileNotFoundError:
        empty = True
    if empty:
        target.mkdir(mode=0o700)
    else:
        shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy if link else copy_sparse)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        copy_sparse(source, target)


def copy_sparse(source: str, target: str) -> str:
    """`source` copied to `target` with its holes left holes (SEEK_DATA/SEEK_HOLE):
    a sparse file costs its data, not its size, in the copy's disk and time."""
    if os.path.islink(source):
        os.symlink(os.readlink(source), target)
        return target
    with open(source, "rb") as src, open(target, "xb") as dst:
        size = os.fstat(src.fileno()).st_size
        position = 0
        while position < size:
            try:
                data = os.lseek(src.fileno(), position, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            hole = os.lseek(src.fileno(), data, os.SEEK_HOLE)
            src.seek(data)
            dst.seek(data)
            left = hole - data
            while left > 0:
                chunk = src.read(min(left, 1 << 20))
                if not chunk:
                    break
                dst.write(chunk)
                left -= len(chunk)
            position = hole
        dst.truncate(size)
    shutil.copystat(source, target, follow_symlinks=False)
    return target


def discard(path: Path) -> None:
    if path.exists():
        dirtree.remove(path)


def copy_version(source: Path, target: Path) -> None:
    """A fork: every file hard-linked, none copied. A version's files are never
    changed in place once it is recorded: each run works on copies (`stage`),
    so the two sessions' next runs each copy them before writing."""
    target.mkdir(mode=0o700)
    pages.copy(source, target)
    for name in FOLDERS:
        _copy_folder(source / name, target / name, link=True)
