"""Compiled bytecode of mounted skills, kept between runs.

/skills is read-only, so every run used to compile a skill's modules from
source again (about 20 ms for a skill of a few modules). Instead, the first
run of a skill version is preceded by a *compile run*: a fresh sandbox in
which our own guest code compiles (never executes) the skill's .py files into
a writable folder. Later runs mount that folder read-only at
/pycache/skills/<name>, where the guest's import system (sys.pycache_prefix)
finds it, and CPython checks each .pyc against its source's size and mtime.

The host never compiles skill code itself, and no run that executes code can
write to a cache: a run only ever sees its skills' caches read-only.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from wasmrun import dirtree
from wasmrun.sandbox.contract.types import MountedSkill
from wasmrun.sandbox.files.skillstamp import SkillStamp

GUEST_PREFIX = "/pycache"


def guest_dir(skill_name: str) -> str:
    """Where a skill's bytecode appears in the guest (mirrors its /skills path)."""
    return f"{GUEST_PREFIX}/skills/{skill_name}"


class BytecodeCache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)

    def lookup(self, skill: MountedSkill, stamp: SkillStamp) -> tuple[str, Path | None]:
        """The cache key (the skill as the run's `stamp` of it names it, files/skillstamp.py:
        a changed file is a new key) and the folder holding the skill's bytecode, if compiled."""
        key = f"{skill.name}-{stamp.digest[:24]}"
        folder = self.root / key
        return key, folder if folder.is_dir() else None

    def staging(self) -> Path:
        return Path(tempfile.mkdtemp(prefix=".staging-", dir=self.root))

    def commit(self, key: str, staging: Path) -> Path:
        """Publish a compiled folder under `key` in one rename; if another
        process got there first, theirs is kept."""
        final = self.root / key
        try:
            os.rename(staging, final)
        except OSError:
            self.discard(staging)
        return final

    def discard(self, staging: Path) -> None:
        try:
            dirtree.remove(staging)  # any depth: it mirrors the skill's tree
        except OSError:
            pass
