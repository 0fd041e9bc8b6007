"""The tenants file, `<data_dir>/tenants.json` (0600): each tenant's key hashes and
limit overrides. Written by `wasmrun tenants ...`, read by the server, which
sees a change (a new tenant, a revoked key) on the next call.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from wasmrun.durable import atomic_write
from wasmrun.tenants.caller import Caller
from wasmrun.tenants.keys import bearer_token, key_hash, new_key, same_hash
from wasmrun.tenants.limits import TenantLimits, check_limits

logger = logging.getLogger("wasmrun.tenants")
TENANTS_FILE = "tenants.json"
TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
MAX_KEYS = 2  # the current key and, during a rotation, the one before


class KeyRecord(msgspec.Struct, frozen=True):
    hash: str  # sha256 of the key, hex
    created: str


class TenantRecord(msgspec.Struct, kw_only=True):
    name: str
    created: str
    keys: list[KeyRecord] = []
    limits: dict[str, int] = {}  # overrides of the server's defaults


class TenantsFile(msgspec.Struct):
    tenants: dict[str, TenantRecord] = {}


class TenantError(ValueError):
    """A tenants command that cannot be done (unknown name, bad limit...)."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` atomically with `data`, readable by its owner only."""
    atomic_write(path, data, mode=0o600)


class TenantStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / TENANTS_FILE

    def load(self) -> TenantsFile:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return TenantsFile()
        try:
            return msgspec.json.decode(data, type=TenantsFile)
        except msgspec.DecodeError as exc:
            raise TenantError(f"{self.path} is not a valid tenants file: {exc}") from None

    @contextlib.contextmanager
    def _editing(self) -> Iterator[TenantsFile]:
        """Read, change and write back the file, one command at a time."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            doc = self.load()
            yield doc
            write_private(self.path, msgspec.json.format(msgspec.json.encode(doc)))
        finally:
            os.close(lock)

    def _get(self, doc: TenantsFile, name: str) -> TenantRecord:
        record = doc.tenants.get(name)
        if record is None:
            raise TenantError(f"no tenant named {name!r}")
        return record

    def add(self, name: str, limits: Mapping[str, int] | None = None) -> str:
        """A new tenant; returns its key (the only time it is ever seen)."""
        if not TENANT_NAME.fullmatch(name):
            raise TenantError(f"tenant name {name!r} must be 1-63 of a-z, 0-9, '_' and '-', starting with a letter or digit")
        checked = check_limits(limits or {})
        key = new_key()
        with self._editing() as doc:
            if name in doc.tenants:
                raise TenantError(f"tenant {name!r} already exists (rotate its key with `wasmrun tenants rotate`)")
            doc.tenants[name] = TenantRecord(
                name=name, created=_now(), keys=[KeyRecord(key_hash(key), _now())], limits=checked
            )
        return key

    def rotate(self, name: str) -> str:
        """A second valid key; the old one stays valid until `revoke --old`."""
        key = new_key()
        with self._editing() as doc:
            record = self._get(doc, name)
            if len(record.keys) >= MAX_KEYS:
                raise TenantError(f"tenant {name!r} already has {MAX_KEYS} keys: `wasmrun tenants revoke {name} --old` first")
            record.keys.append(KeyRecord(key_hash(key), _now()))
        return key

    def revoke(self, name: str, *, old_only: bool = False) -> int:
        """Revoke every key of `name` (or all but the newest); returns how many."""
        with self._editing() as doc:
            record = self._get(doc, name)
            kept = record.keys[-1:] if old_only else []
            revoked = len(record.keys) - len(kept)
            record.keys = kept
        return revoked

    def set_limits(self, name: str, limits: Mapping[str, int]) -> None:
        checked = check_limits(limits)
        with self._editing() as doc:
            self._get(doc, name).limits.update(checked)


class TenantDirectory:
    """The server's view of the tenants file: authenticates a call's API key.

    With no tenants at all, every call is the implicit local tenant's when the
    server may serve anonymously (loopback, or --insecure), else refused."""

    def __init__(self, store: TenantStore, defaults: TenantLimits, *, anonymous: Caller | None) -> None:
        self.store = store
        self.defaults = defaults
        self.anonymous = anonymous
        self._seen: tuple[int, int, int] | None = None
        self._keys: list[tuple[str, Caller]] = []
        self._by_name: dict[str, Caller] = {}
        self._has_tenants = False

    def _refresh(self) -> None:
        try:
            st = os.stat(self.store.path)
            signature = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            signature = (0, 0, 0)
        if signature == self._seen:
            return
        try:
            doc = self.store.load()
        except (TenantError, OSError) as exc:
            # Fail closed: keep the keys last read (none at first), and no anonymous access.
            logger.error("cannot read the tenants file, keeping the last good one: %s", exc)
            self._has_tenants = True
            self._seen = signature  # read again once it changes, not on every call
            return
        keys: list[tuple[str, Caller]] = []
        for record in doc.tenants.values():
            caller = Caller(record.name, self.defaults.with_values(record.limits))
            keys.extend((k.hash, caller) for k in record.keys)
        self._keys = keys
        self._by_name = {r.name: Caller(r.name, self.defaults.with_values(r.limits)) for r in doc.tenants.values()}
        self._has_tenants = bool(doc.tenants)
        self._seen = signature

    def caller(self, name: str) -> Caller | None:
        """Tenant `name` with its limits, revoked keys or not; None if there is none."""
        self._refresh()
        return self._by_name.get(name)

    def names(self) -> list[str]:
        self._refresh()
        return list(self._by_name)

    def has_tenants(self) -> bool:
        self._refresh()
        return self._has_tenants

    def authenticate(self, authorization: str | None) -> Caller | None:
        self._refresh()
        if not self._has_tenants:
            return self.anonymous
        token = bearer_token(authorization)
        if token is None:
            return None
        presented = key_hash(token)
        found = None
        for stored, caller in self._keys:  # every key compared, in constant time each
            if same_hash(presented, stored):
                found = caller
        return found
