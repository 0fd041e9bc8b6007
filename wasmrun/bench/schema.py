"""The JSON a bench run writes (`--json`): its schema, versioned, and the check `--from-json`
and `--compare` make before reading one. docs/bench.md describes the fields;
`wasmrun bench --schema` prints this schema (JSON Schema, draft 2020-12)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# 2: p99/max on every figure, the host and its load before/after, the cold, tti, data-peers
#    and code sections. (Version 1, unversioned, had p50/p90 and a one-line machine.)
SCHEMA_VERSION = 2
SECTION_NAMES = ("startup", "cold", "tti", "data-peers", "code", "compute")

_MS = {"type": ["number", "null"], "minimum": 0}
FIGURE: dict[str, Any] = {
    "type": "object",
    "required": ["n", "p50_ms", "p90_ms", "p99_ms", "max_ms"],
    "properties": {
        "n": {"type": "integer", "minimum": 0, "description": "samples that succeeded"},
        "p50_ms": _MS, "p90_ms": _MS, "p99_ms": _MS, "max_ms": _MS, "mean_ms": _MS,
        "ratio": {"type": ["number", "null"], "description": "p50 over the row's baseline's p50"},
        "attempts": {"type": "integer", "minimum": 0, "description": "samples tried, failures included"},
        "success_rate": {"type": "number", "minimum": 0, "maximum": 1},
    },
}
ROW: dict[str, Any] = {
    "type": "object",
    "required": ["label", "section", "what", "systems"],
    "properties": {
        "label": {"type": "string"},
        "section": {"enum": list(SECTION_NAMES)},
        "what": {"type": "string", "description": "what the row measures, from when to when"},
        "baseline": {"type": ["string", "null"], "description": "the system the ratios divide by"},
        "systems": {"type": "object", "additionalProperties": FIGURE},
        "samples_ms": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "number"}}},
        "absent": {"type": "string", "description": "why the row could not be measured here"},
    },
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "wasmrun bench report",
    "type": "object",
    "required": ["schema_version", "date", "machine", "host", "load", "quick", "rounds", "rows", "systems", "peers"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "date": {"type": "string"},
        "machine": {"type": "string", "description": "one line: arch, cores, kernel, versions"},
        "host": {
            "type": "object",
            "required": ["cpu_model", "cores", "os", "versions", "load_before", "load_after"],
            "properties": {
                "cpu_model": {"type": "string"}, "cores": {"type": "integer", "minimum": 1},
                "arch": {"type": "string"}, "os": {"type": "string"}, "memory_mb": {"type": ["number", "null"]},
                "versions": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
                "load_before": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
                "load_after": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3},
            },
        },
        "load": {"type": "array", "items": {"type": "number"}},
        "quick": {"type": "boolean"},
        "rounds": {"type": "integer", "minimum": 0},
        "rows": {"type": "object", "additionalProperties": ROW},
        "absent_rows": {"type": "object", "additionalProperties": {"type": "string"}},
        "section_notes": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
        "published": {"type": "array", "description": "others' published figures, cited (never ours)"},
        "systems": {"type": "object", "additionalProperties": {"type": "string"}},
        "peers": {
            "type": "object",
            "additionalProperties": {
                "type": "object", "required": ["present"],
                "properties": {"present": {"type": "boolean"}, "isolates": {"type": "string"}, "why": {"type": "string"}},
            },
        },
        "notes": {"type": "array", "items": {"type": "string"}},
        "phases": {"type": "object"}, "hops": {"type": ["object", "null"]},
        "memory": {"type": "object"}, "scaling": {"type": ["object", "null"]},
    },
}

# What an older (version 1) file must hold to be rendered again.
_V1_REQUIRED = ("date", "machine", "load", "quick", "rounds", "rows", "phases", "memory", "systems", "peers")


def load(path: Path) -> dict[str, Any]:
    """An earlier run's JSON (`--json`), checked to be one (this version's shape, or version 1's)."""
    try:
        figures = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path} is not a bench JSON file: {exc}") from None
    if not isinstance(figures, dict):
        raise ValueError(f"{path} is not a bench JSON file (not an object)")
    version = figures.get("schema_version", 1)
    if version not in (1, SCHEMA_VERSION):
        raise ValueError(f"{path} is a bench JSON file of schema version {version!r}; this wasmrun reads 1 and "
                         f"{SCHEMA_VERSION}")
    required = _V1_REQUIRED if version == 1 else SCHEMA["required"]
    missing = [key for key in required if key not in figures]
    if missing:
        raise ValueError(f"{path} is not a bench JSON file (it lacks {', '.join(missing)})")
    if not isinstance(figures["rows"], dict) or not all(isinstance(r, dict) for r in figures["rows"].values()):
        raise ValueError(f"{path} is not a bench JSON file (its rows are not objects)")
    return figures
