"""A session version's files in the object store, and back (database/sessions.py).

A version is up to three objects, each under `sessions/<key>/<nonce>/`, the
nonce new for every upload (so a server that lost its hold on a session, and
uploads anyway, never overwrites what another server committed):

    memory        the base of its pages (sandbox/sessions/pages.py); a version whose base
                  is a hard link of its previous version's names the same object
    memory.delta  the pages changed since the base, when the version has one
    files.tar     /workspace and /tmp (symbolic links kept as links)

A fetched version is assembled in a folder of its own and renamed into place
whole, with `objects.json` naming what it was made from: a local copy is used
only when that names exactly the row's objects.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tarfile
from pathlib import Path

from wasmrun import dirtree
from wasmrun.blobs.objects import ObjectStore
from wasmrun.sandbox import session_state

PREFIX = "sessions/"
FILES = "files.tar"
MARKER = "objects.json"
MEMORY_FILES = session_state.MEMORY_FILES


def marker(objects: dict[str, str]) -> bytes:
    return json.dumps(objects, sort_keys=True).encode()


def is_current(version: Path, objects: dict[str, str]) -> bool:
    """Whether the local `version` folder holds exactly `objects`."""
    try:
        return (version / MARKER).read_bytes() == marker(objects)
    except OSError:
        return False


def mark(version: Path, objects: dict[str, str]) -> None:
    fd = os.open(version / MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(marker(objects))


def upload(
    objects: ObjectStore, key: str, version: Path, previous: Path | None, previous_objects: dict[str, str],
    previous_digest: str = "",
) -> tuple[dict[str, str], str]:
    """Store `version`'s files; the objects naming it and its files' digest. What did
    not change since `previous` is not stored again: a base image shared with it (a
    hard link), folders whose bundle has `previous_digest` (a run that wrote no file)."""
    nonce = secrets.token_hex(8)
    stored: dict[str, str] = {}
    try:
        for role in MEMORY_FILES:
            path = version / role
            if not path.exists():
                continue
            reused = previous_objects.get(role) if role == MEMORY_FILES[0] else None
            if reused is not None and previous is not None and _same_file(path, previous / role):
                stored[role] = reused
                continue
            stored[role] = f"{PREFIX}{key}/{nonce}/{role}"
            objects.put_file(stored[role], path)
        bundle = version.parent / f".upload-{nonce}.tar"
        try:
            digest = _bundle(version, bundle)
            if digest == previous_digest and FILES in previous_objects:
                stored[FILES] = previous_objects[FILES]
            else:
                stored[FILES] = f"{PREFIX}{key}/{nonce}/{FILES}"
                objects.put_file(stored[FILES], bundle)
        finally:
            bundle.unlink(missing_ok=True)
    except BaseException:
        delete(objects, new_objects(stored, previous_objects))
        raise
    return stored, digest


def _bundle(version: Path, bundle: Path) -> str:
    """`version`'s folders as a tar at `bundle`; its SHA-256. Unchanged folders give
    the same bytes: each run's copies keep the files' and folders' times."""
    with tarfile.open(bundle, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in session_state.FOLDERS:
            if (version / name).is_dir():
                tar.add(version / name, arcname=name, filter=_top_timeless)  # links kept as links, never followed
    digest = hashlib.sha256()
    with bundle.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(objects: ObjectStore, objects_of: dict[str, str], target: Path) -> None:
    """The version `objects_of` names, at `target` (which must not exist), whole or not at all."""
    staging = target.parent / f".fetch-{secrets.token_hex(8)}"
    staging.mkdir(mode=0o700)
    try:
        for role in MEMORY_FILES:
            if role in objects_of:
                objects.get_file(objects_of[role], staging / role)
        if FILES in objects_of:
            bundle = staging / FILES
            objects.get_file(objects_of[FILES], bundle)
            with tarfile.open(bundle) as tar:
                # Our own bundles; still, no member may land outside the folder.
                tar.extractall(staging, filter="tar")
            bundle.unlink()
        for name in session_state.FOLDERS:
            (staging / name).mkdir(mode=0o700, exist_ok=True)
        mark(staging, objects_of)
        os.rename(staging, target)
    except BaseException:
        dirtree.remove(staging)
        raise


def new_objects(objects: dict[str, str], previous: dict[str, str]) -> list[str]:
    """The objects of `objects` that `previous` does not also name."""
    kept = set(previous.values())
    return [name for name in objects.values() if name not in kept]


def delete(objects: ObjectStore, names: list[str]) -> None:
    for name in names:
        objects.delete(name)


def _top_timeless(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """The two folders themselves are made anew by every run (when empty): their time
    would change an otherwise equal bundle."""
    if member.name in session_state.FOLDERS:
        member.mtime = 0
    return member


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
