"""Odd files in an operator's skill folder: FIFOs, devices and huge descriptors.

A FIFO named `skill.toml` (or `SKILL.md`, or any resource) must not hang the
server's start, its reload or a request: plain open() of a FIFO blocks until a
writer appears. Such a skill is skipped with a log line, a read of such a file
is refused naming `path`, and the server keeps serving its other skills.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.liveserver import LiveServer
from tests.skillfiles import write_skill
from wasmrun.client import Client, InvalidParams
from wasmrun.registry.folders import MAX_DESCRIPTOR_BYTES, load_skill


def _operator_folder(top: Path) -> Path:
    manifest_fifo = write_skill(top, "fifo_manifest")
    (manifest_fifo / "skill.toml").unlink()
    os.mkfifo(manifest_fifo / "skill.toml")
    doc_fifo = write_skill(top, "fifo_doc")
    (doc_fifo / "SKILL.md").unlink()
    os.mkfifo(doc_fifo / "SKILL.md")
    agent = top / "fifo-agent"
    agent.mkdir()
    os.mkfifo(agent / "SKILL.md")
    huge = write_skill(top, "huge_doc")
    (huge / "SKILL.md").write_text("---\nname: huge\n---\n" + "x" * (MAX_DESCRIPTOR_BYTES + 1))
    good = write_skill(top, "good", files={"resources/notes.txt": "notes"})
    os.mkfifo(good / "resources" / "pipe")
    return top


def test_load_skill_refuses_non_regular_descriptors_without_blocking(tmp_path: Path) -> None:
    top = _operator_folder(tmp_path / "skills")
    for name, expected in [
        ("fifo_manifest/0.1.0", "skill.toml cannot be read: not a regular file"),
        ("fifo_doc/0.1.0", "SKILL.md cannot be read: not a regular file"),
        ("fifo-agent", "SKILL.md cannot be read: not a regular file"),
        ("huge_doc/0.1.0", "SKILL.md is too large"),
    ]:
        with pytest.raises(Exception) as caught:
            load_skill(top / name)
        assert expected in str(caught.value), name


def test_server_skips_fifo_skills_and_refuses_fifo_reads(tmp_path: Path) -> None:
    top = _operator_folder(tmp_path / "skills")
    server = LiveServer(tmp_path / "data", "--skills-dir", str(top))
    try:
        with Client(server.base_url) as client:
            names = {s.name for s in client.list_skills(limit=200).skills}
            assert "good" in names
            assert not names & {"fifo_manifest", "fifo_doc", "fifo_agent", "huge_doc"}
            assert client.read_skill_file("good", "resources/notes.txt").content == "notes"
            with pytest.raises(InvalidParams) as refused:
                client.read_skill_file("good", "resources/pipe")
            assert "not a regular file" in str(refused.value)
            assert refused.value.data is not None and refused.value.data.get("field") == "path"
            # Still serving: a run and another read after the refused one.
            assert client.run_code("def main(args):\n    return 7\n").output == 7
            assert client.read_skill_file("good", "resources/notes.txt").content == "notes"
    finally:
        err = server.stop()
    assert "fifo_manifest" in err and "not a regular file" in err
