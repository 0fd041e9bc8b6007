"""The data image's skill copies (wasmrun/sandbox/files/skillcopies.py): what a run's /skills
view holds, that the skill's own files are only read, and the copies' bounds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sandbox.conftest import make_skill
from wasmrun.sandbox.files.skillcopies import SkillCopies

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)


def _identity(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_ino, p.lstat().st_nlink, p.lstat().st_ctime_ns)
        for p in sorted(root.rglob("*"))
    }


def test_a_view_holds_the_skills_regular_files_and_leaves_the_skill_untouched(tmp_path: Path) -> None:
    skill = make_skill(tmp_path / "skills", "copy.basic", {"code/main.py": "X = 1\n", "data/a/b.txt": "b"})
    root = Path(skill.root)
    (root / "code" / "outside").symlink_to("/etc/passwd")  # a link could point anywhere on the host
    (root / "linked-dir").symlink_to("/etc", target_is_directory=True)
    os.mkfifo(root / "code" / "pipe")  # opening it could block
    before = _identity(root)
    copies = SkillCopies(tmp_path / "copies")
    for n in range(3):
        view = tmp_path / f"view-{n}"
        copies.link([skill], view)
        got = sorted(str(p.relative_to(view)) for p in view.rglob("*"))
        assert got == ["copy.basic", "copy.basic/code", "copy.basic/code/main.py", "copy.basic/data",
                       "copy.basic/data/a", "copy.basic/data/a/b.txt"]
        assert (view / "copy.basic" / "code" / "main.py").read_text() == "X = 1\n"
    assert len(copies) == 1  # one copy for the three views
    assert _identity(root) == before  # no link to the skill's own files: ctime and link count as they were


def test_a_changed_file_gets_a_new_copy_and_views_never_share_the_skills_inode(tmp_path: Path) -> None:
    skill = make_skill(tmp_path / "skills", "copy.change", {"code/main.py": "X = 1\n"})
    copies = SkillCopies(tmp_path / "copies")
    copies.link([skill], tmp_path / "v1")
    main = Path(skill.root) / "code" / "main.py"
    main.write_text("X = 2\n")  # same size; its mtime set back: ctime still tells
    os.utime(main, ns=(1, 1))
    copies.link([skill], tmp_path / "v2")
    assert (tmp_path / "v1" / "copy.change" / "code" / "main.py").read_text() == "X = 1\n"
    assert (tmp_path / "v2" / "copy.change" / "code" / "main.py").read_text() == "X = 2\n"
    assert (tmp_path / "v2" / "copy.change" / "code" / "main.py").stat().st_ino != main.stat().st_ino
    assert len(copies) == 2


def test_copies_are_bounded_by_count_and_bytes_and_a_view_outlives_its_copy(tmp_path: Path) -> None:
    copies = SkillCopies(tmp_path / "copies", max_copies=2, max_bytes=10_000)
    skills = [make_skill(tmp_path / "skills", f"copy.n{i}", {"code/main.py": f"X = {i}\n"}) for i in range(4)]
    for i, skill in enumerate(skills):
        copies.link([skill], tmp_path / f"view-{i}")
    assert len(copies) == 2 and len(list((tmp_path / "copies").iterdir())) == 2
    # The first view's files are links: its copy is gone, its files are still there.
    assert (tmp_path / "view-0" / "copy.n0" / "code" / "main.py").read_text() == "X = 0\n"
    big = make_skill(tmp_path / "skills", "copy.big", {"code/main.py": "", "data.bin": "x" * 20_000})
    copies.link([big], tmp_path / "view-big")  # over max_bytes alone: kept, the others go
    assert len(copies) == 1 and (tmp_path / "view-big" / "copy.big" / "data.bin").stat().st_size == 20_000


def test_a_name_that_would_leave_the_view_is_not_linked(tmp_path: Path) -> None:
    skill = make_skill(tmp_path / "skills", "copy.ok", {"code/main.py": ""})
    from wasmrun.sandbox.contract.types import MountedSkill

    copies = SkillCopies(tmp_path / "copies")
    view = tmp_path / "views" / "view"
    view.parent.mkdir()
    odd = ["../escape", "..", ".", "", "a/b", "nul\0name"]
    copies.link([*(MountedSkill(name, skill.root, "code/main.py") for name in odd), skill], view)
    assert sorted(p.name for p in view.iterdir()) == ["copy.ok"]
    assert not (tmp_path / "views" / "escape").exists()


def test_a_view_is_kept_for_the_same_skills_and_made_anew_for_others(tmp_path: Path) -> None:
    one = make_skill(tmp_path / "skills", "copy.one", {"code/main.py": "X = 1\n"})
    two = make_skill(tmp_path / "skills", "copy.two", {"code/main.py": "X = 2\n"})
    copies = SkillCopies(tmp_path / "copies")
    view = tmp_path / "run-0" / "skills"
    view.parent.mkdir()
    assert copies.mount([one], view) == view
    made = (view / "copy.one" / "code").stat().st_ino
    assert copies.mount([one], view) == view  # the folder's next run of the same skill: nothing redone
    assert (view / "copy.one" / "code").stat().st_ino == made
    # A run with no skills mounts an empty folder; the view waits for the next skill run.
    empty = copies.mount([], view)
    assert empty != view and list(empty.iterdir()) == [] and (view / "copy.one").is_dir()
    copies.mount([two], view)  # other skills: only they are in the view
    assert sorted(p.name for p in view.iterdir()) == ["copy.two"]
    main = Path(two.root) / "code" / "main.py"
    main.write_text("X = 3\n")  # the skill changed: a new copy, the view made again
    copies.mount([two], view)
    assert (view / "copy.two" / "code" / "main.py").read_text() == "X = 3\n"


def test_a_view_folder_made_again_at_the_same_path_is_linked_afresh(tmp_path: Path) -> None:
    """A session makes its run's view folder per run, maybe at a path used before."""
    skill = make_skill(tmp_path / "skills", "copy.session", {"code/main.py": "X = 1\n"})
    copies = SkillCopies(tmp_path / "copies")
    view = tmp_path / "v1" / "skills"
    view.parent.mkdir()
    copies.link([skill], view)
    from wasmrun import dirtree

    dirtree.remove(view)
    view.mkdir()
    copies.link([skill], view)
    assert (view / "copy.session" / "code" / "main.py").read_text() == "X = 1\n"
