"""Skill folders on disk: finding them (any folder holding a skill.toml, or a SKILL.md
without one: an Anthropic Agent Skill, mapped by registry/agentskills.py), loading and
validating one (`load_skill`, SkillProblems listing what is wrong), and the signature
of modification times a change to them shows up in."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from wasmrun.registry import agentskills
from wasmrun.registry.files import FileTooLarge, inside, is_file, read_regular
from wasmrun.registry.manifest import Manifest, ManifestError, validate_manifest
from wasmrun.registry.skill import DOC_FILE, MANIFEST_FILE, Skill
from wasmrun.registry.skillmd import parse_frontmatter

# skill.toml and SKILL.md are read whole into memory at load time: far above any real one.
MAX_DESCRIPTOR_BYTES = 1024 * 1024


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
        raw = tomllib.loads(read_regular(root / MANIFEST_FILE, MAX_DESCRIPTOR_BYTES).decode("utf-8"))
        manifest = validate_manifest(raw)
    except (UnicodeDecodeError, FileTooLarge, OSError) as exc:
        problems.append(_unreadable(MANIFEST_FILE, exc))
    except tomllib.TOMLDecodeError as exc:
        problems.append(f"{MANIFEST_FILE} is not valid TOML: {exc}")
    except RecursionError:  # tomllib refuses inline tables/arrays nested 400 deep this way
        problems.append(f"{MANIFEST_FILE} nests inline tables/arrays too deeply")
    except ManifestError as exc:
        problems.extend(f"{MANIFEST_FILE}: {p}" for p in exc.problems)
    meta: dict[str, Any] = {}
    try:
        meta = parse_frontmatter(read_doc(root))
    except (UnicodeDecodeError, FileTooLarge, OSError) as exc:
        problems.append(_unreadable(DOC_FILE, exc))
    except ValueError as exc:  # FrontmatterError
        problems.append(f"{DOC_FILE}: {exc}")
    if manifest is not None and manifest.runtime is not None:
        entry = root / manifest.runtime.entrypoint
        if not inside(root, entry) or not is_file(entry):
            problems.append(
                f"runtime.entrypoint {manifest.runtime.entrypoint!r} is not a file inside the skill"
            )
    if problems or manifest is None:
        raise SkillProblems(problems)
    return Skill(manifest=manifest, raw_manifest=raw, frontmatter=meta, root=root)


def _unreadable(name: str, exc: UnicodeDecodeError | FileTooLarge | OSError) -> str:
    """Why descriptor `name` of a skill folder could not be read, as a problem to list."""
    if isinstance(exc, FileNotFoundError):
        return f"{name} is missing"
    if isinstance(exc, UnicodeDecodeError):
        return f"{name} is not UTF-8"
    if isinstance(exc, FileTooLarge):
        return f"{name} is too large ({exc})"
    return f"{name} cannot be read: {exc.strerror}"


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

