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

from wasmrun.egress.patterns import PatternError, UrlPattern

SEGMENT = r"[a-z_][a-z0-9_]*"
# Dotted lower-case identifiers: a skill named a.b.c is imported as `skills.a.b.c`.
DOTTED_NAME = re.compile(rf"{SEGMENT}(\.{SEGMENT})*")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# https://semver.org, section "Is there a suggested regular expression".
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
MAX_NAME = 128
MAX_DESCRIPTION = 1024
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
    try:
        manifest = msgspec.convert(data, Manifest)
    except msgspec.ValidationError as exc:
        raise ManifestError([_schema_problem(str(exc))]) from None
    problems = []
    if len(manifest.name) > MAX_NAME or not DOTTED_NAME.fullmatch(manifest.name):
        problems.append(
            f"name {manifest.name!r} must be dotted lower-case identifiers "
            f"(e.g. 'data.csv.profile'), at most {MAX_NAME} characters"
        )
    if not SEMVER.fullmatch(manifest.version):
        problems.append(f"version {manifest.version!r} is not a semantic version (e.g. '0.1.0')")
    if not manifest.description.strip():
        problems.append("description must not be empty")
    elif len(manifest.description) > MAX_DESCRIPTION:
        problems.append(f"description is longer than {MAX_DESCRIPTION} characters")
    if manifest.namespace is not None and not DOTTED_NAME.fullmatch(manifest.namespace):
        problems.append(f"namespace {manifest.namespace!r} must be dotted lower-case identifiers")
    if manifest.kind == "action" and manifest.runtime is None:
        problems.append("an action skill needs a [runtime] table (language, entrypoint, export)")
    if manifest.runtime is not None:
        problems.extend(_runtime_problems(manifest.runtime))
    for secret in manifest.permissions.secrets:
        if not SECRET_NAME.fullmatch(secret):
            problems.append(f"permissions.secrets: {secret!r} is not a valid environment variable name")
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
        or "\\" in entry
        or "\0" in entry
        or path.is_absolute()
        or any(part in ("..", ".") for part in entry.split("/"))
        or path.suffix != ".py"
    ):
        problems.append(
            f"runtime.entrypoint {entry!r} must be a relative path to a .py file inside the skill"
        )
    if not IDENTIFIER.fullmatch(runtime.export):
        problems.append(f"runtime.export {runtime.export!r} must be a Python identifier")
    return problems


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
