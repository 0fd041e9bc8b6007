"""The README runs, as a newcomer reads it: its curl commands work verbatim against a
fresh server (only the port is rewritten), it starts with a short quickstart, its long
material lives in docs/ behind an index, every link stays inside the repository, and its
figures come from scripts/readme_figures.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.liveserver import REPO, LiveServer

README = REPO / "README.md"
DOCS = REPO / "docs"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)")
sys.path.insert(0, str(REPO / "scripts"))
import readme_figures  # noqa: E402


def curl_commands(text: str) -> list[str]:
    """Every shell line of a fenced block that runs curl, in order (continuations joined)."""
    commands = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            if re.search(r"(^|[\s($])curl\s", line) and not line.lstrip().startswith("#"):
                commands.append(line)
    return commands


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("readme") / "data")
    yield live
    live.stop()


def test_every_curl_in_the_readme_runs_verbatim_against_a_fresh_server(server: LiveServer) -> None:
    commands = curl_commands(README.read_text())
    assert len(commands) >= 10
    marker = "@@wasmrun-readme-end@@"
    port = f"127.0.0.1:{server.port}"
    lines = ["set -eu -o pipefail"]
    for cmd in commands:
        lines += [re.sub(r"(localhost|127\.0\.0\.1):8080", port, cmd), f"printf '\\n{marker}\\n'"]
    script = "\n".join(lines) + "\n"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    outputs = done.stdout.split(f"\n{marker}\n")[:-1]
    assert len(outputs) == len(commands)
    for command, output in zip(commands, outputs, strict=True):
        if command.lstrip().startswith(("BLOB=", "export ")) or "$(" in command.split("curl", 1)[0]:
            assert output == "", command
            continue
        if "text/event-stream" in command:  # one JSON-RPC message per `data:` line; the response last
            events = [json.loads(line[len("data: "):]) for line in output.splitlines() if line.startswith("data: ")]
            assert events and all(e.get("method") in ("run/output", "run/display") for e in events[:-1]), output[:800]
            output = json.dumps(events[-1])
        answer = json.loads(output)
        assert not (isinstance(answer, dict) and "error" in answer), f"{command}\n-> {output[:500]}"
        result = answer.get("result") if isinstance(answer, dict) else None
        if isinstance(result, dict) and "status" in result:
            assert result["status"] == "completed", f"{command}\n-> {output[:800]}"


def test_no_readme_example_hard_codes_a_blob_id() -> None:
    for command in curl_commands(README.read_text()):
        assert not re.search(r"blob:[0-9a-f]{32}", command), command


def test_the_quickstart_comes_first_and_is_short() -> None:
    text = README.read_text()
    sections = re.split(r"(?m)^## ", text)
    assert sections[1].startswith("Quickstart")
    quick = sections[1].split("```")[1]
    lines = [line for line in quick.strip().splitlines() if line.strip()]
    assert 3 <= len(lines) <= 15
    joined = "\n".join(lines)
    for step in ("pip install", "wasmrun serve", "curl", "mcp"):
        assert step in joined


def test_the_readme_is_short_and_the_rest_is_in_docs_behind_an_index() -> None:
    assert len(README.read_text().splitlines()) <= 400
    index = (DOCS / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not list {page.name}"
    assert "](docs/README.md)" in README.read_text()


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves_inside_the_repository(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        assert "://" not in target and not target.startswith(("mailto:", "//")), f"{page.name}: {target} leaves the repository"
        path = target.split("#", 1)[0]
        if not path:
            continue
        resolved = (page.parent / path).resolve()
        assert resolved.is_relative_to(REPO), f"{page.name}: {target} leaves the repository"
        assert resolved.exists(), f"{page.name}: {target} does not exist"


def test_the_docs_agree_on_what_a_blob_id_is() -> None:
    texts = {str(p.relative_to(REPO)): p.read_text() for p in _markdown_files()}
    random_blob_id = re.compile(r"blob[^.]*random bits", re.IGNORECASE)
    for name, text in texts.items():
        assert not random_blob_id.search(text.replace("\n", " ")), f"{name} says blob ids are random"
    assert "HMAC" in texts["docs/protocol-server.md"] and "HMAC" in texts["README.md"]


def test_the_figures_are_between_markers_the_script_writes() -> None:
    text = README.read_text()
    assert readme_figures.BEGIN in text and readme_figures.END in text
    assert subprocess.run([sys.executable, str(REPO / "scripts" / "readme_figures.py"), "--check"]).returncode == 0
    rows = readme_figures.read_rows(text)
    rewritten = readme_figures.write_rows(text, rows | {"test figure": "1 s"})
    # Only the block between the markers changes; the rows come back as written.
    assert rewritten.split(readme_figures.BEGIN)[0] == text.split(readme_figures.BEGIN)[0]
    assert rewritten.split(readme_figures.END)[1] == text.split(readme_figures.END)[1]
    assert readme_figures.read_rows(rewritten) == rows | {"test figure": "1 s"}
    for row in ("one-file executable size", "wheel size"):
        assert any(name.startswith(row) for name in rows), f"no {row!r} figure: run scripts/readme_figures.py"
    with pytest.raises(ValueError):
        readme_figures.write_rows(text.replace(readme_figures.END, ""), rows)
