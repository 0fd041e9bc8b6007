"""Every bundled skill folder is a well-formed skill: manifest, SKILL.md and code."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import frontmatter
import pytest

SKILLS_DIR = Path(__file__).resolve().parents[2] / "skills"
SKILL_DIRS = sorted(p for p in SKILLS_DIR.iterdir() if p.is_dir())
# Stdlib modules that exist but cannot work in the CPython-on-WASI sandbox.
UNAVAILABLE_IN_SANDBOX = frozenset({
    "zlib", "gzip", "zipfile", "socket", "ssl", "threading", "subprocess", "multiprocessing",
    "ctypes", "sqlite3", "asyncio", "concurrent", "urllib", "http",
})


def _manifest(skill_dir: Path) -> dict[str, Any]:
    return tomllib.loads((skill_dir / "skill.toml").read_text("utf-8"))


def _is_action(skill_dir: Path) -> bool:
    # Tolerant, since it runs at collection: a broken manifest fails test_manifest_is_valid instead.
    try:
        return _manifest(skill_dir).get("kind") == "action"
    except (OSError, tomllib.TOMLDecodeError):
        return False


ACTION_DIRS = [p for p in SKILL_DIRS if _is_action(p)]


def _param(skill_dir: Path) -> Any:
    return pytest.param(skill_dir, id=skill_dir.name)


def test_the_bundled_skills_are_present() -> None:
    names = {p.name for p in SKILL_DIRS}
    assert {"skills.protocol.guide", "data.csv.profile", "data.json.query", "text.stats"} <= names


@pytest.mark.parametrize("skill_dir", [_param(p) for p in SKILL_DIRS])
def test_manifest_is_valid(skill_dir: Path) -> None:
    manifest = _manifest(skill_dir)
    for key in ("name", "version", "description", "kind"):
        assert isinstance(manifest.get(key), str) and manifest[key].strip(), f"{key} is required"
    assert manifest["name"] == skill_dir.name
    assert manifest["version"] == "0.1.0"
    assert manifest["kind"] in ("action", "instruction")
    assert all(isinstance(tag, str) for tag in manifest.get("tags", []))


@pytest.mark.parametrize("skill_dir", [_param(p) for p in SKILL_DIRS])
def test_skill_md_has_frontmatter(skill_dir: Path) -> None:
    post = frontmatter.load(str(skill_dir / "SKILL.md"))
    for key in ("name", "short_description"):
        assert isinstance(post.metadata.get(key), str) and post.metadata[key].strip(), f"{key} is required"
    assert post.content.strip()


@pytest.mark.parametrize("skill_dir", [_param(p) for p in ACTION_DIRS])
def test_action_skill_runtime(skill_dir: Path) -> None:
    runtime = _manifest(skill_dir)["runtime"]
    assert runtime["language"] == "python"
    entry = PurePosixPath(runtime["entrypoint"])
    assert not entry.is_absolute() and ".." not in entry.parts and entry.suffix == ".py"
    entry_file = skill_dir / entry
    assert entry_file.is_file()
    tree = ast.parse(entry_file.read_text("utf-8"))
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert runtime["export"] in functions


@pytest.mark.parametrize("skill_dir", [_param(p) for p in ACTION_DIRS])
def test_action_skill_documents_inputs_and_examples(skill_dir: Path) -> None:
    name = skill_dir.name
    inputs = _manifest(skill_dir)["inputs"]
    assert inputs and all({"type", "description"} <= set(spec) for spec in inputs.values())
    body = frontmatter.load(str(skill_dir / "SKILL.md")).content
    assert f'"name": "{name}"' in body  # the execute_skill example
    assert f"from skills.{name} import main" in body  # the run_code example
    for arg in inputs:
        assert f"`{arg}`" in body, f"SKILL.md does not document {arg!r}"


@pytest.mark.parametrize("skill_dir", [_param(p) for p in ACTION_DIRS])
def test_action_skill_imports_only_what_the_sandbox_has(skill_dir: Path) -> None:
    for source in sorted((skill_dir / "code").rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = [node.module.split(".")[0]]
            else:
                continue  # relative imports stay inside the skill
            for top in tops:
                where = f"{source.relative_to(SKILLS_DIR)}: import {top}"
                assert top == "runtime" or top in sys.stdlib_module_names, f"{where} is not stdlib"
                assert top not in UNAVAILABLE_IN_SANDBOX, f"{where} does not work in the sandbox"


def test_protocol_guide_is_the_canonical_instruction_skill() -> None:
    skill_dir = SKILLS_DIR / "skills.protocol.guide"
    assert _manifest(skill_dir) == {
        "name": "skills.protocol.guide",
        "version": "0.1.0",
        "description": "Intro to the Skills Protocol for LLMs.",
        "kind": "instruction",
        "namespace": "skills.protocol",
        "tags": ["guide", "bootstrap"],
    }
    text = (skill_dir / "SKILL.md").read_text("utf-8")
    assert text.startswith("---\nname: Skills Protocol Guide\nshort_description: How to use the Skills Protocol tools.\n---\n")
    post = frontmatter.loads(text)
    assert post.content.startswith("# Skills Protocol Overview")
    tools = ("list_skills", "describe_skill", "read_skill_file", "execute_skill", "run_code",
             "create_blob", "read_blob", "load_skills_protocol_guide")
    assert all(f"`{tool}`" in post.content for tool in tools)
    assert not (skill_dir / "code").exists()
