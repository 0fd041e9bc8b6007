"""A skill to create, before it is anyone's: its inputs checked (the manifest, the
SKILL.md text, the files' paths), then written to a folder in the staging area and
loaded back from it exactly as the registry will load it. The registry publishes the
staged folder (store.py DirectoryRegistry.create; database/skills.py stores it in the
shared backend instead)."""

from __future__ import annotations

import errno
import math
import re
import shutil
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from wasmrun.durable import atomic_write
from wasmrun.registry.errors import InvalidSkillFiles, Part
from wasmrun.registry.files import check_relative_path
from wasmrun.registry.folders import SkillProblems, load_skill
from wasmrun.registry.interface import NewFile
from wasmrun.registry.manifest import Manifest, ManifestError, shown, validate_manifest
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
    """The manifest as skill.toml text (tomli-w), checked by reading it back (tomllib)."""
    problem = _not_toml(manifest, "manifest")
    try:
        if problem is not None:
            raise ValueError(problem)
        text = tomli_w.dumps(manifest)
        same = tomllib.loads(text) == manifest
    except (TypeError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise InvalidSkillFiles(f"manifest cannot be written as TOML: {exc}", Part.MANIFEST) from None
    if not same:
        raise InvalidSkillFiles("manifest cannot be written as TOML faithfully", Part.MANIFEST)
    return text


# TOML's integers are 64-bit signed; a reader other than Python's refuses a larger one.
_TOML_INT = range(-(2**63), 2**63)
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _not_toml(value: object, where: str) -> str | None:
    """What in a JSON value TOML cannot hold, named by its path; None when it all can.
    (The manifest was checked to nest at most manifest.MAX_DEPTH deep.)"""
    if isinstance(value, dict):
        for key, item in value.items():
            found = _not_unicode(key, f"a key in {where}") or _not_toml(item, _member(where, key))
            if found is not None:
                return found
        return None
    if isinstance(value, list):
        return next((p for i, item in enumerate(value) if (p := _not_toml(item, f"{where}[{i}]")) is not None), None)
    if value is None:
        return f"{where} is null: TOML has no null; leave the key out instead"
    if isinstance(value, str):
        return _not_unicode(value, where)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if value in _TOML_INT else f"{where} is an integer outside TOML's 64-bit range"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} is NaN or infinite"
    return f"{where} is a {type(value).__name__}, which TOML cannot hold"


def _member(where: str, key: str) -> str:
    """``where.key``, or ``where['a long or odd key'...]`` cut short (a client chose it)."""
    return f"{where}.{key}" if _PLAIN_KEY.fullmatch(key) else f"{where}[{shown(key, 40)}]"


def _not_unicode(text: object, where: str) -> str | None:
    if not isinstance(text, str):
        return f"{where} is a {type(text).__name__}, not a string"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{where} is not valid Unicode (a lone surrogate)"
    return None


def _write_file(path: Path, data: bytes) -> None:
    # Refuses an existing path (FileExistsError), as the clash check above expects.
    # The whole folder is fsynced once, before it is renamed into place.
    atomic_write(path, data, replace=False, sync_dir=False, mode=0o644)
