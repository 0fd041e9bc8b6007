"""What the registry refuses, in its own terms: each error says which input of the
registry call is at fault (`part`: the manifest, the SKILL.md text, one of a new
skill's files, or the path asked for), and the protocol layer (protocol/skills.py
`rpc_error`) turns it into the JSON-RPC error a client sees, naming the field of
the request that input came from."""

from __future__ import annotations

import enum


class Part(enum.Enum):
    """The input of a registry call an error is about."""

    MANIFEST = "manifest"  # the skill's manifest (skill.toml), or the skill as a whole
    SKILL_MD = "skill_md"  # the SKILL.md text of a skill to create
    FILE = "file"  # one of the files of a skill to create (`file_index` says which)
    PATH = "path"  # the path of a file asked for, or the folder a skill is added from


class RegistryError(Exception):
    def __init__(
        self, message: str, part: Part | None = None, *, file_index: int | None = None,
        problems: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.part = part
        self.file_index = file_index  # with Part.FILE: its place in the list of files
        self.problems = problems


class SkillAlreadyExists(RegistryError):
    """That owner has that name and version already (created meanwhile elsewhere too)."""


class InvalidSkillFiles(RegistryError):
    """A skill to create (its manifest, SKILL.md or files) is not valid; `problems` lists why."""


class UnsafeSkillPath(RegistryError):
    """A path that could leave the skill's folder, or that no file system would take."""


class SkillFileMissing(RegistryError):
    """No readable file at that path of the skill."""


class SkillFileTooLarge(RegistryError):
    """A file above the read limit."""


class SkillUnavailable(RegistryError):
    """A skill's files cannot be had right now (a cached copy evicted and its bundle out
    of reach, the object store not answering): worth trying again."""


class SkillDamaged(RegistryError):
    """A skill that exists but cannot be served: its stored bundle is gone, or its bytes
    do not match the hash recorded when it was created (never unpacked, never mounted)."""
