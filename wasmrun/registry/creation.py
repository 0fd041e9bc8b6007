"""A skill to create, before it is anyone's: its inputs checked (the manifest, the
SKILL.md text, the files' paths), then written to a folder in the staging area and
loaded back from it exactly as the registry will load it. The registry publishes the
staged folder (store.py DirectoryRegistry.create; database/skills.py stores it in the
shared backend instead)."""

from __future__ import annotations

import errno
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import tomli

from wasmrun.durable import atomic_write
from wasmrun.registry import tomlwriter
from wasmrun.registry.errors import InvalidSkillFiles, Part
from wasmrun.registry.files import check_relative_path
from wasmrun.registry.folders import SkillProblems, load_skill
from wasmrun.registry.interface import NewFile
from wasmrun.registry.manifest import Manifest, ManifestError, validate_manifest
from wasmrun.registry.skill import DOC_FILE, MANIFEST_FILE
from wasmrun.registry.skillmd import parse_frontmatter

STAGING = ".staging"  # in the writable folder: skills being created, renamed into place when valid
STALE_STAGING_S = 3600
# OS refusals caused by a name a client chose, not by the server's disk.
_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ, errno.ELOOP})


def parse_manifest(manifest: dict[str, Any]) -> Manifest:
    try:
        return validate_manifest(manifest)
    except ManifestError as exc:
        raise InvalidSkillFiles(f"invalid manifest: {exc}", Part.MANIFEST, problems=exc.problems) from None


def check_contents(manifest: dict[str, Any], skill_md: str, files: list[NewFile]) -> str:
    """The manifest as skill.toml text, once the files' paths and the SKILL.md check out."""
    seen = set()
    for i, f in enumerate(files):
        rel = check_relative_path(f.path, Part.FILE, i)
        if rel.as_posix() in (MANIFEST_FILE, DOC_FILE):
            raise InvalidSkillFiles(
                f"files[{i}]: {f.path} comes from the `manifest` / `skill_md` params", Part.FILE, file_index=i
            )
        if rel.as_posix() in seen:
            raise InvalidSkillFiles(f"files[{i}]: {f.path} is listed twice", Part.FILE, file_index=i)
        seen.add(rel.as_posix())
    try:
        parse_frontmatter(skill_md)  # said here to name the input; load_skill checks it again
    except ValueError as exc:
        raise InvalidSkillFiles(f"invalid skill_md: {exc}", Part.SKILL_MD) from None
    return manifest_toml(manifest)


def created_bytes(toml_text: str, skill_md: str, files: list[NewFile]) -> int:
    """What the new skill's files weigh against its owner's quota."""
    return len(toml_text.encode()) + len(skill_md.encode()) + sum(len(f.content) for f in files)


def stage(staging: Path, name: str, toml_text: str, skill_md: str, files: list[NewFile]) -> Path:
    """A new folder in `staging` holding the skill, checked by loading it back;
    InvalidSkillFiles (and no folder left) when it is not a valid skill."""
    staging.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=staging))
    try:
        _write_file(tmp / MANIFEST_FILE, toml_text.encode("utf-8"))
        _write_file(tmp / DOC_FILE, skill_md.encode("utf-8"))
        for i, f in enumerate(files):
            _write_new_file(tmp, i, f)
        try:
            load_skill(tmp)
        except SkillProblems as exc:
            raise InvalidSkillFiles(f"invalid skill: {exc}", Part.MANIFEST, problems=exc.problems) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _write_new_file(tmp: Path, i: int, f: NewFile) -> None:
    target = tmp / f.path
    # A path that names a folder of another file ("a" and "a/b") fails here.
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_file(target, f.content)
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        raise InvalidSkillFiles(f"{f.path!r} clashes with another file's folder", Part.FILE, file_index=i) from None
    except OSError as exc:
        if exc.errno not in _PATH_ERRNOS:
            raise
        raise InvalidSkillFiles(
            f"files[{i}].path cannot be written: {exc.strerror}", Part.FILE, file_index=i
        ) from None


def clean_staging(staging: Path) -> None:
    """Remove what creations that never finished (a crash) left in `staging`."""
    if not staging.is_dir():
        return
    for leftover in staging.iterdir():
        try:
            if time.time() - leftover.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass


def manifest_toml(manifest: dict[str, Any]) -> str:
    try:
        text = tomlwriter.dumps(manifest)
        same = tomli.loads(text) == manifest
    except (ValueError, tomli.TOMLDecodeError) as exc:
        raise InvalidSkillFiles(f"manifest cannot be written as TOML: {exc}", Part.MANIFEST) from None
    if not same:
        raise InvalidSkillFiles("manifest cannot be written as TOML faithfully", Part.MANIFEST)
    return text


def _write_file(path: Path, data: bytes) -> None:
    # Refuses an existing path (FileExistsError), as the clash check above expects.
    # The whole folder is fsynced once, before it is renamed into place.
    atomic_write(path, data, replace=False, sync_dir=False, mode=0o644)
