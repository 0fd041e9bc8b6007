"""list_skills, describe_skill, read_skill_file and load_skills_protocol_guide."""

from __future__ import annotations

import base64
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from skillfiles import write_skill

from wasmrun.settings import BUNDLED_SKILLS

Rpc = Callable[..., dict[str, Any]]

SPEC = Path("/work/shared/spec/skills-protocol-v0.1.txt")


@pytest.fixture()
def skills_dir(skills_dir: Path) -> Path:
    write_skill(skills_dir, "acme.crm.sync", "0.9.0", namespace="acme", tags=["crm"])
    write_skill(skills_dir, "acme.crm.sync", "0.10.0", namespace="acme", tags=["crm"])
    write_skill(skills_dir, "acme.crm.sync", "1.0.0-rc.1", namespace="acme")
    write_skill(skills_dir, "acme.crm.export", "2.0.0", namespace="acme")
    write_skill(
        skills_dir,
        "acme.docs",
        "1.0.0",
        kind="instruction",
        code=None,
        files={"resources/notes.md": "notes\n", "resources/logo.png": b"\x89PNG\r\n\x1a\n\x00\xff"},
    )
    write_skill(skills_dir, "zeta.tool", "0.1.0")  # namespace defaults to "zeta"
    write_skill(skills_dir, "acmeish.tool", "0.1.0")  # "acme" must not match "acmeish"
    bad = skills_dir / "broken"
    bad.mkdir()
    (bad / "skill.toml").write_text('name = "broken"\nversion = "one"\n')
    return skills_dir


def names(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["name"], s["version"]) for s in result["skills"]]


# -- list_skills --------------------------------------------------------------


def test_list_order_is_namespace_name_then_version_descending(rpc: Rpc) -> None:
    result = rpc("list_skills", {"namespace": "acme"})["result"]
    assert names(result) == [
        ("acme.crm.export", "2.0.0"),
        ("acme.crm.sync", "1.0.0-rc.1"),
        ("acme.crm.sync", "0.10.0"),
        ("acme.crm.sync", "0.9.0"),
        ("acme.docs", "1.0.0"),
    ]
    assert result["next_cursor"] is None


def test_list_all_is_sorted_and_has_the_bundled_skills(rpc: Rpc) -> None:
    skills = rpc("list_skills", {"limit": 200})["result"]["skills"]
    keys = [(s["namespace"], s["name"]) for s in skills]
    assert keys == sorted(keys)
    listed = {s["name"] for s in skills}
    assert {"skills.protocol.guide", "data.csv.profile", "zeta.tool"} <= listed
    assert "broken" not in listed


@pytest.mark.parametrize(
    "namespace, expected",
    [
        pytest.param("zeta", ["zeta.tool"], id="default-namespace"),
        pytest.param("acme.crm", [], id="declared-namespace-is-exact-prefix"),
        pytest.param("skills", ["skills.protocol.guide"], id="parent-namespace"),
        pytest.param("skills.protocol", ["skills.protocol.guide"], id="exact"),
        pytest.param("nothing", [], id="none"),
    ],
)
def test_namespace_filter(rpc: Rpc, namespace: str, expected: list[str]) -> None:
    result = rpc("list_skills", {"namespace": namespace})["result"]
    assert sorted({s["name"] for s in result["skills"]}) == expected


def test_names_detail_has_the_spec_fields(rpc: Rpc) -> None:
    entry = rpc("list_skills", {"namespace": "zeta"})["result"]["skills"][0]
    assert entry == {
        "name": "zeta.tool",
        "version": "0.1.0",
        "description": "The zeta.tool skill.",
        "namespace": "zeta",
        "kind": "action",
    }


def test_summary_detail_adds_tags_and_frontmatter(rpc: Rpc) -> None:
    entry = rpc("list_skills", {"namespace": "acme", "detail": "summary", "limit": 2})["result"]["skills"][1]
    assert entry["name"] == "acme.crm.sync"
    assert entry["tags"] == []
    assert entry["title"] == "acme.crm.sync title"
    assert entry["short_description"] == "Short acme.crm.sync."


@pytest.mark.parametrize("limit", [pytest.param(1, id="1"), pytest.param(2, id="2"), pytest.param(3, id="3")])
def test_cursor_pages_through_everything_once(rpc: Rpc, limit: int) -> None:
    everything = names(rpc("list_skills", {"limit": 200})["result"])
    seen: list[tuple[str, str]] = []
    cursor = None
    for _ in range(100):
        page = rpc("list_skills", {"limit": limit, "cursor": cursor})["result"]
        assert len(page["skills"]) <= limit
        seen += names(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == everything


def test_last_full_page_has_null_cursor(rpc: Rpc) -> None:
    result = rpc("list_skills", {"namespace": "acme", "limit": 5})["result"]
    assert len(result["skills"]) == 5 and result["next_cursor"] is None


def test_limit_is_capped(rpc: Rpc) -> None:
    assert "result" in rpc("list_skills", {"limit": 10**6})


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param("garbage!", id="not-base64"),
        pytest.param("WzFd", id="wrong-shape"),
        pytest.param("WyJhIiwiYiIsIngiXQ", id="bad-version"),
    ],
)
def test_bad_cursor(rpc: Rpc, cursor: str) -> None:
    error = rpc("list_skills", {"cursor": cursor})["error"]
    assert error["code"] == -32602 and error["data"]["field"] == "cursor"


# -- describe_skill ------------------------------------------------------------


@pytest.mark.parametrize(
    "version, expected",
    [
        # 1.0.0-rc.1 outranks 0.10.0 and 0.9.0 in semver precedence.
        pytest.param(None, "1.0.0-rc.1", id="latest-is-highest-semver"),
        pytest.param("0.9.0", "0.9.0", id="pinned"),
    ],
)
def test_version_selection(rpc: Rpc, version: str | None, expected: str) -> None:
    params = {"name": "acme.crm.sync", "detail": "manifest", "version": version}
    assert rpc("describe_skill", params)["result"]["skill"]["manifest"]["version"] == expected


def test_release_outranks_its_prerelease(rpc: Rpc, skills_dir: Path, context: Any) -> None:
    write_skill(skills_dir, "acme.crm.sync", "1.0.0", namespace="acme")
    context.registry.reload()
    assert (
        rpc("describe_skill", {"name": "acme.crm.sync"})["result"]["skill"]["manifest"]["version"] == "1.0.0"
    )


def test_describe_levels(rpc: Rpc) -> None:
    manifest = rpc("describe_skill", {"name": "zeta.tool", "detail": "manifest"})["result"]["skill"]
    assert set(manifest) == {"manifest"}
    assert manifest["manifest"]["runtime"] == {
        "language": "python",
        "entrypoint": "code/main.py",
        "export": "main",
    }
    summary = rpc("describe_skill", {"name": "zeta.tool"})["result"]["skill"]
    assert summary["skill_md_frontmatter"] == {
        "name": "zeta.tool title",
        "short_description": "Short zeta.tool.",
    }
    assert set(summary) == {"manifest", "skill_md_frontmatter"}
    full = rpc("describe_skill", {"name": "zeta.tool", "detail": "full"})["result"]["skill"]
    assert full["skill_md"].startswith("---\nname: zeta.tool title")
    assert full["files"] == ["SKILL.md", "code/main.py", "skill.toml"]


def test_describe_bundled_skill_like_the_spec_client(rpc: Rpc) -> None:
    info = rpc("describe_skill", {"name": "data.csv.profile"})["result"]
    assert info["skill"]["manifest"]["description"]
    assert info["skill"]["manifest"]["name"] == "data.csv.profile"


@pytest.mark.parametrize(
    "params, field, words",
    [
        pytest.param({"name": "no.such"}, "name", "no skill named 'no.such'", id="unknown-skill"),
        pytest.param(
            {"name": "zeta.tool", "version": "9.9.9"}, "version", "available: 0.1.0", id="unknown-version"
        ),
    ],
)
def test_describe_missing(rpc: Rpc, params: dict[str, Any], field: str, words: str) -> None:
    error = rpc("describe_skill", params)["error"]
    assert error["code"] == -32602
    assert error["data"]["field"] == field
    assert words in error["message"]


# -- read_skill_file -------------------------------------------------------------


def test_read_text_file(rpc: Rpc) -> None:
    result = rpc("read_skill_file", {"name": "acme.docs", "path": "resources/notes.md"})["result"]
    assert result == {"content": "notes\n", "encoding": "utf-8", "size_bytes": 6}


def test_read_skill_md_like_the_spec_client(rpc: Rpc) -> None:
    content = rpc("read_skill_file", {"name": "data.csv.profile", "path": "SKILL.md"})["result"]["content"]
    assert content == (BUNDLED_SKILLS / "data.csv.profile" / "SKILL.md").read_text()


def test_read_binary_file_is_base64(rpc: Rpc) -> None:
    result = rpc("read_skill_file", {"name": "acme.docs", "path": "resources/logo.png"})["result"]
    assert result["encoding"] == "base64"
    assert base64.b64decode(result["content"]) == b"\x89PNG\r\n\x1a\n\x00\xff"


def test_read_pinned_version(rpc: Rpc) -> None:
    result = rpc("read_skill_file", {"name": "acme.crm.sync", "version": "0.9.0", "path": "skill.toml"})[
        "result"
    ]
    assert 'version = "0.9.0"' in result["content"]


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("../0.9.0/skill.toml", id="dotdot"),
        pytest.param("code/../../0.9.0/SKILL.md", id="dotdot-inside"),
        pytest.param("/etc/passwd", id="absolute"),
        pytest.param("code\\main.py", id="backslash"),
        pytest.param("SKILL.md\x00.txt", id="nul"),
        pytest.param("", id="empty"),
        pytest.param("escape", id="symlink-out"),
        pytest.param("escape_dir/passwd", id="symlink-dir-out"),
    ],
)
def test_unsafe_paths_are_refused(rpc: Rpc, skills_dir: Path, path: str) -> None:
    root = skills_dir / "zeta.tool" / "0.1.0"
    outside = skills_dir.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "passwd").write_text("secret")
    os.symlink(outside / "passwd", root / "escape")
    os.symlink(outside, root / "escape_dir")
    error = rpc("read_skill_file", {"name": "zeta.tool", "path": path})["error"]
    assert error["code"] == -32602
    assert error["data"]["field"] == "path"
    assert str(skills_dir) not in error["message"]


def test_symlink_inside_the_skill_is_fine(rpc: Rpc, skills_dir: Path) -> None:
    root = skills_dir / "zeta.tool" / "0.1.0"
    os.symlink("code/main.py", root / "alias.py")
    assert rpc("read_skill_file", {"name": "zeta.tool", "path": "alias.py"})["result"]["content"].startswith(
        "def main"
    )


@pytest.mark.parametrize(
    "path, words",
    [pytest.param("nope.md", "has no file", id="missing"), pytest.param("code", "is a folder", id="folder")],
)
def test_read_not_a_file(rpc: Rpc, path: str, words: str) -> None:
    error = rpc("read_skill_file", {"name": "zeta.tool", "path": path})["error"]
    assert error["code"] == -32602 and words in error["message"]


# -- load_skills_protocol_guide ------------------------------------------------


def _spec_guide_body() -> str:
    text = SPEC.read_text()
    section = text.split("Canonical Instruction Skill: skills.protocol.guide", 1)[1]
    md = section.split("SKILL.md", 1)[1].split("Sandbox Execution Model", 1)[0]
    body = md.split("---", 2)[2]
    return "\n".join(line.rstrip() for line in body.strip().splitlines())


@pytest.mark.skipif(not SPEC.exists(), reason="spec text not available")
def test_guide_is_the_canonical_skill_md(rpc: Rpc) -> None:
    result = rpc("load_skills_protocol_guide", {})["result"]
    assert result["content"].startswith("# Skills Protocol Overview")
    normalise = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731  (the spec text is reflowed)
    # The spec's text, verbatim, then this runtime's own section on writing
    # code for its sandbox (the run contract, runtime.blobs, what is there).
    canonical, _, own = result["content"].partition("\n## Writing code for `run_code`\n")
    assert normalise(canonical) == normalise(_spec_guide_body())
    assert "runtime.blobs" in own and "/blobs/<blob id>" in own
    assert (result["name"], result["version"]) == ("skills.protocol.guide", "0.1.0")


def test_guide_matches_bundled_file(rpc: Rpc) -> None:
    content = rpc("load_skills_protocol_guide")["result"]["content"]
    on_disk = (BUNDLED_SKILLS / "skills.protocol.guide" / "SKILL.md").read_text()
    written, generated = content.split("\n## This server (generated from its configuration)\n")
    assert written.strip() == on_disk.split("---", 2)[2].strip()
    assert "Network: none for run_code" in generated and "timeout_ms 30000 (max 900000)" in generated


def test_invalid_skill_on_disk_is_logged_not_fatal(
    skills_dir: Path, context: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="wasmrun.registry"):
        context.registry.reload()
    assert any("broken" in r.getMessage() and "description" in r.getMessage() for r in caplog.records)
    assert context.registry.find("zeta.tool") is not None
