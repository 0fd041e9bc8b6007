"""What the protocol methods use of a registry (`SkillRegistry`: the folders'
DirectoryRegistry and the shared database's PgSkillRegistry both satisfy it), what
create_skill hands it, and what it refuses a creation for besides its errors
(registry/errors.py): a reserved name, an owner's quota."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from wasmrun.registry.requirements import ProvidePackages
from wasmrun.registry.skill import LEGACY_OWNER, ListingPosition, Page, Skill


class ReservedName(Exception):
    """create_skill for a name the operator's skills use or in the reserved namespace."""


@dataclass(frozen=True)
class SkillQuota:
    max_count: int  # skill versions one owner may create
    max_bytes: int  # the bytes of all their files


class SkillQuotaExceeded(Exception):
    def __init__(self, limit: str, value: int, message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.message = message


@dataclass(frozen=True)
class NewFile:
    path: str
    content: bytes


class SkillRegistry(Protocol):
    """What the protocol methods use of a registry; the folders (DirectoryRegistry)
    and the shared database (database/skills.py PgSkillRegistry) both satisfy it."""

    def skills(self, owner: str | None = None) -> list[Skill]:
        """Every skill version `owner` sees (the operator's and its own), sorted by
        (namespace, name, version descending); owner None: the operator's alone."""

    def page(
        self, owner: str | None, *, namespace: str | None = None, after: ListingPosition | None = None,
        limit: int,
    ) -> Page:
        """Up to `limit` of what `owner` sees, in the order of `skills`: only namespace
        `namespace` and those below it when given, only those after `after` when given."""

    def find(self, name: str, version: str | None = None, owner: str | None = None) -> Skill | None:
        """That version, or the highest one when `version` is None, among what `owner` sees.
        SkillDamaged when it exists but cannot be served, SkillUnavailable when not now."""

    def versions(self, name: str, owner: str | None = None) -> list[str]:
        """The versions of `name` that `owner` sees, highest first."""

    def finds_in_memory(self, name: str, owner: str | None = None) -> bool:
        """Whether `find` and `versions` of `name` for `owner` answer from memory alone;
        otherwise they may wait for a database or an object store, and are called off
        the event loop."""

    def read_file(self, skill: Skill, path: str, max_bytes: int) -> bytes: ...

    def list_files(self, skill: Skill) -> list[str]: ...

    def cached(self, skill: Skill) -> bool:
        """Whether the skill's folder is a cached copy, which a run must `hold`."""

    def hold(self, skills: Sequence[Skill]) -> contextlib.ExitStack:
        """Keep the cached skills' folders (put back if evicted) until the stack closes;
        SkillUnavailable if one cannot be put back."""

    def create(
        self, manifest: dict[str, Any], skill_md: str, files: list[NewFile], owner: str = LEGACY_OWNER,
        quota: SkillQuota | None = None, provide_packages: ProvidePackages | None = None,
    ) -> Skill:
        """Publish a new skill as `owner`'s; the packages it declares that the server lacks
        go to `provide_packages` (requirements.py), or refuse it."""


def check_skill_quota(quota: SkillQuota, count: int, used: Callable[[], int], adding: int) -> None:
    """SkillQuotaExceeded when an owner with `count` skill versions of `used()` bytes
    may not create one more of `adding` bytes."""
    if count + 1 > quota.max_count:
        raise SkillQuotaExceeded(
            "skills", quota.max_count, f"the tenant has created {count} skill versions, its limit (skills)"
        )
    in_use = used()
    if in_use + adding > quota.max_bytes:
        raise SkillQuotaExceeded(
            "skill_bytes", quota.max_bytes,
            f"{adding} more bytes of skill files would take the tenant over its limit (skill_bytes; {in_use} in use)",
        )

