"""dirtree.remove while something else works in the same tree (issue 42, item 7): another
remover of the whole tree or of part of it (a session's old version deleted in the
background while a close removes the session), or a writer not stopped yet."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from wasmrun import dirtree

ROUNDS = 3


def _tree(top: Path, files: tuple[int, ...] = (800, 100, 100, 100)) -> None:
    """A session's folder, its versions holding `files` files each: most in v0, the
    part another remover takes, so that the two overlap whichever gets there first."""
    for d, count in enumerate(files):
        inner = top / f"v{d}" / "workspace"
        inner.mkdir(parents=True)
        for f in range(count):
            (inner / str(f)).write_bytes(b"x")
    (top / "meta.json").write_text("{}")


def _at_once(*calls: Callable[[], None], first: threading.Event | None = None) -> list[BaseException]:
    """`calls` started together, each on its thread (the first once `first` is set,
    if given); what they raised."""
    start = threading.Barrier(len(calls))
    raised: list[BaseException] = []

    def run(call: Callable[[], None]) -> None:
        start.wait()
        if first is not None and call is calls[0]:
            first.wait(10)
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return raised


@pytest.mark.parametrize("other", ["the whole tree", "a folder in it"])
def test_a_tree_removed_while_another_remover_works_in_it_is_gone(tmp_path: Path, other: str) -> None:
    for n in range(ROUNDS):
        top = tmp_path / f"session{n}"
        _tree(top)
        part = top if other == "the whole tree" else top / "v0"
        assert _at_once(partial(dirtree.remove, top), partial(dirtree.remove, part)) == []
        assert not top.exists()


def test_a_tree_removed_while_a_writer_adds_to_it_is_gone(tmp_path: Path) -> None:
    """A writer that goes on creating files until its folder is gone or it has made
    1,000 (a run's entry quota), as a worker still writing a version would; the
    remover starts once it has made 100. The remover walks again and wins."""
    for n in range(ROUNDS):
        top = tmp_path / f"session{n}"
        _tree(top, (100, 100))
        started = threading.Event()
        write = partial(_write_until_gone, top / "v1" / "workspace", started)
        assert _at_once(partial(dirtree.remove, top), write, first=started) == []
        assert not top.exists()


def _write_until_gone(folder: Path, started: threading.Event) -> None:
    for i in range(1_000):
        if i == 100:
            started.set()
        try:
            (folder / f"late{i}").write_bytes(b"y")
        except FileNotFoundError:
            break
    started.set()


def test_empty_keeps_the_top_while_another_remover_works_below(tmp_path: Path) -> None:
    for n in range(ROUNDS):
        top = tmp_path / f"workspace{n}"
        _tree(top)
        assert _at_once(partial(dirtree.empty, top), partial(dirtree.remove, top / "v0")) == []
        assert top.is_dir() and list(top.iterdir()) == []
