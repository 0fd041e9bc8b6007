"""The packages a skill declares (`[packages] requires` in skill.toml, `metadata.requires-packages`
in SKILL.md) against those a run can import as the server is: the image's own and the operator's
layer. What is lacking is installed on demand when the operator's policy allows it (the caller's
`ProvidePackages`: protocol/packages.py), else said (create_skill refuses; a folder skill loads
with a warning)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from wasmrun.packages import layer, names
from wasmrun.registry.manifest import Manifest

# Makes `lacking` importable by the skill's runs (an on-demand set, built now or found), or raises
# the installer's refusal (its own error type: the caller maps it). Blocking: it may run pip.
ProvidePackages = Callable[[list[str]], object]


def lacking(requires: Sequence[str], package_layer: Path | None) -> list[str]:
    """Those of `requires` neither the image nor the layer at `package_layer` has, as written."""
    if not requires:
        return []
    installed = layer.installed_names(package_layer) if package_layer is not None else frozenset()
    return [r for r in requires if names.name_of(r) not in installed]


def missing(manifest: Manifest, package_layer: Path | None) -> list[str]:
    """The declared packages the layer at `package_layer` lacks, as the skill names them."""
    return lacking(manifest.packages.requires, package_layer)


def missing_message(skill: str, wanted: list[str]) -> str:
    return (
        f"skill {skill} requires packages this server does not have: {', '.join(wanted)};"
        f" the operator adds them with `wasmrun packages add {' '.join(wanted)}`"
    )
