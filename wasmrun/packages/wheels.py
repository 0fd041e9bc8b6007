"""Wheels into a site-packages folder, checked member by member, and their
bytecode for the guest.

We unpack wheels ourselves instead of letting pip install them: every member
name is checked (no absolute path, no `..`, no symbolic link, no native
library) before a byte is written, and nothing but the importable part of a
wheel (its root and `*.data/purelib|platlib`) is kept: no scripts, headers or
data files, which have no use in the guest.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import marshal
import os
import re
import stat
import sys
import zipfile
from pathlib import Path, PurePosixPath

GUEST_SITE = "/packages"  # where the guest sees the layer's site-packages
# Any shared library or object file, versioned or not (libfoo.so.1): code the guest cannot load.
NATIVE_FILE = re.compile(r"\.(so|pyd|dll|dylib|a|o)(\.[0-9]+)*$", re.IGNORECASE)
MAX_MEMBERS = 50_000
MAX_UNPACKED_BYTES = 1 << 30
MAX_NAME = 1024


class UnsafeWheel(ValueError):
    pass


def native_members(wheel: Path) -> list[str]:
    """The members of `wheel` that are native code."""
    with zipfile.ZipFile(wheel) as zf:
        return [name for name in zf.namelist() if NATIVE_FILE.search(name)]


def _target(name: str, wheel: str) -> PurePosixPath | None:
    """Where a member goes under site-packages, None if it is not importable
    (scripts, headers, data), or UnsafeWheel if its name is hostile."""
    if len(name) > MAX_NAME or "\0" in name or "\\" in name or name.startswith("/") or re.match(r"[A-Za-z]:", name):
        raise UnsafeWheel(f"{wheel}: member {name[:100]!r} has an absolute or malformed path")
    parts = PurePosixPath(name).parts
    if any(part in ("..", ".") for part in parts):
        raise UnsafeWheel(f"{wheel}: member {name[:100]!r} climbs out of its folder")
    if parts and parts[0].endswith(".data"):
        if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
            return None
        return PurePosixPath(*parts[2:])
    return PurePosixPath(*parts) if parts else None


def _check_record(zf: zipfile.ZipFile, wheel: str) -> None:
    records = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD") and n.count("/") == 1]
    for record in records:
        text = zf.read(record).decode("utf-8", "replace")
        for row in csv.reader(io.StringIO(text)):
            if row:
                _target(row[0], wheel)


def unpack(wheel: Path, site: Path) -> None:
    """Every importable member of `wheel` under `site`, read-only."""
    shown = wheel.name
    with zipfile.ZipFile(wheel) as zf:
        members = zf.infolist()
        if len(members) > MAX_MEMBERS:
            raise UnsafeWheel(f"{shown}: more than {MAX_MEMBERS} members")
        if sum(m.file_size for m in members) > MAX_UNPACKED_BYTES:
            raise UnsafeWheel(f"{shown}: unpacks to more than {MAX_UNPACKED_BYTES >> 20} MiB")
        _check_record(zf, shown)
        for member in members:
            if stat.S_ISLNK(member.external_attr >> 16):
                raise UnsafeWheel(f"{shown}: member {member.filename[:100]!r} is a symbolic link")
            target = _target(member.filename, shown)
            if target is None or member.is_dir():
                continue
            if NATIVE_FILE.search(member.filename):
                raise UnsafeWheel(f"{shown}: {member.filename[:100]!r} is native code")
            try:
                _write(zf, member, site.joinpath(*target.parts), shown)
            except OSError as exc:  # a member whose folder is another member's file, ...
                raise UnsafeWheel(f"{shown}: {target.as_posix()[:100]!r} cannot be written ({exc.strerror})") from None


def _write(zf: zipfile.ZipFile, member: zipfile.ZipInfo, path: Path, shown: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        # Old-style namespace packages (zope, backports) ship the same
        # __init__.py in several wheels; anything else is a clash.
        if path.is_file() and path.read_bytes() == zf.read(member):
            return
        raise UnsafeWheel(f"{shown}: {member.filename[:100]!r} is also in another wheel, with other content")
    with zf.open(member) as src, open(path, "xb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    os.chmod(path, 0o444)


def compile_bytecode(site: Path, pycache: Path) -> int:
    """Bytecode for every module under `site`, laid out as the guest's
    sys.pycache_prefix ("/pycache") expects for sources under /packages:
    `pycache/<folder>/<module>.cpython-311.pyc`. Hash-based and unchecked, as
    the guest's stdlib: the layer never changes once published, and checking
    would cost a stat per import. Files that do not compile (Python 2 leftovers)
    are skipped: importing one reports its own SyntaxError. Only valid when the
    host runs the guest's Python version (the caller checks)."""
    count = 0
    tag = sys.implementation.cache_tag
    for source in sorted(site.rglob("*.py")):
        rel = source.relative_to(site)
        data = source.read_bytes()
        try:
            code = compile(data, f"{GUEST_SITE}/{rel.as_posix()}", "exec", dont_inherit=True, optimize=0)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        header = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + importlib.util.source_hash(data)
        target = pycache / rel.parent / f"{source.stem}.{tag}.pyc"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(header + marshal.dumps(code))
        count += 1
    return count
