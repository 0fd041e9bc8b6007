"""Writing skill folders for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

# What every run's environment holds before its grants: its home is its /workspace
# (python_wasm/runtime/_boot.py BASE_ENV; the data image's prelude sets the same).
GUEST_BASE_ENV = {"HOME": "/workspace"}


def write_skill(
    top: Path,
    name: str,
    version: str = "0.1.0",
    *,
    code: str | None = "def main(args):\n    return {'echo': args}\n",
    kind: str = "action",
    skill_md: str | None = None,
    files: dict[str, str | bytes] | None = None,
    **manifest: Any,
) -> Path:
    """A skill folder `top/<name>/<version>/`; `code` becomes code/main.py (None: no runtime)."""
    root = top / name / version
    (root / "code").mkdir(parents=True)
    doc: dict[str, Any] = {
        "name": name,
        "version": version,
        "description": f"The {name} skill.",
        "kind": kind,
    }
    doc.update(manifest)
    if code is not None:
        doc.setdefault("runtime", {"language": "python", "entrypoint": "code/main.py", "export": "main"})
        (root / "code" / "main.py").write_text(code)
    (root / "skill.toml").write_text(tomli_w.dumps(doc))
    if skill_md is None:
        skill_md = f"---\nname: {name} title\nshort_description: Short {name}.\n---\n# {name}\n"
    (root / "SKILL.md").write_text(skill_md)
    for rel, content in (files or {}).items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return root
