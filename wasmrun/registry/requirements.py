"""The packages a skill declares against those the server's layer holds
(`[packages] requires` in skill.toml, `metadata.requires-packages` in SKILL.md)."""

from __future__ import annotations

from pathlib import Path

from wasmrun.packages import layer, names
from wasmrun.registry.manifest import Manifest


def missing(manifest: Manifest, package_layer: Path | None) -> list[str]:
    """The declared packages the layer at `package_layer` lacks, as the skill names them."""
    if not manifest.packages.requires:
        return []
    installed = layer.installed_names(package_layer) if package_layer is not None else frozenset()
    return [r for r in manifest.packages.requires if names.canonical(names.parse(r).name) not in installed]


def missing_message(skill: str, wanted: list[str]) -> str:
    return (
        f"skill {skill} requires packages this server does not have: {', '.join(wanted)};"
        f" the operator adds them with `wasmrun packages add {' '.join(wanted)}`"
    )
