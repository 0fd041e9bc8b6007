"""The directory registry: skills in folders, indexed in memory. Read-only folders
(the bundled skills/, --skills-dir) hold the operator's skills; one writable folder
(`<data_dir>/skills`) holds those create_skill makes. How a folder is a skill (a
skill.toml, or an Agent Skill's SKILL.md) and how one is loaded: registry/folders.py;
how a skill to create is checked and staged: registry/creation.py.

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
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wasmrun.durable import fsync_dir, fsync_tree
from wasmrun.registry import agentskills, requirements
from wasmrun.registry.creation import STAGING, check_contents, clean_staging, created_bytes, parse_manifest, stage
from wasmrun.registry.errors import (
    InvalidSkillFiles,
    Part,
    SkillAlreadyExists,
    SkillFileMissing,
    SkillFileTooLarge,
    UnsafeSkillPath,
)
from wasmrun.registry.files import (
    FileTooLarge,
    NotRegularFile,
    check_relative_path,
    folder_bytes,
    inside,
    listed_files,
    read_regular,
)
from wasmrun.registry.folders import (
    SkillProblems,
    folders_signature,
    is_agent_skill,
    load_skill,
    skill_folders,
)
from wasmrun.registry.interface import NewFile, ReservedName, SkillQuota, check_skill_quota
from wasmrun.registry.skill import (
    LEGACY_OWNER,
    OWNER_PREFIX,
    RESERVED_NAMESPACE,
    ListingPosition,
    Page,
    Skill,
    SkillKey,
    SkillSummary,
    in_namespace,
    is_reserved_namespace,
)

# What the server imports from here.
__all__ = ["DirectoryRegistry"]

RECHECK_S = 0.5  # how stale the registry may be after a folder changes
AGENT_SKILLS_DIR = "agent-skills"  # in the writable folder, for `wasmrun skills add`; never a skill name

logger = logging.getLogger("wasmrun.registry")


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
        clean_staging(self.writable / STAGING)
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
        check_relative_path(path, Part.PATH)
        target = skill.root / path
        if not inside(skill.root, target):
            raise UnsafeSkillPath(f"path {path!r} leads outside the skill's folder", Part.PATH)
        try:
            return read_regular(target.resolve(), max_bytes)
        except FileTooLarge as exc:
            raise SkillFileTooLarge(
                f"{path!r} is {exc.size} bytes, above the {max_bytes}-byte read limit", Part.PATH
            ) from None
        except NotRegularFile:
            raise SkillFileMissing(f"{path!r} is not a regular file", Part.PATH) from None
        except (FileNotFoundError, NotADirectoryError):
            raise SkillFileMissing(f"skill {skill.name} {skill.version} has no file {path!r}", Part.PATH) from None
        except IsADirectoryError:
            raise SkillFileMissing(f"{path!r} is a folder, not a file", Part.PATH) from None
        except OSError as exc:  # e.g. ENAMETOOLONG, ELOOP: about the path the client named
            raise SkillFileMissing(f"{path!r} cannot be read: {exc.strerror}", Part.PATH) from None

    def cached(self, skill: Skill) -> bool:
        return False  # folders of their own, never evicted

    def hold(self, skills: Sequence[Skill]) -> contextlib.ExitStack:
        return contextlib.ExitStack()

    def list_files(self, skill: Skill) -> list[str]:
        return listed_files(skill.root)

    # -- create_skill ---------------------------------------------------------

    def create(
        self, manifest: dict[str, Any], skill_md: str, files: list[NewFile], owner: str = LEGACY_OWNER,
        quota: SkillQuota | None = None, provide_packages: requirements.ProvidePackages | None = None,
    ) -> Skill:
        """Check the skill (in the order a client reads its errors: the manifest, its name,
        whether it exists, its files, its SKILL.md, its owner's quota, then its packages),
        stage it, and publish it as `owner`'s. Declared packages the server lacks are given to
        `provide_packages` (installed on demand: its refusal is raised as it is, nothing is
        stored); without one, the skill is refused naming them."""
        parsed = parse_manifest(manifest)
        self._check_name(parsed.name)
        wanted = requirements.missing(parsed, self.package_layer)
        if wanted and provide_packages is None:
            raise InvalidSkillFiles(requirements.missing_message(parsed.name, wanted), Part.MANIFEST)
        key: SkillKey = (owner, parsed.name, parsed.version)
        if key in self._index:
            raise SkillAlreadyExists(f"skill {parsed.name} {parsed.version} already exists", Part.MANIFEST)
        toml_text = check_contents(manifest, skill_md, files)
        if quota is not None:
            self._check_quota(owner, quota, created_bytes(toml_text, skill_md, files))
        if wanted and provide_packages is not None:  # last: a download only for a skill otherwise valid
            provide_packages(wanted)
        tmp = stage(self.writable / STAGING, parsed.name, toml_text, skill_md, files)
        try:
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
                raise SkillAlreadyExists(f"skill {name} {version} already exists", Part.MANIFEST)
            fsync_tree(tmp)
            try:
                # Atomic, and refused when another process got there first.
                os.rename(tmp, dest)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise SkillAlreadyExists(f"skill {name} {version} already exists", Part.MANIFEST) from None
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
                    raise SkillAlreadyExists(f"skill {copied.name} {copied.version} already exists", Part.PATH)
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
