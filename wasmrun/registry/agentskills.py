"""Anthropic's Agent Skills folders, as they are on disk, served as protocol skills.

An Agent Skill is a folder holding a `SKILL.md` (and no `skill.toml`) whose YAML
frontmatter has `name` and `description`, optionally `license`, `compatibility`,
`metadata` (string to string) and `allowed-tools`; beside it `scripts/`,
`references/`, `assets/`. Its name is lowercase letters, digits and single
hyphens, at most 64 characters, and is the folder's name.

The one mapping to the protocol's names: **hyphens become underscores**, so the
Agent Skill `pdf-tools` is the protocol skill `pdf_tools` (no namespace). Lookups
take either spelling (`normalise_name`). The protocol manifest is derived:
version from `metadata.version` when it is a semantic version, else `0.0.0`;
kind `instruction` (nothing to execute_skill: mount it in run_code and run its
scripts with `runtime.skills.run_script`).
"""

from __future__ import annotations

import re
from typing import Any

from wasmrun.registry.manifest import SEMVER, Manifest, Packages, package_problems

AGENT_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
MAX_AGENT_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
UNVERSIONED = "0.0.0"
FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")


def protocol_name(agent_name: str) -> str:
    """`pdf-tools` -> `pdf_tools`."""
    return agent_name.replace("-", "_")


def normalise_name(name: str) -> str:
    """A name as a client gave it, in protocol spelling (hyphens are never part of one)."""
    return name.replace("-", "_") if "-" in name else name


def frontmatter_problems(meta: dict[str, Any], folder_name: str) -> list[str]:
    """What is wrong with an Agent Skill's frontmatter (the hard rules: it is not served),
    each said in full. The soft rules are `frontmatter_warnings`."""
    problems: list[str] = []
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        problems.append("frontmatter `name` is missing (lowercase letters, digits and hyphens, e.g. 'pdf-tools')")
    elif len(name) > MAX_AGENT_NAME or not AGENT_NAME.fullmatch(name):
        problems.append(
            f"frontmatter name {name[:80]!r} must be lowercase letters, digits and single hyphens,"
            f" not starting or ending with a hyphen, at most {MAX_AGENT_NAME} characters"
        )
    elif name[0].isdigit():
        problems.append(f"frontmatter name {name!r} starts with a digit: it cannot be a protocol skill name")
    elif name != folder_name:
        problems.append(f"frontmatter name {name!r} must be the folder's name ({folder_name[:80]!r})")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append("frontmatter `description` is missing or empty (what the skill does and when to use it)")
    if "license" in meta and not isinstance(meta["license"], str):
        problems.append("frontmatter `license` must be a string")
    compatibility = meta.get("compatibility")
    if "compatibility" in meta and (not isinstance(compatibility, str) or not compatibility):
        problems.append("frontmatter `compatibility` must be a non-empty string")
    metadata = meta.get("metadata")
    if "metadata" in meta and (
        not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())
    ):
        problems.append("frontmatter `metadata` must map strings to strings")
    if "allowed-tools" in meta and not isinstance(meta["allowed-tools"], str):
        problems.append("frontmatter `allowed-tools` must be a string (space-separated tool names)")
    if isinstance(metadata, dict) and isinstance(metadata.get("requires-packages"), str):
        problems += [f"metadata.requires-{p}" for p in package_problems(metadata["requires-packages"].split())]
    return problems


def frontmatter_warnings(meta: dict[str, Any]) -> list[str]:
    """The format's soft rules an Agent Skill breaks: it is served as written, with these
    warnings (in `wasmrun skills check` and the server log). Real skills break them
    (Anthropic's claude-api has a 1,068-character description); nothing here stops
    the skill from working."""
    warnings: list[str] = []
    unknown = sorted(set(meta) - set(FIELDS))
    if unknown:
        warnings.append(
            f"unknown frontmatter field(s) {', '.join(map(repr, unknown))} (ignored); the format's:"
            f" {', '.join(FIELDS)}"
        )
    description = meta.get("description")
    if isinstance(description, str) and len(description) > MAX_DESCRIPTION:
        warnings.append(
            f"frontmatter description is {len(description)} characters, over the format's {MAX_DESCRIPTION}"
            " (served whole; some clients cut it)"
        )
    compatibility = meta.get("compatibility")
    if isinstance(compatibility, str) and len(compatibility) > MAX_COMPATIBILITY:
        warnings.append(f"frontmatter `compatibility` is over the format's {MAX_COMPATIBILITY} characters")
    return warnings


def derived_manifest(meta: dict[str, Any]) -> tuple[Manifest, dict[str, Any]]:
    """The protocol manifest of a valid Agent Skill, and its JSON form for describe_skill."""
    metadata = meta.get("metadata") or {}
    version = metadata.get("version", "")
    if not SEMVER.fullmatch(version):
        version = UNVERSIONED
    raw: dict[str, Any] = {
        "name": protocol_name(meta["name"]),
        "version": version,
        "description": meta["description"],
        "kind": "instruction",
    }
    # `metadata.requires-packages`: space-separated package names (metadata values are strings).
    requires = metadata.get("requires-packages", "").split()
    manifest = Manifest(
        name=raw["name"], version=version, description=raw["description"], kind="instruction",
        packages=Packages(requires=requires),
    )
    # Not a skill.toml key: says where the skill came from and its own name.
    raw["agent_skill"] = {"name": meta["name"], "format": "Agent Skills (SKILL.md)"}
    return manifest, raw
