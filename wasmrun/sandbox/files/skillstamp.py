"""A mounted skill's version, named once per run and bounded: its stamp.

Three keys name a skill as its files are now: its pages' (memory/skillpages.py),
the data image's copy of it (files/skillcopies.py) and, on the stdlib image, its
compiled bytecode's (memory/bytecode.py). Each once walked the skill's folder
itself, a stat per file each time (on the data image about 0.8 ms of a `text.stats`
run's path under load, the one stamp 0.3 ms; docs/images.md), and the copy's walk had
no bound at all. Now the engine walks each
mounted skill once per run, before it takes an instance, into a SkillStamp; the
run's Mounts carry the stamps to the image, and each key is made from the stamp.

What a stamp names: the skill's name and folder, and every entry below the folder
by its relative path and, for anything but a folder, its identity on this machine
from lstat (device, inode, size, mtime, ctime: ctime is set by the kernel on every
change, and a created skill's files all have mtime 0). A changed, added or removed
file is a new stamp. The regular files and folders it lists are exactly what a copy
of the skill holds.

Symbolic links are never followed: a link is named by its own lstat (pointing it
elsewhere replaces it: a new inode), never by its target's; a folder a link points
to is not walked, its files are not counted, and copies leave links out. A file that
cannot be read is named as such.

Bounds, because a skill's folder is the operator's or a tenant's created skill and
either may be huge or hostile: MAX_SKILL_ENTRIES files and folders, MAX_SKILL_DEPTH
levels, MAX_SKILL_PATH_CHARS characters in a relative path (the registry's own bounds
on the paths a client names) and MAX_SKILL_BYTES of regular files. A created skill
fits (create_skill takes at most 1,000 files, paths of at most 32 segments and 1,024
characters). A skill beyond a bound is refused on every image: the run fails with
`SkillTooLarge` naming the skill and the bound, before any instance is taken. It is not
run without its pages or copy instead: the data image sees skills only through
copies (its mount points are baked into its memory), so what it cannot copy in
bounded work it cannot mount; refusing it on both images keeps one behaviour, and
every run's cost bounded. The walk stops at the first bound it passes.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable

import msgspec

from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.types import MountedSkill, RunError

MAX_SKILL_ENTRIES = 16_384  # files, folders, links (CPython's own Lib/ as a skill: 8,619)
MAX_SKILL_DEPTH = 32  # a file at a/b/c.txt is 3 deep
MAX_SKILL_PATH_CHARS = 1_024
MAX_SKILL_BYTES = 1 << 30  # regular files' sizes together


class SkillStamp(msgspec.Struct, frozen=True):
    """One skill's files as one run found them (see the module docstring)."""

    digest: str  # sha256 hex: the skill's name, folder and every entry's path and identity
    folders: tuple[str, ...]  # relative paths, sorted: a folder before what is in it
    files: tuple[str, ...]  # the regular files' relative paths, sorted
    file_bytes: int  # their sizes together


class SkillTooLarge(Exception):
    """A skill past one of the bounds: the run that mounts it is refused."""

    def __init__(self, skill_name: str, what: str) -> None:
        self.message = (
            f"skill {skill_name} is too large to mount: it has {what}; a run mounts a skill of at most"
            f" {MAX_SKILL_ENTRIES:,} files and folders, {MAX_SKILL_DEPTH} levels deep, paths of"
            f" {MAX_SKILL_PATH_CHARS:,} characters and {MAX_SKILL_BYTES >> 20:,} MiB of files"
        )
        super().__init__(self.message)

    def run_error(self) -> RunError:
        return RunError(errors.SKILL_TOO_LARGE, self.message)


def stamp_skill(skill: MountedSkill) -> SkillStamp:
    """Walk `skill`'s folder once (a loop, not recursion) into its stamp; SkillTooLarge
    as soon as the walk passes a bound."""
    named: list[tuple[str, str]] = []  # (relative path, identity)
    folders: list[str] = []
    files: list[str] = []
    entries = total = 0
    pending = [("", 0)]  # folders still to list: (relative path, its depth)
    while pending:
        folder, depth = pending.pop()
        try:
            with os.scandir(os.path.join(skill.root, folder) if folder else skill.root) as listing:
                found = list(listing)
        except OSError:
            named.append((folder, "unreadable"))
            continue
        for entry in found:
            entries += 1
            path = f"{folder}/{entry.name}" if folder else entry.name
            _check_bounds(skill.name, entries, depth + 1, path)
            try:
                st = None if entry.is_dir(follow_symlinks=False) else entry.stat(follow_symlinks=False)
            except OSError:
                named.append((path, "unreadable"))
                continue
            if st is None:
                folders.append(path)
                pending.append((path, depth + 1))
                named.append((path, "folder"))
                continue
            named.append((path, f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"))
            if stat.S_ISREG(st.st_mode):
                files.append(path)
                total += st.st_size
                if total > MAX_SKILL_BYTES:
                    raise SkillTooLarge(skill.name, f"more than {MAX_SKILL_BYTES >> 20:,} MiB of files")
    h = hashlib.sha256(os.fsencode(f"{skill.name}\0{skill.root}"))
    for path, identity in sorted(named):
        # fsencode: a file's name may be any bytes (invalid UTF-8 comes back as surrogates)
        h.update(b"\0" + os.fsencode(path) + b"\0" + identity.encode())
    return SkillStamp(h.hexdigest(), tuple(sorted(folders)), tuple(sorted(files)), total)


def _check_bounds(skill_name: str, entries: int, depth: int, path: str) -> None:
    if entries > MAX_SKILL_ENTRIES:
        raise SkillTooLarge(skill_name, f"more than {MAX_SKILL_ENTRIES:,} files and folders")
    if depth > MAX_SKILL_DEPTH:
        raise SkillTooLarge(skill_name, f"files or folders more than {MAX_SKILL_DEPTH} levels deep")
    if len(path) > MAX_SKILL_PATH_CHARS:
        raise SkillTooLarge(skill_name, f"a path longer than {MAX_SKILL_PATH_CHARS:,} characters")


def stamp_skills(skills: Iterable[MountedSkill]) -> dict[MountedSkill, SkillStamp]:
    """Each of a run's skills stamped once (SkillTooLarge for the first past a bound)."""
    stamps: dict[MountedSkill, SkillStamp] = {}
    for skill in skills:
        if skill not in stamps:
            stamps[skill] = stamp_skill(skill)
    return stamps
