"""A session's folders of any depth are staged for its next run, and forked.

A run may make a tree as deep as its entry quota allows (1,000 entries by
default). Staging used to copy with shutil.copytree, which recurses and builds
a path to each entry: such a tree failed every later run of the session with
RecursionError (or paths over PATH_MAX), a session that could no longer be used.
The copy now walks one directory descriptor at a time (sessions/state.py
`_TreeCopier`, dirtree.walk), keeping what it kept: hard links as links (within
and across workspace/ and tmp/), symbolic links unfollowed, modes and times.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.sandbox.conftest import POLICY
from wasmrun.sandbox.contract.types import RunRequest, RunResult, SessionRun
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.sessions import state

DEPTH = 2_000  # past Python's recursion limit; the path is over 4,000 characters (PATH_MAX is 4,096)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _deep_version(version: Path, depth: int) -> None:
    """workspace/d/d/... `depth` levels (made by descriptor), at the bottom a file `f`, its
    hard link `g` and a symbolic link `s` to it; tmp/ holds another name of the file."""
    (version / "workspace").mkdir(parents=True)
    (version / "tmp").mkdir()
    fd = os.open(version / "workspace", _DIR)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", _DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open("f", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640, dir_fd=fd)
        os.write(leaf, b"bottom")
        os.close(leaf)
        os.link("f", "g", src_dir_fd=fd, dst_dir_fd=fd)
        os.symlink("f", "s", dir_fd=fd)
        tmp = os.open(version / "tmp", _DIR)
        os.link("f", "also", src_dir_fd=fd, dst_dir_fd=tmp)
        os.close(tmp)
    finally:
        os.close(fd)


def _bottom(folder: Path) -> tuple[int, int]:
    """(levels of `d` below `folder`, descriptor of the deepest), walked by descriptor."""
    fd = os.open(folder, _DIR)
    depth = 0
    while True:
        try:
            inner = os.open("d", _DIR, dir_fd=fd)
        except FileNotFoundError:
            return depth, fd
        os.close(fd)
        fd = inner
        depth += 1


@pytest.mark.parametrize("fork", [False, True], ids=["stage", "fork"])
def test_a_tree_past_the_recursion_limit_and_path_max_is_copied_whole(deep_root: Path, fork: bool) -> None:
    current, following = deep_root / "v1", deep_root / "v2"
    _deep_version(current, DEPTH)
    if fork:
        state.copy_version(current, following)
    else:
        state.stage(current, following, run_only=())
    depth, fd = _bottom(following / "workspace")
    try:
        assert depth == DEPTH
        f, g = (os.stat(name, dir_fd=fd, follow_symlinks=False) for name in ("f", "g"))
        assert stat.S_ISREG(f.st_mode) and f.st_ino == g.st_ino, "the hard link became a file of its own"
        also = os.stat(following / "tmp" / "also")
        assert also.st_ino == f.st_ino, "the name in tmp/ became a file of its own"
        assert os.readlink("s", dir_fd=fd) == "f"
        assert stat.S_IMODE(f.st_mode) == 0o640
        leaf = os.open("f", os.O_RDONLY, dir_fd=fd)
        assert os.read(leaf, 100) == b"bottom"
        os.close(leaf)
    finally:
        os.close(fd)
    source = os.stat(current / "tmp" / "also")
    assert (f.st_ino == source.st_ino) == fork  # a fork links to the source; a stage copies
    assert f.st_nlink == (6 if fork else 3)


def test_modes_and_times_are_kept(tmp_path: Path) -> None:
    """As shutil.copystat kept them: every file's and folder's mode and mtime, a link's
    mtime, the top folder's (a folder's once its entries are made)."""
    current, following = tmp_path / "v1", tmp_path / "v2"
    workspace = current / "workspace"
    (workspace / "sub" / "inner").mkdir(parents=True)
    (current / "tmp").mkdir()
    (workspace / "sub" / "inner" / "ro").write_text("x")
    (workspace / "exe").write_text("#!")
    os.symlink("exe", workspace / "link")
    for path, mode in [(workspace / "exe", 0o751), (workspace / "sub" / "inner" / "ro", 0o444)]:
        path.chmod(mode)
    for i, path in enumerate(sorted(workspace.rglob("*"), reverse=True)):
        os.utime(path, ns=(1_000_000_000 * i + 7, 1_000_000_000 * i + 11), follow_symlinks=False)
    (workspace / "sub" / "inner").chmod(0o555)  # read-only: its entries made first
    os.utime(workspace, ns=(5, 3_000_000_123))
    state.stage(current, following, run_only=())
    for source in [workspace, *workspace.rglob("*")]:
        copy = following / source.relative_to(current)
        was, now = os.lstat(source), os.lstat(copy)
        assert now.st_mode == was.st_mode, source
        assert now.st_mtime_ns == was.st_mtime_ns, source
    (workspace / "sub" / "inner").chmod(0o755)  # for pytest's cleanup
    (following / "workspace" / "sub" / "inner").chmod(0o755)


MAKE_DEEP = """\
import os
def main(args):
    p = '/workspace'
    for i in range(990):
        p += '/d'
        os.mkdir(p)
    with open(p + '/bottom', 'w') as f:
        f.write('deep')
    return len(p)
"""

SEE_DEEP = """\
import os
def main(args):
    p = '/workspace' + '/d' * 990
    with open(p + '/bottom') as f:
        return [os.path.isdir(p), os.path.exists(p + '/d'), f.read()]
"""


def _session_run(engine: SandboxEngine, folder: Path, version: int, code: str) -> RunResult:
    session = SessionRun(folder=str(folder), version=version, reseed=version == 0)
    return engine.run(RunRequest(kind="code", code=code, session=session, limits=POLICY.resolve(timeout_ms=20_000)))


def test_a_session_whose_run_made_a_very_deep_tree_keeps_running(engine: SandboxEngine, deep_root: Path) -> None:
    folder = deep_root / "session"
    folder.mkdir()
    made = _session_run(engine, folder, 0, MAKE_DEEP)
    assert made.status == "completed" and made.output == len("/workspace") + 2 * 990, made
    assert made.session is not None and made.session.committed
    for version in (1, 2):  # the next run, and the one after it
        seen = _session_run(engine, folder, version, SEE_DEEP)
        assert seen.status == "completed", seen
        assert seen.output == [True, False, "deep"]
        assert seen.session is not None and seen.session.committed
