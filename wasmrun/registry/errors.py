"""What the registry refuses, in its own terms: each error names the field of the
request it came from (`field`), and the protocol layer (protocol/skills.py
`registry_errors`) turns it into the JSON-RPC error a client sees."""

from __future__ import annotations


class RegistryError(Exception):
    def __init__(self, message: str, field: str | None = None, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
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
