"""Skills in folders: read-only folders (the bundled skills/, --skills-dir) and one
writable folder (`<data_dir>/skills`) where create_skill puts new skills.

Any folder holding a skill.toml is a skill, so both `skills/<name>/` and
`skills/<name>/<version>/` layouts work. A folder holding a SKILL.md and no
skill.toml is an Anthropic Agent Skill (registry/agentskills.py says how it maps
to a protocol skill). A skill that fails validation is logged and skipped, never
fatal.

The folders are watched by polling: at most every RECHECK_S, a call that reads
the registry compares the folders' modification times with the last load's and
reloads when they differ, so skills dropped in are served without a restart.

Ownership: the read-only folders hold the operator's skills, visible to every
tenant. create_skill writes `<data_dir>/skills/@<tenant>/<name>/<version>/`,
visible to that tenant alone (an older `<data_dir>/skills/<name>/<version>/`
belongs to the local tenant). A name the operator's skills use, and any name
in the reserved `skills.` namespace, is never created over the protocol at any
version, and a tenant's skill that comes to clash with an operator's name later
is not loaded: created skills can never shadow the operator's.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import errno
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple, Protocol

import tomli

from wasmrun.durable import atomic_write, fsync_dir, fsync_tree
from wasmrun.registry import agentskills, requirements, tomlwriter
from wasmrun.registry.errors import (
    InvalidSkillFiles,
    SkillAlreadyExists,
    SkillFileMissing,
    SkillFileTooLarge,
    UnsafeSkillPath,
)
from wasmrun.registry.manifest import (
    DOTTED_NAME,
    MAX_NAME,
    MAX_VERSION,
    SEMVER,
    Manifest,
    ManifestError,
    SemVer,
    shown,
    validate_manifest,
)
from wasmrun.registry.skillmd import parse_frontmatter

MANIFEST_FILE = "skill.toml"
DOC_FILE = "SKILL.md"
STAGING = ".staging"
STALE_STAGING_S = 3600
MAX_LISTED_FILES = 500
RECHECK_S = 0.5  # how stale the registry may be after a folder changes
AGENT_SKILLS_DIR = "agent-skills"  # in the writable folder, for `wasmrun skills add`; never a skill name
# Paths a client names (read_skill_file, create_skill files): far above any real
# skill's, below what the file system refuses (NAME_MAX 255 bytes, PATH_MAX 4096).
MAX_PATH_CHARS = 1024
MAX_PATH_SEGMENTS = 32
MAX_SEGMENT_BYTES = 255
# skill.toml and SKILL.md are read whole into memory at load time: far above any real one.
MAX_DESCRIPTOR_BYTES = 1024 * 1024

logger = logging.getLogger("wasmrun.registry")
# OS refusals caused by a name a client chose, not by the server's disk.
_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ, errno.ELOOP})


ListingKey = tuple[str, str, "_Descending"]
SkillKey = tuple[str | None, str, str]  # (owner, name, version)


RESERVED_NAMESPACE = "skills"
OWNER_PREFIX = "@"
# Created skills in the layout from before tenants belong to this tenant.
LEGACY_OWNER = "local"


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
        quota: SkillQuota | None = None,
    ) -> Skill: ...


class SkillProblems(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def is_agent_skill(root: Path) -> bool:
    return not (root / MANIFEST_FILE).exists() and (root / DOC_FILE).is_file()


def load_skill(root: Path) -> Skill:
    """Read and validate one skill folder; raises SkillProblems listing what is wrong."""
    if is_agent_skill(root):
        return load_agent_skill(root)
    problems: list[str] = []
    raw: dict[str, Any] = {}
    manifest: Manifest | None = None
    try:
        raw = tomli.loads(read_regular(root / MANIFEST_FILE, MAX_DESCRIPTOR_BYTES).decode("utf-8"))
        manifest = validate_manifest(raw)
    except FileNotFoundError:
        problems.append(f"{MANIFEST_FILE} is missing")
    except UnicodeDecodeError:
        problems.append(f"{MANIFEST_FILE} is not UTF-8")
    except FileTooLarge as exc:
        problems.append(f"{MANIFEST_FILE} is too large ({exc})")
    except tomli.TOMLDecodeError as exc:
        problems.append(f"{MANIFEST_FILE} is not valid TOML: {exc}")
    except RecursionError:  # tomli refuses inline tables/arrays nested 400 deep this way
        problems.append(f"{MANIFEST_FILE} nests inline tables/arrays too deeply")
    except ManifestError as exc:
        problems.extend(f"{MANIFEST_FILE}: {p}" for p in exc.problems)
    except OSError as exc:
        problems.append(f"{MANIFEST_FILE} cannot be read: {exc.strerror}")
    meta: dict[str, Any] = {}
    try:
        meta = parse_frontmatter(read_doc(root))
    except FileNotFoundError:
        problems.append(f"{DOC_FILE} is missing")
    except UnicodeDecodeError:
        problems.append(f"{DOC_FILE} is not UTF-8")
    except FileTooLarge as exc:
        problems.append(f"{DOC_FILE} is too large ({exc})")
    except ValueError as exc:  # FrontmatterError
        problems.append(f"{DOC_FILE}: {exc}")
    except OSError as exc:
        problems.append(f"{DOC_FILE} cannot be read: {exc.strerror}")
    if manifest is not None and manifest.runtime is not None:
        entry = root / manifest.runtime.entrypoint
        if not _inside(root, entry) or not _is_file(entry):
            problems.append(
                f"runtime.entrypoint {manifest.runtime.entrypoint!r} is not a file inside the skill"
            )
    if problems or manifest is None:
        raise SkillProblems(problems)
    return Skill(manifest=manifest, raw_manifest=raw, frontmatter=meta, root=root)


def read_doc(root: Path) -> str:
    return read_regular(root / DOC_FILE, MAX_DESCRIPTOR_BYTES).decode("utf-8")


def load_agent_skill(root: Path) -> Skill:
    """An Agent Skills folder (SKILL.md with YAML frontmatter, no skill.toml)."""
    try:
        meta = parse_frontmatter(read_doc(root))
    except UnicodeDecodeError:
        raise SkillProblems([f"{DOC_FILE} is not UTF-8"]) from None
    except FileTooLarge as exc:
        raise SkillProblems([f"{DOC_FILE} is too large ({exc})"]) from None
    except OSError as exc:
        raise SkillProblems([f"{DOC_FILE} cannot be read: {exc.strerror}"]) from None
    except ValueError as exc:
        raise SkillProblems([f"{DOC_FILE}: {exc}"]) from None
    if not meta:
        raise SkillProblems([
            f"{DOC_FILE} has no YAML frontmatter (---, name:, description:, ---) and there is no {MANIFEST_FILE}:"
            " an Agent Skill needs `name` and `description`; a protocol skill needs a skill.toml"
        ])
    problems = [f"{DOC_FILE}: {p}" for p in agentskills.frontmatter_problems(meta, root.resolve().name)]
    if problems:
        raise SkillProblems(problems)
    manifest, raw = agentskills.derived_manifest(meta)
    warnings = tuple(f"{DOC_FILE}: {w}" for w in agentskills.frontmatter_warnings(meta))
    return Skill(manifest=manifest, raw_manifest=raw, frontmatter=meta, root=root, warnings=warnings)


def skill_folders(top: Path) -> Iterator[Path]:
    """Every folder under `top` (itself included) that holds a skill.toml, or a SKILL.md
    without one (an Agent Skill)."""
    for folder, dirs, files in os.walk(top):
        if MANIFEST_FILE in files or DOC_FILE in files:
            dirs.clear()
            yield Path(folder)
        else:
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))


def folders_signature(tops: Sequence[Path]) -> tuple[tuple[str, int], ...]:
    """The modification times a change to the skills in `tops` shows up in: every folder
    walked to find the skills, and each skill's skill.toml and SKILL.md."""
    seen: list[tuple[str, int]] = []
    for top in tops:
        for folder, dirs, files in os.walk(top):
            for name in (".", MANIFEST_FILE, DOC_FILE):
                if name == "." or name in files:
                    try:
                        seen.append((os.path.join(folder, name), os.stat(os.path.join(folder, name)).st_mtime_ns))
                    except OSError:
                        seen.append((os.path.join(folder, name), -1))
            if MANIFEST_FILE in files or DOC_FILE in files:
                dirs.clear()
            else:
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return tuple(seen)


class FolderCheck(NamedTuple):
    folder: Path
    problems: list[str]  # hard rules broken: the skill is not served
    warnings: list[str]  # soft rules broken: served anyway


def check_folder(top: Path) -> list[FolderCheck]:
    """Each skill folder under `top` with its problems and warnings (empty when it is valid)."""
    report: list[FolderCheck] = []
    for folder in skill_folders(top):
        try:
            skill = load_skill(folder)
            report.append(FolderCheck(folder, [], list(skill.warnings)))
        except SkillProblems as exc:
            report.append(FolderCheck(folder, exc.problems, []))
    return report


def check_relative_path(path: str, field: str) -> PurePosixPath:
    """A relative path with no way out of its folder, or UnsafeSkillPath."""
    problem = None
    segments = path.split("/")
    if not path:
        problem = "is empty"
    elif len(path) > MAX_PATH_CHARS:
        problem = f"is longer than {MAX_PATH_CHARS} characters"
    elif len(segments) > MAX_PATH_SEGMENTS:
        problem = f"has more than {MAX_PATH_SEGMENTS} segments"
    elif any(len(part.encode("utf-8")) > MAX_SEGMENT_BYTES for part in segments):
        problem = f"has a segment longer than {MAX_SEGMENT_BYTES} bytes"
    elif "\0" in path:
        problem = "contains a NUL byte"
    elif any(ord(c) < 0x20 or c == "\x7f" for c in path):
        problem = "contains a control character"
    elif "\\" in path:
        problem = "contains a backslash; use '/'"
    elif path.startswith("/"):
        problem = "is absolute; give it relative to the skill's folder"
    elif any(part == ".." for part in segments):
        problem = "contains '..'"
    elif any(part in ("", ".") for part in segments):
        problem = "has an empty or '.' segment"
    if problem is not None:
        raise UnsafeSkillPath(f"path {shown(path)} {problem}", field=field)
    return PurePosixPath(path)


def _inside(root: Path, path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        return False


class NotRegularFile(OSError):
    """A FIFO, socket or device where a file was expected: opening it for real could block forever."""


def read_regular(path: Path, max_bytes: int) -> bytes:
    """Read a regular file, refusing anything else without blocking.

    An operator's skill folder may hold a FIFO (or a device) under a file's name;
    a plain open() of a FIFO blocks until a writer appears, which would hang the
    registry's reload or a request. O_NONBLOCK makes the open return at once and
    the fstat decides. Raises FileTooLarge past `max_bytes`.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file")
        if info.st_size > max_bytes:
            raise FileTooLarge(info.st_size, max_bytes)
        data = f.read(max_bytes + 1)
        if len(data) > max_bytes:  # grew since the fstat
            raise FileTooLarge(len(data), max_bytes)
        return data


class FileTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes, above the {limit}-byte limit")
        self.size = size
        self.limit = limit


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


class DirectoryRegistry:
    def __init__(self, read_only: Sequence[Path], writable: Path, package_layer: Path | None = None) -> None:
        self.read_only = [Path(p) for p in read_only]
        self.package_layer = package_layer  # the operator's packages (wasmrun/packages); create_skill checks them
        self.writable = Path(writable)
        self.writable.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._index: dict[SkillKey, Skill] = {}
        self._operator: list[Skill] = []
        self._operator_names: frozenset[str] = frozenset()
        self._by_owner: dict[str, list[Skill]] = {}
        self._signature: tuple[tuple[str, int], ...] = ()
        self._missing: set[Path] = set()
        self._next_check = 0.0
        self._clean_staging()
        self.reload()

    def reload(self) -> None:
        with self._lock:
            self._reload_locked()

    def _refresh(self) -> None:
        """Reload when the folders changed; checked at most every RECHECK_S, and skipped
        while another thread is loading or creating (it will see the change)."""
        now = time.monotonic()
        folders_due = now >= self._next_check
        if not (folders_due or self._checks_every_call()) or not self._lock.acquire(blocking=False):
            return
        try:
            changed = self._created_changed()
            if folders_due:
                self._next_check = now + RECHECK_S
                changed = changed or folders_signature(self._tops()) != self._signature
            if changed:
                self._reload_locked()
        finally:
            self._lock.release()

    def _checks_every_call(self) -> bool:
        """Whether `_created_changed` is worth asking on every call (not for folders)."""
        return False

    def _created_changed(self) -> bool:
        """Whether created skills changed where the folders' signature cannot see."""
        return False

    def _tops(self) -> list[Path]:
        return [top for top in [*self.read_only, self.writable] if top.is_dir()]

    def _reload_locked(self) -> None:
        # Taken before the scan: a change during the scan shows at the next check.
        self._signature = folders_signature(self._tops())
        index: dict[SkillKey, Skill] = {}
        for i, top in enumerate(self.read_only):
            if not top.is_dir():
                if top not in self._missing:  # said once, not at every reload
                    self._missing.add(top)
                    logger.warning("skills folder %s does not exist", top)
                continue
            for folder in skill_folders(top):
                self._add(index, folder, None, bundled=i == 0)
        self._load_created(index, {name for _, name, _ in index})
        self._set_index(index)

    def _load_created(self, index: dict[SkillKey, Skill], operator_names: set[str]) -> None:
        """Add the tenants' created skills to `index` (here: the writable folder's)."""
        if self.writable.is_dir():
            for entry in sorted(self.writable.iterdir()):
                if entry.name.startswith(".") or not entry.is_dir():
                    continue
                owner = entry.name[len(OWNER_PREFIX):] if entry.name.startswith(OWNER_PREFIX) else LEGACY_OWNER
                for folder in skill_folders(entry):
                    self._add(index, folder, owner, reserved=operator_names)

    @staticmethod
    def _add(
        index: dict[SkillKey, Skill],
        folder: Path,
        owner: str | None,
        *,
        bundled: bool = False,
        reserved: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        try:
            skill = load_skill(folder)
        except SkillProblems as exc:
            logger.warning("skipping invalid skill in %s: %s", folder, exc)
            return
        except Exception:  # one bad folder never stops the server from starting
            logger.exception("skipping skill in %s: it could not be loaded", folder)
            return
        for warning in skill.warnings:
            logger.warning("skill in %s is served with a warning: %s", folder, warning)
        DirectoryRegistry._add_loaded(index, skill, owner, bundled=bundled, reserved=reserved)

    @staticmethod
    def _add_loaded(
        index: dict[SkillKey, Skill],
        skill: Skill,
        owner: str | None,
        *,
        bundled: bool = False,
        reserved: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        folder = skill.root
        if owner is not None and (skill.name in reserved or is_reserved_namespace(skill.name)):
            logger.warning("skipping %s in %s: the name is the operator's", skill.name, folder)
            return
        key = (owner, skill.name, skill.version)
        if key in index:
            logger.warning(
                "skipping %s %s in %s: already loaded from %s", skill.name, skill.version, folder, index[key].root
            )
            return
        index[key] = dataclasses.replace(skill, owner=owner, bundled=bundled)

    def _set_index(self, index: dict[SkillKey, Skill]) -> None:
        self._index = index
        ordered = sorted(index.values(), key=Skill.sort_key)
        self._operator = [s for s in ordered if s.owner is None]
        self._operator_names = frozenset(s.name for s in self._operator)
        by_owner: dict[str, list[Skill]] = {}
        for skill in ordered:
            if skill.owner is not None:
                by_owner.setdefault(skill.owner, []).append(skill)
        self._by_owner = {
            owner: sorted([*self._operator, *own], key=Skill.sort_key) for owner, own in by_owner.items()
        }

    def skills(self, owner: str | None = None) -> list[Skill]:
        self._refresh()
        if owner is None:
            return self._operator
        return self._by_owner.get(owner, self._operator)

    def loaded_operator_skills(self) -> list[Skill]:
        """The operator's skills as loaded, without the folders' change check (which
        would put the next one RECHECK_S away: a start-up report must not delay
        the pick-up of a skill added just after)."""
        return self._operator

    def page(
        self, owner: str | None, *, namespace: str | None = None, after: ListingPosition | None = None,
        limit: int,
    ) -> Page:
        listed = self.skills(owner)
        if namespace:
            listed = [s for s in listed if in_namespace(s.manifest.effective_namespace, namespace)]
        start = bisect.bisect_right(listed, after.key(), key=Skill.sort_key) if after is not None else 0
        return Page([s.summary() for s in listed[start:start + limit]], more=start + limit < len(listed))

    def versions(self, name: str, owner: str | None = None) -> list[str]:
        found = self.find(name, None, owner)
        if found is None:
            return []
        return [s.version for s in self.skills(owner) if s.name == found.name and s.owner == found.owner]

    def every_skill(self) -> list[SkillSummary]:
        """The operator's skills and every tenant's, for the operator's own listing."""
        self._refresh()
        return [s.summary() for s in sorted(self._index.values(), key=lambda s: (s.owner or "", *s.sort_key()))]

    def operator_names(self) -> frozenset[str]:
        self._refresh()
        return self._operator_names

    def finds_in_memory(self, name: str, owner: str | None = None) -> bool:
        return True  # the index of the folders

    def find(self, name: str, version: str | None = None, owner: str | None = None) -> Skill | None:
        self._refresh()
        name = agentskills.normalise_name(name)
        # An operator's name resolves among the operator's skills only, whatever a tenant created.
        if name in self._operator_names or owner is None:
            owner = None
        if version is not None:
            return self._index.get((owner, name, version))
        candidates = [s for s in self.skills(owner) if s.name == name and s.owner == owner]
        return max(candidates, key=lambda s: s.semver) if candidates else None

    def read_file(self, skill: Skill, path: str, max_bytes: int) -> bytes:
        check_relative_path(path, "path")
        target = skill.root / path
        if not _inside(skill.root, target):
            raise UnsafeSkillPath(f"path {path!r} leads outside the skill's folder", field="path")
        try:
            return read_regular(target.resolve(), max_bytes)
        except FileTooLarge as exc:
            raise SkillFileTooLarge(
                f"{path!r} is {exc.size} bytes, above the {max_bytes}-byte read limit", field="path"
            ) from None
        except NotRegularFile:
            raise SkillFileMissing(f"{path!r} is not a regular file", field="path") from None
        except (FileNotFoundError, NotADirectoryError):
            raise SkillFileMissing(
                f"skill {skill.name} {skill.version} has no file {path!r}", field="path"
            ) from None
        except IsADirectoryError:
            raise SkillFileMissing(f"{path!r} is a folder, not a file", field="path") from None
        except OSError as exc:  # e.g. ENAMETOOLONG, ELOOP: about the path the client named
            raise SkillFileMissing(f"{path!r} cannot be read: {exc.strerror}", field="path") from None

    def cached(self, skill: Skill) -> bool:
        return False  # folders of their own, never evicted

    def hold(self, skills: Sequence[Skill]) -> contextlib.ExitStack:
        return contextlib.ExitStack()

    def list_files(self, skill: Skill) -> list[str]:
        found = []
        for folder, dirs, files in os.walk(skill.root):
            dirs.sort()
            for name in sorted(files):
                full = Path(folder) / name
                if _inside(skill.root, full):
                    found.append(full.relative_to(skill.root).as_posix())
                if len(found) >= MAX_LISTED_FILES:
                    return sorted(found)
        return sorted(found)

    # -- create_skill ---------------------------------------------------------

    def create(
        self, manifest: dict[str, Any], skill_md: str, files: list[NewFile], owner: str = LEGACY_OWNER,
        quota: SkillQuota | None = None,
    ) -> Skill:
        try:
            parsed = validate_manifest(manifest)
        except ManifestError as exc:
            raise InvalidSkillFiles(f"invalid manifest: {exc}", field="manifest", problems=exc.problems) from None
        self._check_name(parsed.name)
        wanted = requirements.missing(parsed, self.package_layer)
        if wanted:
            raise InvalidSkillFiles(requirements.missing_message(parsed.name, wanted), field="manifest")
        key: SkillKey = (owner, parsed.name, parsed.version)
        if key in self._index:
            raise SkillAlreadyExists(f"skill {parsed.name} {parsed.version} already exists", field="manifest")
        seen = set()
        for i, f in enumerate(files):
            rel = check_relative_path(f.path, f"files[{i}].path")
            if rel.as_posix() in (MANIFEST_FILE, DOC_FILE):
                raise InvalidSkillFiles(
                    f"files[{i}]: {f.path} comes from the `manifest` / `skill_md` params",
                    field=f"files[{i}].path",
                )
            if rel.as_posix() in seen:
                raise InvalidSkillFiles(f"files[{i}]: {f.path} is listed twice", field=f"files[{i}].path")
            seen.add(rel.as_posix())
        try:
            parse_frontmatter(skill_md)  # said here to name the param; load_skill checks it again
        except ValueError as exc:
            raise InvalidSkillFiles(f"invalid skill_md: {exc}", field="skill_md") from None
        toml_text = _manifest_toml(manifest)
        if quota is not None:
            size = len(toml_text.encode()) + len(skill_md.encode()) + sum(len(f.content) for f in files)
            self._check_quota(owner, quota, size)

        staging = self.writable / STAGING
        staging.mkdir(exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{parsed.name}-", dir=staging))
        try:
            _write_file(tmp / MANIFEST_FILE, toml_text.encode("utf-8"))
            _write_file(tmp / DOC_FILE, skill_md.encode("utf-8"))
            for i, f in enumerate(files):
                target = tmp / f.path
                # A path that names a folder of another file ("a" and "a/b") fails here.
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _write_file(target, f.content)
                except (FileExistsError, NotADirectoryError, IsADirectoryError):
                    raise InvalidSkillFiles(
                        f"{f.path!r} clashes with another file's folder", field=f"files[{i}].path"
                    ) from None
                except OSError as exc:
                    if exc.errno not in _PATH_ERRNOS:
                        raise
                    raise InvalidSkillFiles(
                        f"files[{i}].path cannot be written: {exc.strerror}", field=f"files[{i}].path"
                    ) from None
            try:
                load_skill(tmp)
            except SkillProblems as exc:
                raise InvalidSkillFiles(f"invalid skill: {exc}", field="manifest", problems=exc.problems) from None
            return self._publish(tmp, key, quota)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _publish(self, tmp: Path, key: SkillKey, quota: SkillQuota | None) -> Skill:
        """Make the validated folder `tmp` the created skill `key`, or raise SkillAlreadyExists
        when that name and version exist (created meanwhile by another process too)."""
        owner, name, version = key
        assert owner is not None
        dest = self.writable / (OWNER_PREFIX + owner) / name / version
        dest.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._check_name(name)
            if quota is not None:
                self._check_quota(owner, quota, 0)
            if key in self._index:
                raise SkillAlreadyExists(f"skill {name} {version} already exists", field="manifest")
            fsync_tree(tmp)
            try:
                # Atomic, and refused when another process got there first.
                os.rename(tmp, dest)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise SkillAlreadyExists(f"skill {name} {version} already exists", field="manifest") from None
                raise
            fsync_dir(dest.parent)
            skill = dataclasses.replace(load_skill(dest), owner=owner)
            self._set_index({**self._index, key: skill})
        return skill

    # -- `wasmrun skills add` ------------------------------------------------------

    def add(self, source: Path, into: Path) -> tuple[Skill, Path]:
        """Copy a skill folder (an Agent Skill or one with a skill.toml) into `into`, one
        of the operator's skills folders: validated first, copied to a staging folder
        there, then renamed into place. Raises SkillProblems when it is invalid,
        SkillAlreadyExists when it is there already."""
        source = Path(source)
        if not source.is_dir():
            raise SkillProblems([f"{source} is not a folder"])
        for entry in sorted(source.rglob("*")):
            where = entry.relative_to(source)
            if entry.is_symlink():
                raise SkillProblems([f"{where} is a symbolic link: copy the file it points to instead"])
            if not (entry.is_file() or entry.is_dir()):  # a FIFO or device would hang or leak the copy
                raise SkillProblems([f"{where} is not a regular file or folder"])
        skill = load_skill(source)
        if is_agent_skill(source):
            dest = into / AGENT_SKILLS_DIR / str(skill.frontmatter["name"])
        else:
            dest = into / skill.name / skill.version
        staging = into / STAGING
        staging.mkdir(parents=True, exist_ok=True)
        holder = Path(tempfile.mkdtemp(prefix=f"{skill.name}-", dir=staging))
        tmp = holder / dest.name  # an Agent Skill's folder is named after it
        try:
            shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(".*", "__pycache__"))
            copied = load_skill(tmp)
            fsync_tree(tmp)  # on disk before the rename publishes it
            dest.parent.mkdir(parents=True, exist_ok=True)
            with self._lock:
                if (None, copied.name, copied.version) in self._index or dest.exists():
                    raise SkillAlreadyExists(f"skill {copied.name} {copied.version} already exists", field="path")
                os.rename(tmp, dest)
                fsync_dir(dest.parent)
                self._reload_locked()
                return self._index[(None, copied.name, copied.version)], dest
        finally:
            shutil.rmtree(holder, ignore_errors=True)

    def _check_quota(self, owner: str, quota: SkillQuota, adding: int) -> None:
        owned = [s for s in self._index.values() if s.owner == owner]
        check_skill_quota(quota, len(owned), lambda: sum(folder_bytes(s.root) for s in owned), adding)

    def _check_name(self, name: str) -> None:
        if is_reserved_namespace(name):
            raise ReservedName(f"the {RESERVED_NAMESPACE!r} namespace is reserved for the server's own skills")
        if name in self._operator_names:
            raise ReservedName(f"{name!r} is the name of one of this server's own skills, at any version")

    def _clean_staging(self) -> None:
        staging = self.writable / STAGING
        if not staging.is_dir():
            return
        for leftover in staging.iterdir():
            try:
                if time.time() - leftover.stat().st_mtime > STALE_STAGING_S:
                    shutil.rmtree(leftover, ignore_errors=True)
            except OSError:
                pass


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


def folder_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _manifest_toml(manifest: dict[str, Any]) -> str:
    try:
        text = tomlwriter.dumps(manifest)
        same = tomli.loads(text) == manifest
    except (ValueError, tomli.TOMLDecodeError) as exc:
        raise InvalidSkillFiles(f"manifest cannot be written as TOML: {exc}", field="manifest") from None
    if not same:
        raise InvalidSkillFiles("manifest cannot be written as TOML faithfully", field="manifest")
    return text


def _write_file(path: Path, data: bytes) -> None:
    # Refuses an existing path (FileExistsError), as the clash check above expects.
    # The whole folder is fsynced once, before it is renamed into place.
    atomic_write(path, data, replace=False, sync_dir=False, mode=0o644)
