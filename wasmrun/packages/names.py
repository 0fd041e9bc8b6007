"""What `packages add` accepts: PEP 508 names with optional extras and version
specifiers. Never a URL, a path, a pip option or an environment marker."""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

MAX_REQUIREMENTS = 64
MAX_REQUIREMENT_LENGTH = 200


class RequirementRefused(ValueError):
    pass


def parse(text: str) -> Requirement:
    """The requirement `text` names, or RequirementRefused saying why not."""
    shown = text[:80] + ("..." if len(text) > 80 else "")
    if len(text) > MAX_REQUIREMENT_LENGTH:
        raise RequirementRefused(f"{shown!r}: longer than {MAX_REQUIREMENT_LENGTH} characters")
    if not text.strip() or text.lstrip().startswith("-"):
        raise RequirementRefused(f"{shown!r}: a package name is expected, not a pip option")
    if not text.isprintable():
        raise RequirementRefused(f"{shown!r}: control characters in a package name")
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise RequirementRefused(f"{shown!r} is not a package name or specifier ({exc})") from None
    if requirement.url is not None:
        raise RequirementRefused(f"{shown!r}: URLs and paths are not accepted, only names from the package index")
    if requirement.marker is not None:
        raise RequirementRefused(f"{shown!r}: environment markers are not accepted")
    return requirement


def parse_all(texts: list[str]) -> list[Requirement]:
    if len(texts) > MAX_REQUIREMENTS:
        raise RequirementRefused(f"at most {MAX_REQUIREMENTS} packages at once")
    return [parse(text) for text in texts]


def canonical(name: str) -> str:
    return str(canonicalize_name(name))


def name_of(text: str) -> str:
    """The canonical name of the package requirement `text` names (RequirementRefused if none)."""
    return canonical(parse(text).name)


def name_or_none(text: object) -> str | None:
    """As name_of, or None where `text` names no package (a client's entry the policy refuses later)."""
    if not isinstance(text, str):
        return None
    try:
        return name_of(text)
    except RequirementRefused:
        return None
