"""What a skill is to the registry: the loaded `Skill`, what a listing shows of it
(`SkillSummary`), the registry's order (namespace, name, highest version first) and
where a page of a listing ends, and the names a skill may have."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmrun.registry.manifest import DOTTED_NAME, MAX_NAME, MAX_VERSION, SEMVER, Manifest, SemVer

MANIFEST_FILE = "skill.toml"
DOC_FILE = "SKILL.md"

ListingKey = tuple[str, str, "_Descending"]
SkillKey = tuple[str | None, str, str]  # (owner, name, version)

RESERVED_NAMESPACE = "skills"
OWNER_PREFIX = "@"
# Created skills in the layout from before tenants belong to this tenant.
LEGACY_OWNER = "local"


def is_reserved_namespace(name: str) -> bool:
    return name == RESERVED_NAMESPACE or name.startswith(RESERVED_NAMESPACE + ".")


@dataclass(frozen=True)
class SkillSummary:
    """What a listing shows of a skill: no folder needed (a backend may answer it
    from an index without materialising the skill)."""

    manifest: Manifest
    frontmatter: dict[str, Any]
    owner: str | None = None
    bundled: bool = False

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    def sort_key(self) -> ListingKey:
        return listing_key(self.manifest.effective_namespace, self.name, self.version)


@dataclass(frozen=True)
class ListingPosition:
    """Where a page of a listing ends: the last skill's namespace, name and version.
    Every field is checked (`parse`), so a backend can use it in a query as it is."""

    namespace: str
    name: str
    version: str

    @classmethod
    def parse(cls, namespace: str, name: str, version: str) -> ListingPosition:
        """The position, or ValueError when it could name no skill."""
        if namespace and not is_skill_name(namespace):
            raise ValueError("namespace is not a dotted lower-case name")
        if not is_skill_name(name):
            raise ValueError("name is not a dotted lower-case name")
        if len(version) > MAX_VERSION or SEMVER.fullmatch(version) is None:
            raise ValueError("version is not a semantic version")
        return cls(namespace, name, version)

    def key(self) -> ListingKey:
        return listing_key(self.namespace, self.name, self.version)


@dataclass(frozen=True)
class Page:
    skills: list[SkillSummary]
    more: bool  # skills follow the last one


def is_skill_name(text: str) -> bool:
    """Whether `text` could be a skill's name or namespace (dotted lower-case identifiers)."""
    return len(text) <= MAX_NAME and DOTTED_NAME.fullmatch(text) is not None


def in_namespace(namespace: str, wanted: str) -> bool:
    """Whether a skill of `namespace` is listed under the filter `wanted` (itself or below it)."""
    return namespace == wanted or namespace.startswith(wanted + ".")


def version_order(version: str) -> str:
    """The version as text whose code-point order is its semantic-version order, as
    `SemVer` orders (precedence, then the text breaks ties): what a database sorts
    by to list in the registry's order. Numbers are length-prefixed, so 10 > 9."""
    parsed = SemVer(version)

    def number(n: int) -> str:
        digits = str(n)
        return f"{len(digits):03d}{digits}"

    parts = [number(n) for n in parsed.core]
    if parsed.pre is None:
        parts.append("1")  # a release after all of its pre-releases
    else:
        parts.append("0")
        # Each identifier ends in "!", below every identifier character: a shorter list first.
        parts.extend(("0" + number(p) if isinstance(p, int) else "1" + p) + "!" for _, p in parsed.pre)
    # " " is below "!", "0" and "1": the text breaks ties only among equal precedence.
    return "".join(parts) + " " + version


@dataclass(frozen=True)
class Skill:
    manifest: Manifest
    raw_manifest: dict[str, Any]  # skill.toml exactly as parsed
    frontmatter: dict[str, Any]
    root: Path
    owner: str | None = None  # the tenant that created it; None: the operator's
    bundled: bool = False  # from the skills/ folder shipped with wasmrun
    warnings: tuple[str, ...] = ()  # soft rules of its format it breaks: served anyway

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def semver(self) -> SemVer:
        return SemVer(self.manifest.version)

    def sort_key(self) -> ListingKey:
        return listing_key(self.manifest.effective_namespace, self.name, self.version)

    def summary(self) -> SkillSummary:
        return SkillSummary(self.manifest, self.frontmatter, self.owner, self.bundled)


def listing_key(namespace: str, name: str, version: str) -> ListingKey:
    """The registry's order: namespace, name, then the highest version first."""
    return (namespace, name, _Descending(SemVer(version)))


class _Descending:
    __slots__ = ("value",)

    def __init__(self, value: SemVer) -> None:
        self.value = value

    def __lt__(self, other: _Descending) -> bool:
        return other.value < self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and self.value == other.value

