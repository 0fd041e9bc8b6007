"""Anthropic Agent Skills folders (SKILL.md with YAML frontmatter, scripts/, references/,
assets/) in a skills dir, unmodified: listed, described, read, mounted, their scripts
run with runtime.skills.run_script; `skills check`, hot pickup, `skills add`."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.liveserver import LiveServer
from wasmrun.cli.main import main
from wasmrun.client import Client

Rpc = Callable[..., dict[str, Any]]

EXTRACT = '''import argparse
import os
import sys

from helper import shout

parser = argparse.ArgumentParser()
parser.add_argument("word")
parser.add_argument("--times", type=int, default=1)
args = parser.parse_args()
guide = os.path.join(os.path.dirname(__file__), "..", "references", "guide.md")
with open(guide) as f:
    first = f.readline().strip()
print(shout(args.word) * args.times)
print("guide:", first)
print("stdin:", sys.stdin.read())
print("to stderr", file=sys.stderr)
'''


def write_agent_skill(top: Path, name: str = "pdf-tools", frontmatter: str | None = None) -> Path:
    root = top / name
    (root / "scripts").mkdir(parents=True)
    (root / "references").mkdir()
    (root / "assets").mkdir()
    if frontmatter is None:
        frontmatter = (
            f"name: {name}\n"
            "description: Extract text from PDF files. Use when the user gives a PDF.\n"
            "license: Apache-2.0\n"
            "metadata:\n  version: 1.2.0\n  author: someone\n"
            "allowed-tools: Read Bash(python:*)\n"
        )
    (root / "SKILL.md").write_text(f"---\n{frontmatter}---\n# PDF tools\n\nRun `scripts/extract.py WORD`.\n")
    (root / "scripts" / "extract.py").write_text(EXTRACT)
    (root / "scripts" / "helper.py").write_text("def shout(word):\n    return word.upper() + '!'\n")
    (root / "scripts" / "fail.py").write_text("import sys\nprint('half done')\nsys.exit(3)\n")
    (root / "scripts" / "message.py").write_text("import sys\nsys.exit('no input file given')\n")
    (root / "scripts" / "crash.py").write_text("def go():\n    raise ValueError('bad page')\ngo()\n")
    (root / "scripts" / "binary.py").write_text(
        "import sys\ndata = sys.stdin.buffer.read()\nsys.stdout.buffer.write(data[::-1] + b'\\xff')\n"
    )
    (root / "scripts" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "references" / "guide.md").write_text("Guide line one\nline two\n")
    (root / "assets" / "logo.bin").write_bytes(b"\x89PNG\x00\xff\xfe")
    return root


@pytest.fixture()
def skills_dir(skills_dir: Path) -> Path:
    write_agent_skill(skills_dir)
    return skills_dir


def _run(rpc: Rpc, code: str, mount: list[str] | None = None) -> dict[str, Any]:
    answer = rpc("run_code", {"language": "python", "code": code, "mount_skills": mount or ["pdf-tools"],
                              "limits": {"timeout_ms": 30000}})
    assert "result" in answer, answer
    return answer["result"]


def test_listed_and_described_under_the_mapped_name(rpc: Rpc) -> None:
    skills = rpc("list_skills", {"detail": "summary"})["result"]["skills"]
    entry = next(s for s in skills if s["name"] == "pdf_tools")
    assert entry["version"] == "1.2.0" and entry["kind"] == "instruction"
    assert entry["description"].startswith("Extract text from PDF files.")
    assert entry["title"] == "pdf-tools"
    for spelling in ("pdf-tools", "pdf_tools"):
        skill = rpc("describe_skill", {"name": spelling, "detail": "full"})["result"]["skill"]
        assert skill["manifest"]["name"] == "pdf_tools"
        assert skill["manifest"]["agent_skill"]["name"] == "pdf-tools"
        assert skill["skill_md_frontmatter"]["license"] == "Apache-2.0"
        assert skill["skill_md_frontmatter"]["allowed-tools"] == "Read Bash(python:*)"
        assert "scripts/extract.py" in skill["files"] and "assets/logo.bin" in skill["files"]


def test_files_are_readable(rpc: Rpc) -> None:
    guide = rpc("read_skill_file", {"name": "pdf-tools", "path": "references/guide.md"})["result"]
    assert guide["content"] == "Guide line one\nline two\n"
    logo = rpc("read_skill_file", {"name": "pdf_tools", "path": "assets/logo.bin"})["result"]
    assert logo["encoding"] == "base64" and base64.b64decode(logo["content"]) == b"\x89PNG\x00\xff\xfe"
    escape = rpc("read_skill_file", {"name": "pdf-tools", "path": "../pdf-tools/SKILL.md"})
    assert escape["error"]["code"] == -32602


def test_not_executable_but_mountable(rpc: Rpc) -> None:
    answer = rpc("execute_skill", {"name": "pdf-tools"})
    assert answer["error"]["code"] == -32602 and "instruction skill" in answer["error"]["message"]
    run = _run(rpc, "import os\ndef main(args):\n    return sorted(os.listdir('/skills/pdf_tools/scripts'))\n")
    assert run["status"] == "completed", run
    assert "extract.py" in run["output"]


def test_run_script(rpc: Rpc) -> None:
    code = (
        "from runtime import skills\n"
        "def main(args):\n"
        "    first = skills.run_script('pdf-tools', 'scripts/extract.py', argv=['hey', '--times', '2'], stdin='piped')\n"
        "    again = skills.run_script('pdf_tools', 'scripts/extract.py', argv=['x'])\n"
        "    return [first, again['stdout'].splitlines()[0], skills.run_script('pdf-tools', 'scripts/fail.py'),\n"
        "            skills.run_script('pdf-tools', 'scripts/message.py'), skills.run_script('pdf-tools', 'scripts/crash.py')]\n"
    )
    run = _run(rpc, code)
    assert run["status"] == "completed", run
    first, again, fail, message, crash = run["output"]
    assert first == {"exit_code": 0, "stdout": "HEY!HEY!\nguide: Guide line one\nstdin: piped\n", "stderr": "to stderr\n"}
    assert again == "X!"
    assert fail == {"exit_code": 3, "stdout": "half done\n", "stderr": ""}
    assert message == {"exit_code": 1, "stdout": "", "stderr": "no input file given\n"}
    assert crash["exit_code"] == 1 and "ValueError: bad page" in crash["stderr"] and "crash.py" in crash["stderr"]
    assert run["logs_preview"] == ""  # the scripts' output was captured, not printed


def test_scripts_use_the_byte_streams(rpc: Rpc) -> None:
    code = ("from runtime import skills\n"
            "def main(args):\n    return skills.run_script('pdf-tools', 'scripts/binary.py', stdin='abc')\n")
    done = _run(rpc, code)["output"]
    assert done == {"exit_code": 0, "stdout": "cba\ufffd", "stderr": ""}


def test_argparse_usage_error_is_exit_2(rpc: Rpc) -> None:
    code = ("from runtime import skills\n"
            "def main(args):\n    return skills.run_script('pdf-tools', 'scripts/extract.py')\n")
    done = _run(rpc, code)["output"]
    assert done["exit_code"] == 2 and "required: word" in done["stderr"]


@pytest.mark.parametrize(("call", "error"), [
    ("skills.run_script('pdf-tools', 'scripts/run.sh')", "only .py scripts"),
    ("skills.run_script('pdf-tools', '../pdf_tools/scripts/extract.py')", "without '..'"),
    ("skills.run_script('pdf-tools', '/etc/passwd.py')", "relative"),
    ("skills.run_script('pdf-tools', 'scripts/missing.py')", "no script 'scripts/missing.py'"),
    ("skills.run_script('other-skill', 'scripts/extract.py')", "not mounted"),
    ("skills.run_script('../../lib', 'x.py')", "not mounted"),
])
def test_run_script_refusals(rpc: Rpc, call: str, error: str) -> None:
    run = _run(rpc, f"from runtime import skills\ndef main(args):\n    return {call}\n")
    assert run["status"] == "failed" and error in run["error"]["message"], run


def test_a_skill_dropped_in_is_served_without_restart(rpc: Rpc, skills_dir: Path) -> None:
    def names() -> list[str]:
        return [s["name"] for s in rpc("list_skills", {"limit": 200})["result"]["skills"]]

    assert "csv_tools" not in names()
    write_agent_skill(skills_dir, "csv-tools")
    for _ in range(100):  # bounded: the registry rechecks every half second
        if "csv_tools" in names():
            break
        time.sleep(0.1)
    assert "csv_tools" in names()
    assert rpc("describe_skill", {"name": "csv-tools"})["result"]["skill"]["manifest"]["version"] == "1.2.0"
    # an edit to SKILL.md is seen too
    doc = skills_dir / "csv-tools" / "SKILL.md"
    doc.write_text(doc.read_text().replace("Extract text", "Split tables"))
    os.utime(doc, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    for _ in range(100):
        if rpc("describe_skill", {"name": "csv-tools"})["result"]["skill"]["manifest"]["description"].startswith("Split"):
            break
        time.sleep(0.1)
    assert rpc("describe_skill", {"name": "csv-tools"})["result"]["skill"]["manifest"]["description"].startswith("Split")


# -- skills check ----------------------------------------------------------------


def test_check_accepts_a_good_agent_skill(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_agent_skill(tmp_path)
    assert main(["skills", "check", str(tmp_path)]) == 0
    assert f"ok       {root}" in capsys.readouterr().out
    assert main(["skills", "check", str(root)]) == 0  # the skill's own folder works too


@pytest.mark.parametrize(("folder", "frontmatter", "problem"), [
    ("pdf-tools", "name: PDF-Tools\ndescription: d\n", "must be lowercase letters, digits and single hyphens"),
    ("pdf--tools", "name: pdf--tools\ndescription: d\n", "single hyphens"),
    ("pdf-tools", "name: pdf-tools-\ndescription: d\n", "not starting or ending with a hyphen"),
    ("pdf-tools", "name: other-name\ndescription: d\n", "must be the folder's name ('pdf-tools')"),
    ("pdf-tools", "name: pdf-tools\n", "`description` is missing"),
    ("pdf-tools", "description: d\n", "`name` is missing"),
    ("pdf-tools", "name: pdf-tools\ndescription: d\nmetadata: [1, 2]\n", "`metadata` must map strings to strings"),
    ("pdf-tools", "name: pdf-tools\ndescription: d\nallowed-tools: [Read]\n", "`allowed-tools` must be a string"),
    ("3d-tools", "name: 3d-tools\ndescription: d\n", "starts with a digit"),
    ("pdf-tools", f"name: {'a' * 70}\ndescription: d\n", "at most 64 characters"),
])
def test_check_says_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], folder: str, frontmatter: str, problem: str
) -> None:
    root = write_agent_skill(tmp_path, folder, frontmatter=frontmatter)
    assert main(["skills", "check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"INVALID  {root}" in out and problem in out, out


@pytest.mark.parametrize(("frontmatter", "warning"), [
    (f"name: pdf-tools\ndescription: {'x' * 1068}\n", "frontmatter description is 1068 characters, over the format's 1024"),
    ("name: pdf-tools\ndescription: d\nversion: 1\n", "unknown frontmatter field(s) 'version' (ignored)"),
])
def test_check_warns_of_soft_rules_and_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], frontmatter: str, warning: str
) -> None:
    root = write_agent_skill(tmp_path, "pdf-tools", frontmatter=frontmatter)
    assert main(["skills", "check", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"ok       {root} (served, with warnings)" in out and f"warning: SKILL.md: {warning}" in out, out


def test_a_skill_over_a_soft_rule_is_served(rpc: Rpc, skills_dir: Path) -> None:
    """Anthropic's claude-api has a 1,068-character description: served as written."""
    long = "Build apps with the Claude API. " * 34
    write_agent_skill(skills_dir, "long-desc", frontmatter=f"name: long-desc\ndescription: {long}\n")
    time.sleep(0.6)
    described = rpc("describe_skill", {"name": "long-desc", "detail": "manifest"})["result"]["skill"]
    assert described["manifest"]["description"] == long.strip()


def test_check_a_skill_md_without_frontmatter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "SKILL.md").write_text("# just notes\n")
    assert main(["skills", "check", str(tmp_path)]) == 1
    assert "has no YAML frontmatter" in capsys.readouterr().out


def test_an_invalid_agent_skill_is_skipped_not_fatal(rpc: Rpc, skills_dir: Path) -> None:
    write_agent_skill(skills_dir, "bad-one", frontmatter="name: Bad One\ndescription: d\n")
    time.sleep(0.6)
    names = [s["name"] for s in rpc("list_skills", {"limit": 200})["result"]["skills"]]
    assert "pdf_tools" in names and "bad_one" not in names


# -- skills add --------------------------------------------------------------------


def test_skills_add_copies_one_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_agent_skill(tmp_path / "src")
    data = tmp_path / "data"
    assert main(["skills", "add", str(source), "--data-dir", str(data)]) == 0
    dest = data / "installed-skills" / "agent-skills" / "pdf-tools"
    assert f"added pdf_tools 1.2.0 to {dest}" in capsys.readouterr().out
    assert (dest / "scripts" / "extract.py").read_text() == EXTRACT
    assert not list((data / "installed-skills" / ".staging").iterdir())
    assert main(["skills", "add", str(source), "--data-dir", str(data)]) == 1
    assert "already exists" in capsys.readouterr().err


def test_skills_add_refuses_invalid_and_links(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    bad = write_agent_skill(tmp_path / "src", frontmatter="name: pdf-tools\n")
    assert main(["skills", "add", str(bad), "--data-dir", str(data)]) == 1
    assert "`description` is missing" in capsys.readouterr().out
    linked = write_agent_skill(tmp_path / "src2")
    (linked / "references" / "secret.md").symlink_to("/etc/hostname")
    assert main(["skills", "add", str(linked), "--data-dir", str(data)]) == 1
    assert "symbolic link" in capsys.readouterr().out
    fifo = write_agent_skill(tmp_path / "src3")
    os.mkfifo(fifo / "assets" / "pipe")
    assert main(["skills", "add", str(fifo), "--data-dir", str(data)]) == 1
    assert "assets/pipe is not a regular file" in capsys.readouterr().out
    assert not (data / "installed-skills" / "agent-skills" / "pdf-tools").exists()
    assert main(["skills", "add", str(tmp_path / "nowhere"), "--data-dir", str(data)]) == 1


def test_skills_add_reaches_a_running_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = LiveServer(data)
    try:
        with Client(server.base_url) as client:
            assert "pdf_tools" not in [s.name for s in client.list_skills(limit=200).skills]
            assert main(["skills", "add", str(write_agent_skill(tmp_path / "src")), "--data-dir", str(data)]) == 0
            for _ in range(100):
                if "pdf_tools" in [s.name for s in client.list_skills(limit=200).skills]:
                    break
                time.sleep(0.1)
            run = client.run_code(
                "from runtime import skills\ndef main(args):\n"
                "    return skills.run_script('pdf-tools', 'scripts/extract.py', argv=['ok'])['stdout']\n",
                mount_skills=["pdf-tools"],
            )
            assert run.status == "completed" and run.output.startswith("OK!\n"), run
    finally:
        server.stop()
