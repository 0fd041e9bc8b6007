"""Wheels into a site-packages folder, checked member by member, and their
bytecode for the guest.

We unpack wheels ourselves instead of letting pip install them: every member
name is checked (no absolute path, no `..`, no symbolic link, no native
library) before a byte is written, and nothing but the importable part of a
wheel (its root and `*.data/purelib|platlib`) is kept: no scripts, headers or
data files, which have no use in the guest.
"""

from __future__ import annotations

import base64
import csv
import hashlib
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
# A member that inflates more than this many times (and past MAX_RATIO_FLOOR) is a
# compression bomb: source and data compress 3 to 20 times.
MAX_RATIO = 200
MAX_RATIO_FLOOR = 1 << 20
SIGNATURES = (".dist-info/RECORD", ".dist-info/RECORD.jws", ".dist-info/RECORD.p7s")


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


def _record_hashes(zf: zipfile.ZipFile, wheel: str) -> dict[str, str]:
    """The wheel's RECORD as {member: "sha256=..."}; UnsafeWheel without one."""
    records = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD") and n.count("/") == 1]
    if len(records) != 1:
        raise UnsafeWheel(f"{wheel}: has {len(records)} RECORD files, a wheel has one")
    hashes: dict[str, str] = {}
    text = zf.read(records[0]).decode("utf-8", "replace")
    for row in csv.reader(io.StringIO(text)):
        if row and len(row) >= 2 and row[1]:
            hashes[row[0]] = row[1]
    return hashes


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def unpack(
    wheel: Path, site: Path, *, strict: bool = False, reserved: frozenset[str] = frozenset(),
    max_bytes: int = MAX_UNPACKED_BYTES,
) -> int:
    """Every importable member of `wheel` under `site`, read-only; the bytes written.
    `strict` (on-demand installs): every member is in the wheel's RECORD with its sha256,
    which it matches, and none inflates like a compression bomb; `reserved`: top-level
    names the image has already (its own modules), which no member may shadow. On
    UnsafeWheel, what was written is the caller's to remove (it builds in a folder aside)."""
    shown = wheel.name
    written = 0
    with zipfile.ZipFile(wheel) as zf:
        members = zf.infolist()
        if len(members) > MAX_MEMBERS:
            raise UnsafeWheel(f"{shown}: more than {MAX_MEMBERS} members")
        if sum(m.file_size for m in members) > max_bytes:
            raise UnsafeWheel(f"{shown}: unpacks to more than {max_bytes >> 20} MiB")
        _check_record(zf, shown)
        hashes = _record_hashes(zf, shown) if strict else {}
        for member in members:
            if stat.S_ISLNK(member.external_attr >> 16):
                raise UnsafeWheel(f"{shown}: member {member.filename[:100]!r} is a symbolic link")
            target = _target(member.filename, shown)
            if member.is_dir():
                continue
            if strict:
                if member.file_size > MAX_RATIO_FLOOR and member.file_size > MAX_RATIO * max(1, member.compress_size):
                    raise UnsafeWheel(f"{shown}: {member.filename[:100]!r} inflates {member.file_size} bytes"
                                      f" from {member.compress_size}: a compression bomb")
                if not member.filename.endswith(SIGNATURES) and member.filename not in hashes:
                    raise UnsafeWheel(f"{shown}: {member.filename[:100]!r} is not in the wheel's RECORD")
            if target is None:
                if strict and not member.filename.endswith(SIGNATURES):
                    _check_hash(zf.read(member), hashes[member.filename], member.filename, shown)
                continue
            if NATIVE_FILE.search(member.filename):
                raise UnsafeWheel(f"{shown}: {member.filename[:100]!r} is native code")
            top = target.parts[0]
            module = top[:-3] if top.endswith(".py") else top
            if module in reserved and not top.endswith(".dist-info"):
                raise UnsafeWheel(f"{shown}: {target.as_posix()[:100]!r} would shadow the image's own module {module!r}")
            try:
                data = _write(zf, member, site.joinpath(*target.parts), shown)
            except OSError as exc:  # a member whose folder is another member's file, ...
                raise UnsafeWheel(f"{shown}: {target.as_posix()[:100]!r} cannot be written ({exc.strerror})") from None
            if strict and not member.filename.endswith(SIGNATURES):
                _check_hash(data, hashes[member.filename], member.filename, shown)
            written += len(data)
    return written


def _check_hash(data: bytes, expected: str, name: str, shown: str) -> None:
    if not expected.startswith("sha256=") or _digest(data) != expected:
        raise UnsafeWheel(f"{shown}: {name[:100]!r} does not match its hash in the wheel's RECORD")


def _write(zf: zipfile.ZipFile, member: zipfile.ZipInfo, path: Path, shown: str) -> bytes:
    """The member written at `path` (read-only); its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = zf.read(member)  # at most its declared size (zipfile stops there), bounded above
    if path.exists():
        # Old-style namespace packages (zope, backports) ship the same
        # __init__.py in several wheels; anything else is a clash.
        if path.is_file() and path.read_bytes() == data:
            return data
        raise UnsafeWheel(f"{shown}: {member.filename[:100]!r} is also in another wheel, with other content")
    with open(path, "xb") as dst:
        dst.write(data)
    os.chmod(path, 0o444)
    return data


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
