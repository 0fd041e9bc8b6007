"""The data image's skill copies: each skill version's files copied once, for runs' /skills views.

The data image's mount points are baked into its memory (dataimage.py), so a run
sees its skills through one /skills folder of its own: a folder per mounted
skill, its files hard links. Linked straight to the skill's own files, every
run changed them: making or removing a hard link sets a file's ctime, which
is part of the name of a skill's version (its stamp, skillstamp.py) in the key of
its pages (skillpages.pages_key). No skill's pages ever matched (each run
asked for a new one: a background import run per run), and each run touched
the operator's files. So a run's view links to a copy of the skill, made here
once per version (the skill as its stamp names it now: a changed file is a new
copy) in the engine's own folder; the skill's own files are only read.

A copy holds what the skill's stamp (files/skillstamp.py) lists: its regular files and
folders only (a symbolic link could point anywhere on the host; a FIFO could block), as
the views did, each opened one folder at a time without following a link (a link put
in place of a folder or file since the stamp is not followed either). The copy's key is
the stamp's digest, taken once per run for the pages key too: no walk of its own, and
bounded as the stamp is. Kept in an LRU bounded by count and bytes; the engine's close
removes the folder.

A view is kept between the runs of its run folder (WorkspaceDirs leaves it,
images.py): the next run that mounts the same skills, as they are now, finds
it made (making one is a `mkdir` per folder and a link per file, and its
removal as many calls at teardown; a `mkdir` took ~1 ms on a loaded box). A
view's links hold its copy's files, so a copy evicted meanwhile leaves it
whole. A view is known by its folder's identity (device, inode, ctime: a
folder removed and made again at that path is another), so a session's view
folders, made per run, are linked afresh. A run with no skills mounts one
empty folder instead of its run folder's view.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import stat
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

from wasmrun import dirtree
from wasmrun.sandbox.contract.types import MountedSkill
from wasmrun.sandbox.files.skillstamp import MAX_SKILL_BYTES, SkillStamp, SkillTooLarge, stamp_skills

logger = logging.getLogger("wasmrun.sandbox")

MAX_COPIES = 32
MAX_COPY_BYTES = 1 << 30  # all copies together; the newest is kept whatever its size
MAX_VIEWS = 1_024  # views remembered as made; a forgotten one is made again


class SkillCopies:
    """Copies of skills under `root` (private to one engine), and runs' views linked to them."""

    def __init__(self, root: Path, max_copies: int = MAX_COPIES, max_bytes: int = MAX_COPY_BYTES) -> None:
        self.root = root
        self.max_copies = max_copies
        self.max_bytes = max_bytes
        self._copies: OrderedDict[str, tuple[Path, int]] = OrderedDict()  # key -> (folder, bytes)
        self._bytes = 0
        self._serial = itertools.count()
        # view folder -> (its identity, the copies it links to), most recently used last
        self._views: OrderedDict[Path, tuple[tuple[int, int, int], tuple[tuple[str, Path], ...]]] = OrderedDict()
        # Held while a view links to a copy: eviction never removes one being linked.
        self._lock = threading.Lock()

    def mount(
        self, skills: list[MountedSkill], view: Path, stamps: Mapping[MountedSkill, SkillStamp] | None = None
    ) -> Path:
        """The folder to mount at /skills for a run of `skills` (`stamps`: each one's, taken
        for this run): one empty folder when there are none, else `view` holding them (see `link`)."""
        if not skills:
            empty = self.root / "empty"
            if not empty.is_dir():
                self.root.mkdir(mode=0o700, exist_ok=True)
                empty.mkdir(mode=0o700, exist_ok=True)
            return empty
        self.link(skills, view, stamps)
        return view

    def link(
        self, skills: list[MountedSkill], view: Path, stamps: Mapping[MountedSkill, SkillStamp] | None = None
    ) -> None:
        """`view/<name>/...` for each skill, its files hard links to the skill's copy: left as
        it is when it holds exactly these copies already, else emptied and made anew. `stamps`:
        the run's (a skill missing from them is stamped here; SkillTooLarge past a bound)."""
        view.mkdir(mode=0o700, exist_ok=True)
        stamps = stamps or {}
        with self._lock:
            wanted: dict[str, Path] = {}
            for skill in skills:
                if _one_name(skill.name) and skill.name not in wanted:
                    found = stamps.get(skill) or stamp_skills([skill])[skill]
                    wanted[skill.name] = self._copy_of(skill, found)
            linked = tuple(wanted.items())
            known = self._views.pop(view, None)
            if known is not None and known == (_identity(view), linked):
                self._views[view] = known
                return
            dirtree.empty(view)
            for name, copy in linked:
                _link_tree(copy / COPY_NAME, view / name)
            self._views[view] = (_identity(view), linked)
            while len(self._views) > MAX_VIEWS:
                self._views.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._copies)

    def _copy_of(self, skill: MountedSkill, stamp: SkillStamp) -> Path:
        """The copy of the skill as its stamp names it, made if missing (the lock is held)."""
        key = stamp.digest
        found = self._copies.get(key)
        if found is not None:
            self._copies.move_to_end(key)
            return found[0]
        self.root.mkdir(mode=0o700, exist_ok=True)
        folder = self.root / f"copy-{next(self._serial)}"
        try:
            folder.mkdir(mode=0o700)
            size = _copy_stamped(Path(skill.root), folder / COPY_NAME, skill.name, stamp)
        except BaseException:
            _remove_quietly(folder)
            raise
        self._copies[key] = (folder, size)
        self._bytes += size
        while len(self._copies) > 1 and (len(self._copies) > self.max_copies or self._bytes > self.max_bytes):
            _, (old, old_size) = self._copies.popitem(last=False)
            self._bytes -= old_size
            _remove_quietly(old)
        return folder


COPY_NAME = "skill"  # a copy's folder holds the skill's tree under this name


def _identity(folder: Path) -> tuple[int, int, int]:
    st = folder.stat()
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _one_name(name: str) -> bool:
    """A name that stays one entry inside the view (the registry allows no other; checked again here)."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def _copy_stamped(source: Path, target: Path, name: str, stamp: SkillStamp) -> int:
    """The folders and regular files `stamp` lists under `source` copied to `target` (made
    here); their bytes. A file that is no longer a regular file, or cannot be read, is left
    out with a log line; past MAX_SKILL_BYTES in all (files grown since the stamp), SkillTooLarge."""
    target.mkdir(mode=0o700)
    for folder in stamp.folders:
        (target / folder).mkdir(mode=0o700)
    copied = 0
    try:
        root = os.open(source, _ROOT_FLAGS)  # the registry's folder: a link to it is the registry's choice
    except OSError:
        logger.warning("skill %s: its folder is not readable; its mount is empty", name)
        return 0
    try:
        for rel in stamp.files:
            try:
                fd = _open_beneath(root, rel)
            except OSError:
                logger.warning("skill %s: %r is not readable; left out of its mount", name, rel)
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    copied += _copy_bounded(fd, target / rel, MAX_SKILL_BYTES - copied, name)
            finally:
                os.close(fd)
    finally:
        os.close(root)
    return copied


_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_DIR_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW
# O_NONBLOCK, O_NOCTTY: a FIFO or device put in a file's place since the stamp neither blocks the open nor becomes ours.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _open_beneath(root: int, rel: str) -> int:
    """`rel` opened under the folder `root`, one component at a time, following no link."""
    *folders, last = rel.split("/")
    fd = root
    try:
        for part in folders:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            if fd != root:
                os.close(fd)
            fd = inner
        return os.open(last, _FILE_FLAGS, dir_fd=fd)
    finally:
        if fd != root:
            os.close(fd)


def _copy_bounded(fd: int, target: Path, room: int, name: str) -> int:
    """The file `fd` copied to `target`; its bytes, SkillTooLarge past `room`."""
    written = 0
    with open(target, "xb") as out:
        while chunk := os.read(fd, 1 << 20):
            written += len(chunk)
            if written > room:
                raise SkillTooLarge(name, f"more than {MAX_SKILL_BYTES >> 20:,} MiB of files")
            out.write(chunk)
    return written


def _link_tree(source: Path, target: Path) -> None:
    """`target` made with `source`'s folders, its files hard links to `source`'s (both ours)."""
    for folder, _dirs, files in os.walk(source, followlinks=False):
        rel = Path(folder).relative_to(source)
        (target / rel).mkdir(mode=0o700)
        for file in files:
            try:
                os.link(Path(folder) / file, target / rel / file, follow_symlinks=False)
            except OSError:  # (a filesystem without hard links)
                shutil.copyfile(Path(folder) / file, target / rel / file, follow_symlinks=False)


def _remove_quietly(path: Path) -> None:
    try:
        dirtree.remove(path)
    except OSError:
        pass  # left for the engine's close, which removes its whole root
