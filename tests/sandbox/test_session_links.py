"""A session's next run copies its folders as the workspace quota counted them (issue 42, item 5).

The quota counts an inode once however many names it has (files/diskuse.py). A
run's staging (sessions/state.py `stage`) used to copy every hard link as a file
of its own before any limit was checked: 60 MiB and 30 links of it, under a
64 MiB quota, made 1.9 GiB on disk and 6.8 s of copying before every later run.
Now the copy makes a second name a hard link to the first copy (symbolic links
copied as links, holes kept), and folders counting more than the run's quota
fail the run with WorkspaceQuotaExceeded before anything is copied.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from tests.sandbox.conftest import POLICY
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.types import RunRequest, RunResult, SessionRun
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.files import diskuse
from wasmrun.sandbox.sessions import state

MiB = 1 << 20
LINKS = 30


def _counted(version: Path) -> int:
    """A version's folders as the quota counts them: each inode once, at max(size, blocks)."""
    return diskuse.usage([version / name for name in state.FOLDERS], None)[0]


def _allocated(version: Path) -> int:
    """The disk a version's folders' files take (`du`): st_blocks of each inode once."""
    seen: set[int] = set()
    total = 0
    for folder in state.FOLDERS:
        for parent, _dirs, files in os.walk(version / folder):
            for name in files:
                st = os.lstat(os.path.join(parent, name))
                if st.st_ino not in seen:
                    seen.add(st.st_ino)
                    total += st.st_blocks * 512
    return total


def _version_with_links(version: Path) -> None:
    """A version's folders holding a file with names in both folders, symbolic links
    (one to a path outside, one dangling) and a sparse file."""
    workspace, tmp = version / "workspace", version / "tmp"
    (workspace / "sub").mkdir(parents=True)
    tmp.mkdir()
    (workspace / "data").write_bytes(os.urandom(MiB))
    for name in ("again", "sub/again"):
        os.link(workspace / "data", workspace / name)
    os.link(workspace / "data", tmp / "also")
    os.symlink("/etc/passwd", workspace / "outside")
    os.symlink("data", workspace / "sub" / "relative")
    os.symlink("nowhere", workspace / "dangling")
    with open(workspace / "sparse", "wb") as f:
        f.truncate(64 * MiB)
        f.seek(32 * MiB)
        f.write(b"x")


def _assert_same_tree(copy: Path) -> None:
    workspace = copy / "workspace"
    names = [workspace / "data", workspace / "again", workspace / "sub" / "again", copy / "tmp" / "also"]
    inodes = {os.lstat(name).st_ino for name in names}
    assert len(inodes) == 1, "a hard link became a file of its own"
    assert os.lstat(names[0]).st_nlink >= len(names)
    assert os.readlink(workspace / "outside") == "/etc/passwd"  # copied as a link, not followed
    assert os.readlink(workspace / "sub" / "relative") == "data"
    assert os.readlink(workspace / "dangling") == "nowhere"
    sparse = os.lstat(workspace / "sparse")
    assert sparse.st_size == 64 * MiB and sparse.st_blocks * 512 < MiB


def test_stage_copies_a_hard_link_as_a_link_and_symbolic_links_unfollowed(tmp_path: Path) -> None:
    current, following = tmp_path / "v1", tmp_path / "v2"
    _version_with_links(current)
    state.stage(current, following, run_only=())
    _assert_same_tree(following)
    assert os.lstat(following / "workspace" / "data").st_ino != os.lstat(current / "workspace" / "data").st_ino
    assert _counted(following) <= _counted(current)
    assert _allocated(following) < 3 * MiB  # the file once (and the sparse file's one block), not four times


def test_a_forks_fallback_copy_keeps_hard_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork links every file to its source; where it cannot (another filesystem, too
    many links), the copy it makes instead is made once per inode, not once per name."""
    source, target = tmp_path / "v3", tmp_path / "fork" / "v0"
    _version_with_links(source)
    target.parent.mkdir()
    real_link = os.link
    sources = {(st.st_dev, st.st_ino) for st in map(os.lstat, source.rglob("*"))}

    def link_within_the_copy_only(src: str | Path, dst: str | Path, **kwargs: object) -> None:
        linked = os.stat(src, dir_fd=kwargs.get("src_dir_fd"), follow_symlinks=False)  # type: ignore[arg-type]
        if (linked.st_dev, linked.st_ino) in sources:  # (by path or by a folder's descriptor)
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_link(src, dst, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", link_within_the_copy_only)
    state.copy_version(source, target)
    _assert_same_tree(target)
    assert os.lstat(target / "workspace" / "data").st_ino != os.lstat(source / "workspace" / "data").st_ino
    assert _allocated(target) < 3 * MiB


def test_stage_refuses_folders_over_the_quota_before_copying(tmp_path: Path) -> None:
    current, following = tmp_path / "v1", tmp_path / "v2"
    _version_with_links(current)  # counts 1 MiB once and the sparse file's 64 MiB
    with pytest.raises(errors.RunAborted) as refused:
        state.stage(current, following, run_only=(), max_bytes=32 * MiB)
    assert refused.value.error_type == errors.WORKSPACE_QUOTA
    assert str(32 * MiB) in refused.value.message
    assert not following.exists()
    state.stage(current, following, run_only=(), max_bytes=_counted(current))  # as counted: it fits
    _assert_same_tree(following)


def test_stage_allows_what_the_quota_charges_as_entries_only(tmp_path: Path) -> None:
    """A run may fill its quota with file bytes and still make folders, which the quota
    charges as entries, not bytes: such a version is staged, not refused."""
    current, following = tmp_path / "v1", tmp_path / "v2"
    (current / "tmp").mkdir(parents=True)
    (current / "workspace").mkdir()
    (current / "workspace" / "full").write_bytes(b"x" * MiB)
    for i in range(50):
        (current / "workspace" / f"d{i}").mkdir()
    assert _counted(current) > MiB
    state.stage(current, following, run_only=(), max_bytes=MiB)
    assert len(os.listdir(following / "workspace")) == 51


WRITE_AND_LINK = f"""\
import os
def main(args):
    chunk = b'x' * (1 << 20)
    with open('/workspace/big', 'wb') as f:
        for _ in range(60):
            f.write(chunk)
    os.mkdir('/workspace/links')
    for i in range({LINKS}):
        os.link('/workspace/big', f'/workspace/links/{{i}}')
    return os.stat('/workspace/big').st_nlink
"""

CHECK_LINKS = """\
import os
def main(args):
    names = ['/workspace/big'] + [f'/workspace/links/{i}' for i in range(30)]
    return [len({os.stat(name).st_ino for name in names}), os.stat('/workspace/big').st_nlink]
"""


def _session_run(engine: SandboxEngine, folder: Path, version: int, code: str, **limits: int) -> RunResult:
    session = SessionRun(folder=str(folder), version=version, reseed=version == 0)
    return engine.run(RunRequest(kind="code", code=code, session=session, limits=POLICY.resolve(**limits)))


def test_a_sessions_hard_links_stay_links_in_its_next_version(engine: SandboxEngine, tmp_path: Path) -> None:
    folder = tmp_path / "session"
    folder.mkdir()
    wrote = _session_run(engine, folder, 0, WRITE_AND_LINK, workspace_bytes=64 * MiB, timeout_ms=10_000)
    assert wrote.status == "completed" and wrote.output == LINKS + 1, wrote
    assert wrote.session is not None and wrote.session.committed
    t0 = time.perf_counter()
    checked = _session_run(engine, folder, 1, CHECK_LINKS, workspace_bytes=64 * MiB, timeout_ms=1_000)
    elapsed = time.perf_counter() - t0
    assert checked.status == "completed", checked
    assert checked.output == [1, LINKS + 1]
    assert checked.session is not None and checked.session.committed
    following = state.version_dir(folder, 2)
    assert 60 * MiB <= _allocated(following) < 64 * MiB, "the copy took more disk than the quota counted"
    big = os.lstat(following / "workspace" / "big")
    assert big.st_nlink == LINKS + 1 and big.st_ino == os.lstat(following / "workspace" / "links" / "7").st_ino
    assert elapsed < 1.0, elapsed


def test_a_session_over_its_quota_is_refused_before_its_folders_are_copied(
    engine: SandboxEngine, tmp_path: Path
) -> None:
    """Folders counting more than the run's quota (made here by hand: no run can leave
    them) fail the run as WorkspaceQuotaExceeded, nothing staged, the version kept."""
    folder = tmp_path / "session"
    folder.mkdir()
    first = _session_run(engine, folder, 0, "x = 1\nx", workspace_bytes=2 * MiB)
    assert first.status == "completed" and first.session is not None and first.session.committed, first
    current = state.version_dir(folder, 1)
    (current / "workspace" / "big").write_bytes(b"x" * (3 * MiB))
    for i in range(LINKS):
        os.link(current / "workspace" / "big", current / "workspace" / f"link{i}")
    refused = _session_run(engine, folder, 1, "def main(args):\n    return 1\n", workspace_bytes=2 * MiB)
    assert refused.status == "failed" and refused.error is not None, refused
    assert refused.error.type == errors.WORKSPACE_QUOTA, refused.error
    assert refused.session is not None and not refused.session.committed
    assert not state.version_dir(folder, 2).exists()
    assert sorted(os.listdir(current / "workspace")) == sorted(["big"] + [f"link{i}" for i in range(LINKS)])
    assert (current / state.MEMORY_FILES[0]).exists()
