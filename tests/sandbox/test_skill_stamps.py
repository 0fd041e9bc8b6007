"""A mounted skill's stamp (wasmrun/sandbox/files/skillstamp.py): its files walked once per
run, within bounds, never following a link; the keys of its pages, its copy and its bytecode
all taken from it; a skill past a bound refused clearly, on every image."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.sandbox.conftest import make_skill
from wasmrun.sandbox.contract.types import MountedSkill, RunRequest, RunResult
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.files import skillstamp
from wasmrun.sandbox.files.skillcopies import SkillCopies
from wasmrun.sandbox.files.skillstamp import (
    MAX_SKILL_BYTES,
    MAX_SKILL_DEPTH,
    MAX_SKILL_PATH_CHARS,
    SkillTooLarge,
    stamp_skill,
)

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

MAIN = "def main(args):\n    return 'ran'\n"
# The entry bound these tests hold the stamp to: the real one (16,384) takes minutes of
# file creation per test on a loaded box; the code reads the bound when it walks.
MAX_SKILL_ENTRIES = 2_048


@pytest.fixture(autouse=True)
def _entry_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(skillstamp, "MAX_SKILL_ENTRIES", MAX_SKILL_ENTRIES)


def _run(engine: SandboxEngine, skill: MountedSkill, function: str = "main") -> RunResult:
    return engine.run(RunRequest(kind="skill", skill=skill.name, function=function, skills=[skill]))


def test_a_run_lists_its_skills_folder_once(engine: SandboxEngine, tmp_path: Path, monkeypatch) -> None:
    """The skill's pages, its bytecode (stdlib image) and its copy (data image) are all made;
    a later run names the skill's version with one walk, not one per key."""
    skill = make_skill(tmp_path, "stamp.once", {"code/main.py": MAIN, "data/a.txt": "a"})
    assert _run(engine, skill).output == "ran"
    assert engine.skill_pages.wait_ready(120)
    assert _run(engine, skill).output == "ran"  # from its pages: everything it needs is made
    listed: list[str] = []
    scandir = os.scandir

    def counting(path="."):  # type: ignore[no-untyped-def]
        if isinstance(path, str) and os.path.realpath(path) == os.path.realpath(skill.root):
            listed.append(path)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", counting)
    assert _run(engine, skill).output == "ran"
    assert len(listed) == 1


def _too_many_entries(root: Path) -> MountedSkill:
    files = {f"data/{i}.txt": "" for i in range(MAX_SKILL_ENTRIES)}  # with code/, main.py, data/: past it
    return make_skill(root, "stamp.many", {"code/main.py": MAIN, **files})


def _too_deep(root: Path) -> MountedSkill:
    return make_skill(root, "stamp.deep", {"code/main.py": MAIN, "/".join(["d"] * MAX_SKILL_DEPTH) + "/leaf.txt": ""})


def _too_long_a_path(root: Path) -> MountedSkill:
    segment = "p" * 250
    path = "/".join([segment] * (MAX_SKILL_PATH_CHARS // 250 + 1))
    skill = make_skill(root, "stamp.long", {"code/main.py": MAIN})
    os.makedirs(os.path.join(skill.root, path))
    return skill


def _too_many_bytes(root: Path) -> MountedSkill:
    skill = make_skill(root, "stamp.big", {"code/main.py": MAIN})
    with open(os.path.join(skill.root, "data.bin"), "wb") as f:
        f.truncate(MAX_SKILL_BYTES + 1)  # sparse: its size is what counts, no disk used
    return skill


PAST_A_BOUND = {
    "entries": (_too_many_entries, f"more than {MAX_SKILL_ENTRIES:,} files and folders"),
    "depth": (_too_deep, f"more than {MAX_SKILL_DEPTH} levels deep"),
    "path": (_too_long_a_path, f"a path longer than {MAX_SKILL_PATH_CHARS:,} characters"),
    "bytes": (_too_many_bytes, f"more than {MAX_SKILL_BYTES >> 20:,} MiB of files"),
}


@pytest.mark.parametrize("bound", sorted(PAST_A_BOUND))
def test_a_skill_past_a_bound_is_refused_clearly(engine: SandboxEngine, tmp_path: Path, bound: str) -> None:
    make, says = PAST_A_BOUND[bound]
    skill = make(tmp_path)
    with pytest.raises(SkillTooLarge, match=says):
        stamp_skill(skill)
    code = f"from skills.{skill.name} import main as m\ndef main(args):\n    return m(args)\n"
    for request in (
        RunRequest(kind="skill", skill=skill.name, skills=[skill]),
        RunRequest(kind="code", code=code, skills=[skill]),
    ):
        result = engine.run(request)
        assert result.status == "failed" and result.error is not None
        assert result.error.type == "SkillTooLarge"
        assert f"skill {skill.name} is too large to mount" in result.error.message and says in result.error.message
        assert str(tmp_path) not in result.error.message  # no host path
    fine = make_skill(tmp_path, "stamp.fine", {"code/main.py": MAIN})
    assert _run(engine, fine).output == "ran"  # the engine keeps serving


def test_a_run_without_the_engines_stamps_refuses_too(engine: SandboxEngine, tmp_path: Path) -> None:
    """A session's run and the engine's own runs go through RunLoop.run_in without the
    engine's stamps: it stamps the skills itself, and never enters the guest for one past a bound."""
    skill = _too_deep(tmp_path)
    fresh = engine.loop.supply.take()
    result, workspace = engine.loop.run_in(
        fresh, RunRequest(kind="skill", skill=skill.name, skills=[skill]), time.perf_counter(),
    )
    engine.loop.supply.retire(fresh.store, workspace)
    assert result.status == "failed" and result.error is not None and result.error.type == "SkillTooLarge"
    assert result.usage.run_ms == 0.0  # the guest never ran


def test_a_skill_at_the_bounds_runs(engine: SandboxEngine, tmp_path: Path) -> None:
    files = {f"data/{i}.txt": "" for i in range(MAX_SKILL_ENTRIES - 3)}  # + code/, code/main.py, data/
    skill = make_skill(tmp_path, "stamp.full", {"code/main.py": MAIN, **files})
    stamp = stamp_skill(skill)
    assert len(stamp.files) + len(stamp.folders) == MAX_SKILL_ENTRIES
    assert _run(engine, skill).output == "ran"


def _outside(tmp_path: Path) -> tuple[Path, Path]:
    """A file and a folder of many files outside the skill, for links to point at."""
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("host secret")
    crowd = tmp_path / "outside" / "crowd"
    crowd.mkdir()
    for i in range(MAX_SKILL_ENTRIES + 10):
        (crowd / f"{i}.txt").write_text("")
    return secret, crowd


def test_links_out_of_a_skill_are_not_followed_into_its_stamp_or_copy(tmp_path: Path) -> None:
    skill = make_skill(tmp_path / "skills", "stamp.links", {"code/main.py": MAIN})
    secret, crowd = _outside(tmp_path)
    root = Path(skill.root)
    (root / "code" / "secret.txt").symlink_to(secret)
    (root / "crowd").symlink_to(crowd, target_is_directory=True)
    stamp = stamp_skill(skill)  # the crowd's files are not walked: within the bounds
    assert stamp.files == ("code/main.py",) and stamp.folders == ("code",)
    secret.write_text("the host's file changed, a size of its own")
    assert stamp_skill(skill).digest == stamp.digest  # the target is not part of the key
    (root / "code" / "secret.txt").unlink()
    (root / "code" / "secret.txt").symlink_to(tmp_path / "outside" / "other.txt")
    assert stamp_skill(skill).digest != stamp.digest  # the link itself is: pointed elsewhere, a new key
    view = tmp_path / "view"
    SkillCopies(tmp_path / "copies").link([skill], view, {skill: stamp_skill(skill)})
    assert sorted(str(p.relative_to(view)) for p in view.rglob("*")) == [
        "stamp.links", "stamp.links/code", "stamp.links/code/main.py",
    ]


def test_a_link_out_of_a_skill_reads_nothing_of_the_host_in_a_run(engine: SandboxEngine, tmp_path: Path) -> None:
    probe = (
        "def main(args):\n"
        "    try:\n"
        "        return open('/skills/stamp.linkrun/code/secret.txt').read()\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
    )
    skill = make_skill(tmp_path / "skills", "stamp.linkrun", {"code/main.py": probe})
    secret, _crowd = _outside(tmp_path)
    (Path(skill.root) / "code" / "secret.txt").symlink_to(secret)
    for _ in range(2):  # its first run, then from its pages
        result = _run(engine, skill)
        assert result.status == "completed", result.error
        assert result.output != "host secret" and "Error" in result.output
        assert engine.skill_pages.wait_ready(120)


def test_a_stamp_names_every_change_and_lists_what_a_copy_holds(tmp_path: Path) -> None:
    skill = make_skill(tmp_path, "stamp.change", {"code/main.py": MAIN, "data/a/b.txt": "b"})
    root = Path(skill.root)
    (root / "empty").mkdir()
    os.mkfifo(root / "code" / "pipe")  # named (its identity), never listed to copy
    stamp = stamp_skill(skill)
    assert stamp.folders == ("code", "data", "data/a", "empty")
    assert stamp.files == ("code/main.py", "data/a/b.txt") and stamp.file_bytes == len(MAIN) + 1
    assert stamp_skill(skill) == stamp  # nothing changed: the same stamp
    (root / "data" / "a" / "b.txt").write_text("c")  # same size
    os.utime(root / "data" / "a" / "b.txt", ns=(0, 0))  # as a created skill's files: ctime still tells
    changed = stamp_skill(skill)
    assert changed.digest != stamp.digest
    (root / "empty" / "more").mkdir()
    assert stamp_skill(skill).digest != changed.digest  # a folder added
    other = MountedSkill("stamp.other", skill.root, skill.entrypoint)
    assert stamp_skill(other).digest != stamp_skill(skill).digest  # the name is part of it


def test_a_file_name_that_is_not_utf8_leaves_the_skill_working(engine: SandboxEngine, tmp_path: Path) -> None:
    """Any bytes may name a file on Linux; naming the skill once failed on such a name (every run
    of the skill was a SandboxError)."""
    skill = make_skill(tmp_path, "stamp.bytes", {"code/main.py": MAIN})
    with open(os.path.join(os.fsencode(skill.root), b"code", b"\xff-latin1-\xe9.txt"), "wb") as f:
        f.write(b"data")
    assert "code/\udcff-latin1-\udce9.txt" in stamp_skill(skill).files
    for _ in range(2):  # its first run, then from its pages
        assert _run(engine, skill).output == "ran"
        assert engine.skill_pages.wait_ready(120)


def test_a_link_put_in_a_folders_place_after_the_stamp_is_not_followed_by_the_copy(tmp_path: Path) -> None:
    """The copy opens what the stamp listed one folder at a time, following no link: a folder
    swapped for a link to the host's files between the stamp and the copy copies nothing of them."""
    secret, _crowd = _outside(tmp_path)
    skill = make_skill(tmp_path / "skills", "stamp.swap", {"code/main.py": MAIN, "data/secret.txt": "skill's own"})
    stamp = stamp_skill(skill)
    data = Path(skill.root) / "data"
    (data / "secret.txt").unlink()
    data.rmdir()
    data.symlink_to(secret.parent, target_is_directory=True)  # holds a secret.txt too
    view = tmp_path / "view"
    SkillCopies(tmp_path / "copies").link([skill], view, {skill: stamp})
    assert (view / "stamp.swap" / "code" / "main.py").read_text() == MAIN
    assert not (view / "stamp.swap" / "data" / "secret.txt").exists()
