"""The skill.toml schema, its validation and semantic-version ordering.

`validate_manifest` takes the parsed TOML (or the JSON of create_skill) and
returns a `Manifest` or raises `ManifestError` listing every problem found.
Checks that need the skill's folder (the entrypoint file exists) live in
store.py.
"""

from __future__ import annotations

import re
from functools import total_ordering
from pathlib import PurePosixPath
from typing import Any, Literal

import msgspec

from wasmrun.egress.grants import SECRET_NAME
from wasmrun.egress.patterns import PatternError, UrlPattern

# Every pattern here spells its classes out in ASCII ([0-9], not \d, which also
# matches other scripts' digits) and is compiled with re.ASCII besides.
SEGMENT = r"[a-z_][a-z0-9_]*"
# Dotted lower-case identifiers: a skill named a.b.c is imported as `skills.a.b.c`.
DOTTED_NAME = re.compile(rf"{SEGMENT}(\.{SEGMENT})*", re.ASCII)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
# https://semver.org, section "Is there a suggested regular expression", with [0-9] for \d.
SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?",
    re.ASCII,
)
MAX_NAME = 128
MAX_VERSION = 64  # the version is a folder name, and it shows in every listing
MAX_DESCRIPTION = 1024
MAX_TAGS = 64
MAX_TAG = 64
MAX_ENTRYPOINT = 1024
MAX_DEPTH = 16  # tables/arrays, the manifest itself included (`inputs` schemas nest)
MAX_NETWORK_PATTERNS = 256


class ManifestError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class Runtime(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    language: Literal["python"]
    entrypoint: str  # a .py file, relative to the skill's folder
    export: str = "main"


class Permissions(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    network: list[str] = []
    secrets: list[str] = []


class Packages(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    # PEP 508 names/specifiers the skill imports, added by the operator with `wasmrun packages add`.
    requires: list[str] = []


class Manifest(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str
    version: str
    description: str
    kind: Literal["action", "instruction"]
    namespace: str | None = None
    tags: list[str] = []
    runtime: Runtime | None = None
    inputs: dict[str, dict[str, Any]] = {}
    permissions: Permissions = Permissions()
    packages: Packages = Packages()

    @property
    def effective_namespace(self) -> str:
        """The declared namespace, or the name without its last part."""
        if self.namespace is not None:
            return self.namespace
        return self.name.rpartition(".")[0]

    @property
    def executable(self) -> bool:
        return self.kind == "action" and self.runtime is not None


def validate_manifest(data: Any) -> Manifest:
    if not isinstance(data, dict):
        raise ManifestError(["the manifest must be a table (object)"])
    if nests_deeper_than(data, MAX_DEPTH):
        raise ManifestError([f"the manifest nests tables/arrays deeper than {MAX_DEPTH} levels"])
    try:
        manifest = msgspec.convert(data, Manifest)
    except msgspec.ValidationError as exc:
        raise ManifestError([_schema_problem(str(exc))]) from None
    problems = []
    if len(manifest.name) > MAX_NAME:
        problems.append(f"name is longer than {MAX_NAME} characters")
    elif not DOTTED_NAME.fullmatch(manifest.name):
        problems.append(
            f"name {shown(manifest.name)} must be dotted lower-case identifiers "
            f"(e.g. 'data.csv.profile'), at most {MAX_NAME} characters"
        )
    if len(manifest.version) > MAX_VERSION:
        problems.append(f"version is longer than {MAX_VERSION} characters")
    elif not SEMVER.fullmatch(manifest.version):
        problems.append(f"version {shown(manifest.version)} is not a semantic version (e.g. '0.1.0')")
    if not manifest.description.strip():
        problems.append("description must not be empty")
    elif len(manifest.description) > MAX_DESCRIPTION:
        problems.append(f"description is longer than {MAX_DESCRIPTION} characters")
    if len(manifest.tags) > MAX_TAGS or any(len(tag) > MAX_TAG for tag in manifest.tags):
        problems.append(f"tags: at most {MAX_TAGS}, each at most {MAX_TAG} characters")
    if manifest.namespace is not None and (
        len(manifest.namespace) > MAX_NAME or not DOTTED_NAME.fullmatch(manifest.namespace)
    ):
        problems.append(f"namespace {shown(manifest.namespace)} must be dotted lower-case identifiers")
    if manifest.kind == "action" and manifest.runtime is None:
        problems.append("an action skill needs a [runtime] table (language, entrypoint, export)")
    if manifest.runtime is not None:
        problems.extend(_runtime_problems(manifest.runtime))
    problems += package_problems(manifest.packages.requires)
    for secret in manifest.permissions.secrets:
        if not SECRET_NAME.fullmatch(secret):
            problems.append(f"permissions.secrets: {shown(secret)} is not a valid environment variable name")
    if len(manifest.permissions.network) > MAX_NETWORK_PATTERNS:
        problems.append(f"permissions.network: at most {MAX_NETWORK_PATTERNS} URL patterns")
    for i, pattern in enumerate(manifest.permissions.network[:MAX_NETWORK_PATTERNS]):
        try:
            UrlPattern.parse(pattern)
        except PatternError as exc:
            problems.append(f"permissions.network[{i}]: {exc}")
    if problems:
        raise ManifestError(problems)
    return manifest


def _runtime_problems(runtime: Runtime) -> list[str]:
    problems = []
    entry = runtime.entrypoint
    path = PurePosixPath(entry)
    if (
        not entry
        or len(entry) > MAX_ENTRYPOINT
        or "\\" in entry
        or "\0" in entry
        or path.is_absolute()
        or any(part in ("..", ".") for part in entry.split("/"))
        or path.suffix != ".py"
    ):
        problems.append(
            f"runtime.entrypoint {shown(entry)} must be a relative path to a .py file inside the skill"
        )
    if not IDENTIFIER.fullmatch(runtime.export):
        problems.append(f"runtime.export {shown(runtime.export)} must be a Python identifier")
    return problems


def package_problems(requires: list[str]) -> list[str]:
    from wasmrun.packages.names import MAX_REQUIREMENTS, RequirementRefused, parse

    if len(requires) > MAX_REQUIREMENTS:
        return [f"packages.requires: at most {MAX_REQUIREMENTS} packages"]
    problems = []
    for i, text in enumerate(requires):
        try:
            parse(text)
        except RequirementRefused as exc:
            problems.append(f"packages.requires[{i}]: {exc}")
    return problems


def shown(text: str, limit: int = 80) -> str:
    """A client's string in a message: quoted, and cut when long."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether dicts/lists in `value` nest more than `limit` deep; walks with a stack, not recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _schema_problem(message: str) -> str:
    # msgspec says "Expected `str`, got `int` - at `$.version`"; name the field first.
    text, _, where = message.partition(" - at `$.")
    if where:
        return f"{where.rstrip('`')}: {text}"
    return message


@total_ordering
class SemVer:
    """Semantic-version precedence (build metadata ignored, then the text breaks ties)."""

    __slots__ = ("core", "pre", "text")

    def __init__(self, text: str) -> None:
        match = SEMVER.fullmatch(text)
        if match is None:
            raise ValueError(f"not a semantic version: {text!r}")
        self.text = text
        self.core = (int(match[1]), int(match[2]), int(match[3]))
        pre = match[4]
        # A release sorts after all of its pre-releases; numeric identifiers before alphanumeric.
        self.pre: tuple[tuple[int, int | str], ...] | None = (
            None
            if pre is None
            else tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split("."))
        )

    def _key(self) -> tuple[Any, ...]:
        pre_key = (1,) if self.pre is None else (0, self.pre)
        return (self.core, pre_key, self.text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SemVer) and self._key() == other._key()

    def __lt__(self, other: SemVer) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"SemVer({self.text!r})"
