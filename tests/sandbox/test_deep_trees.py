"""A workspace tree of any depth is measured and removed: no recursion, no long paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wasmrun import dirtree
from wasmrun.sandbox.files.workspace import Workspace, WorkspaceDirs

DEPTH = 5_000  # past Python's recursion limit; the path is 10,000 characters (PATH_MAX is 4,096)


def _deep_tree(top: Path, depth: int) -> None:
    """q/q/q/... `depth` levels, a file at each level, made by descriptor."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(depth):
            os.mkdir("q", dir_fd=fd)
            leaf = os.open(f"f{i % 3}", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
            os.write(leaf, b"xy")
            os.close(leaf)
            child = os.open("q", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)



def test_measure_and_empty_a_very_deep_tree(deep_root):
    run_folder = deep_root / "run"  # a run's folder: its /workspace and /tmp share the quota
    workspace = Workspace(run_folder, 1 << 30, 1 << 20)
    workspace.path.mkdir(parents=True)
    workspace.tmp.mkdir()
    _deep_tree(workspace.path, DEPTH)
    _deep_tree(workspace.tmp, 3)
    size, entries = workspace.measure()
    assert entries == 2 * DEPTH + 2 * 3
    assert size >= 2 * DEPTH  # the files' bytes, and whatever the filesystem reports for folders
    dirtree.empty(workspace.path)
    assert list(workspace.path.iterdir()) == []


def test_workspace_dirs_recycle_a_deep_workspace_and_leave_nothing(deep_root):
    dirs = WorkspaceDirs(deep_root)
    path = dirs.take()  # a run folder: workspace, tmp and blobs
    _deep_tree(path / "workspace", DEPTH)
    _deep_tree(path / "tmp", DEPTH)
    dirs.give_back(path)
    assert sorted(sub.name for sub in path.iterdir()) == ["blobs", "tmp", "workspace"]
    assert all(list(sub.iterdir()) == [] for sub in path.iterdir())
    assert dirs.take() == path  # emptied and shelved
    dirs.give_back(path)
    dirs.remove_all()
    assert list(deep_root.iterdir()) == []


def test_symbolic_links_are_removed_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    top = tmp_path / "ws"
    (top / "a").mkdir(parents=True)
    os.symlink(outside, top / "a" / "link")
    os.symlink(outside / "keep.txt", top / "file-link")
    os.symlink(top / "nowhere", top / "dangling")
    assert dirtree.measure(top)[1] == 4
    dirtree.remove(top)
    assert not top.exists()
    assert (outside / "keep.txt").read_text() == "mine"


def test_remove_of_a_missing_tree_is_quiet(tmp_path):
    dirtree.remove(tmp_path / "never-made")


def test_guest_made_deep_tree_fails_the_run_cleanly_and_is_removed(run_code, engine):
    code = (
        "import os\n"
        "def main(args):\n"
        "    for i in range(200_000):\n"
        "        os.mkdir('q')\n"
        "        os.chdir('q')\n"
    )
    result = run_code(code, timeout_ms=120_000)
    assert result.status == "failed"
    assert result.error.type == "WorkspaceQuotaExceeded"
    engine.drain()
    leftovers = [p for p in engine.loop.workspace_root.glob("ws-*") if any(p.iterdir())]
    assert leftovers == []


@pytest.mark.parametrize("entries", [0, 3])
def test_measure_counts_plain_entries(tmp_path, entries):
    for i in range(entries):
        (tmp_path / f"f{i}").write_bytes(b"abc")
    assert dirtree.measure(tmp_path) == (3 * entries, entries)


def test_guest_made_tree_deeper_than_any_path_is_removed(run_code, engine):
    # Through directory descriptors the guest makes a tree far deeper than the
    # recursion limit, whose full path is longer than PATH_MAX, in one run.
    code = (
        "import os\n"
        "def main(args):\n"
        "    fd = os.open('/workspace', os.O_RDONLY)\n"
        "    for _ in range(args['depth']):\n"
        "        os.mkdir('q', dir_fd=fd)\n"
        "        child = os.open('q', os.O_RDONLY, dir_fd=fd)\n"
        "        os.close(fd)\n"
        "        fd = child\n"
        "    return args['depth']\n"
    )
    result = run_code(code, args={"depth": 3000}, workspace_files=5000, timeout_ms=300_000)
    assert result.output == 3000, result.error
    engine.drain()
    leftovers = [p for p in engine.loop.workspace_root.glob("ws-*") if any(p.iterdir())]
    assert leftovers == []
