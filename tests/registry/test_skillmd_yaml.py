"""SKILL.md frontmatter: no YAML alias bombs, no deep nesting, at create time and at load time."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.skillfiles import write_skill
from wasmrun.registry import skillmd
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import assemble, create_app
from wasmrun.settings import BUNDLED_SKILLS, Settings


def alias_bomb(levels: int) -> str:
    """A few hundred bytes that expand 9**levels times once aliases are resolved."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "---\n" + "\n".join(lines) + "\n---\n# Bomb\n"


def manifest(name: str = "user.yaml.probe") -> dict[str, Any]:
    return {"name": name, "version": "1.0.0", "description": "Probe.", "kind": "instruction"}


@pytest.mark.parametrize(
    "skill_md, words",
    [
        pytest.param(alias_bomb(7), "anchors", id="alias-bomb"),
        pytest.param("---\na: &x 1\nb: *x\n---\n", "anchors", id="one-alias"),
        pytest.param("---\nb: *x\n---\n", "aliases", id="undefined-alias"),
        pytest.param("---\na: &x {k: v}\n---\n", "anchors", id="anchor-only"),
        pytest.param("---\n<<: &m {k: v}\n---\n", "anchors", id="merge-with-anchor"),
        pytest.param("---\na: " + "[" * 40 + "]" * 40 + "\n---\n", "nested deeper", id="nested-40"),
        pytest.param("---\na: '" + "x" * 70_000 + "'\n---\n", "longer than", id="huge"),
        pytest.param("---\na: !!python/object:os.system x\n---\n", "does not parse", id="python-tag"),
        pytest.param("---\nd: 2001-02-30\n---\n", "bad value", id="bad-date"),
    ],
)
def test_create_skill_refuses_hostile_frontmatter(rpc: Any, settings: Settings, skill_md: str, words: str) -> None:
    error = rpc("create_skill", {"manifest": manifest(), "skill_md": skill_md})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "skill_md")
    assert words in error["message"]
    assert rpc("describe_skill", {"name": "user.yaml.probe"})["error"]["code"] == -32602
    assert not (settings.skills_home / "user.yaml.probe").exists()


def test_plain_frontmatter_still_parses(rpc: Any) -> None:
    skill_md = "---\nname: Probe\ntags: [a, b]\nnested: {k: [1, 2, {x: y}]}\nwhen: 2024-01-02\n---\n# Probe\n"
    assert "result" in rpc("create_skill", {"manifest": manifest(), "skill_md": skill_md})
    fm = rpc("describe_skill", {"name": "user.yaml.probe"})["result"]["skill"]["skill_md_frontmatter"]
    assert fm == {"name": "Probe", "tags": ["a", "b"], "nested": {"k": [1, 2, {"x": "y"}]}, "when": "2024-01-02"}


def test_a_bomb_among_operator_skills_is_skipped_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, executor: InProcessExecutor
) -> None:
    extra = tmp_path / "operator"
    write_skill(extra, "op.bomb", skill_md=alias_bomb(9), code=None, kind="instruction")
    write_skill(extra, "op.deep", skill_md="---\na: " + "[" * 5000 + "]" * 5000 + "\n---\n", code=None,
                kind="instruction")
    write_skill(extra, "op.fine")
    settings = Settings(data_dir=tmp_path / "data", skills_dirs=(BUNDLED_SKILLS, extra), workers=1)
    with caplog.at_level(logging.WARNING, logger="wasmrun.registry"):
        server = assemble(settings, executor=executor)
    with TestClient(create_app(server), base_url="http://localhost") as client:
        listed = client.post("/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "list_skills",
                                           "params": {"namespace": "op"}}).json()
    assert [s["name"] for s in listed["result"]["skills"]] == ["op.fine"]
    skipped = [r.getMessage() for r in caplog.records if "skipping invalid skill" in r.getMessage()]
    assert any("op.bomb" in m and "anchors (&name) are not allowed" in m for m in skipped), skipped
    assert any("op.deep" in m and "nested deeper than" in m for m in skipped), skipped


def test_the_guide_body_is_cut_without_parsing_yaml() -> None:
    text = alias_bomb(9) + "\nthe body\n"
    assert skillmd.body(text) == "# Bomb\n\nthe body"
    with pytest.raises(skillmd.FrontmatterError):
        skillmd.parse_frontmatter(text)
