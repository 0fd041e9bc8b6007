"""Fixtures for the sandbox tests: one real engine (real guest, real wasmtime)
for the whole session, and a small in-memory blob store behind it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wasmrun.sandbox.contract.limits import LimitPolicy
from wasmrun.sandbox.contract.types import MountedSkill, RunRequest, RunResult
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.engines import make_engine
from wasmrun.sandbox.guest.jsontext import encode_args


class MemoryBlobs:
    """The sandbox's BlobAccess over a dict, so tests can look inside."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[bytes, str]] = {}
        self.owners: dict[str, str] = {}

    def add(self, data: bytes, kind: str = "text/plain") -> str:
        return self.create(data, kind)

    def size(self, blob_id: str, owner: str = "local") -> int | None:
        item = self.data.get(blob_id)
        return None if item is None or self.owners[blob_id] != owner else len(item[0])

    def read(self, blob_id: str, offset: int, length: int, owner: str = "local") -> bytes:
        if self.size(blob_id, owner) is None:
            raise KeyError(blob_id)
        return self.data[blob_id][0][offset : offset + length]

    def local_path(self, blob_id: str, owner: str = "local") -> Path | None:
        return None  # no files: /blobs gets copies

    def create(
        self, data: bytes, kind: str, run_id: str | None = None, owner: str = "local", quota: Any = None
    ) -> str:
        blob_id = "blob:" + secrets.token_hex(16)
        self.data[blob_id] = (bytes(data), kind)
        self.owners[blob_id] = owner
        return blob_id


@pytest.fixture(scope="session")
def blobs() -> MemoryBlobs:
    return MemoryBlobs()


@pytest.fixture(scope="session")
def engine(test_image: str, blobs: MemoryBlobs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxEngine]:
    # One per image (tests/images.py): a module marked for both runs on each.
    with make_engine(test_image, blobs, tmp_path_factory.mktemp("workspaces")) as eng:
        yield eng


POLICY = LimitPolicy()


@pytest.fixture()
def run_code(engine: SandboxEngine):
    """run_code(source, args=..., skills=..., input_blobs=..., env=..., **limits) -> RunResult"""

    def run(
        code: str,
        args: dict | None = None,
        skills: list[MountedSkill] | None = None,
        input_blobs: list[str] | None = None,
        env: dict[str, str] | None = None,
        function: str = "main",
        **limits: int,
    ) -> RunResult:
        return engine.run(
            RunRequest(
                kind="code",
                code=code,
                function=function,
                args_json=encode_args(args or {}),
                skills=skills or [],
                input_blobs=input_blobs or [],
                env=env or {},
                limits=POLICY.resolve(**limits),
            )
        )

    return run


def make_skill(root: Path, name: str, files: dict[str, str], entrypoint: str = "code/main.py") -> MountedSkill:
    """A skill folder on disk with `files` (relative path -> text)."""
    folder = root / name
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return MountedSkill(name=name, root=str(folder), entrypoint=entrypoint)


@pytest.fixture()
def deep_root(tmp_path):
    """A folder for deep trees, removed by descriptor afterwards, even if the test failed:
    pytest's own cleanup recurses."""
    from wasmrun import dirtree

    root = tmp_path / "deep-root"
    root.mkdir()
    yield root
    dirtree.remove(root)
