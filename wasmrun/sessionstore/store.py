"""The server's sessions: who owns which, their lifetime, caps and folders on disk.

Each session is a folder `<data dir>/sessions/<key>/` (0700, the server's
only), where `key` is the SHA-256 of the session id (192 random bits): the
folder's name gives away nothing a `ls` could use, and the audit log names a
session by a prefix of its key. The folder
holds `meta.json` (this module's `SessionMeta`) and the session's state
version by version (see sandbox/sessions/run.py). Every session is paused on disk
between runs, so the store is rebuilt from the folders when the server
starts: sessions survive a restart, and the runs in progress when it stopped
are lost (the version before them is kept).

Session files are written without fsync (a durable write costs a run about
7 ms here): a stop, a restart or a crash of the server loses nothing, a crash
of the machine may lose a session's last versions; a session whose state did
not survive is removed at start rather than resumed blank.

A session ends when closed, when unused for its idle timeout, or at the
maximum age; its folder (its pages and files) is then deleted, once, by
whoever ended it (`remove_ended`). Other work may still be going on in the
folder then: its old version being deleted in the background (`finish_run`),
a worker that outlived its run. So the folder is first renamed out of the
session's name (`.ended-...`, removed at start if a stop cut the removal
short): nothing reaching it by its path finds it from then on.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from wasmrun import dirtree, tracing
from wasmrun.observe.record import CallRecord
from wasmrun.sandbox import SessionOutcome
from wasmrun.sandbox import session_state as sandbox_sessions
from wasmrun.sessionstore.records import RecordStore
from wasmrun.tenants.limits import SessionPolicy

logger = logging.getLogger("wasmrun.sessions")

ID_PREFIX = "ses_"
META = "meta.json"
ENDED = ".ended-"  # an ended session's folder while it is removed
ENDED_TRIES = 3  # removals of an ended session's folder that something keeps making again
SWEEP_INTERVAL_S = 5.0


class SessionMeta(msgspec.Struct, kw_only=True):
    session_id: str  # list_sessions answers with it
    key: str
    owner: str
    created: float
    last_used: float
    idle_timeout_s: int
    max_age_s: int
    limits: dict[str, int]  # the RunLimits asked for at creation (as given)
    skills: list[str]
    version: int = 0
    reseed: bool = True  # the next run draws new random state (a new session, a fork)
    runs: int = 0
    memory_bytes: int = 0
    image_bytes: int = 0
    files_bytes: int = 0
    # With the shared backends: the current version's objects in the object store
    # (database/sessions.py), by role ("memory", "memory.delta", "files").
    objects: dict[str, str] = msgspec.field(default_factory=dict)
    files_digest: str = ""  # the SHA-256 of objects["files.tar"]: a run that changed no file stores none
    # The package set its runs mount (create_session's `packages`, wasmrun/packages/ondemand.py):
    # name==version pins and the guest Python they were resolved for; a fork keeps them.
    packages: list[str] = msgspec.field(default_factory=list)
    package_tag: str = ""

    def expires(self) -> float:
        return min(self.last_used + self.idle_timeout_s, self.created + self.max_age_s)

    @property
    def disk_bytes(self) -> int:
        return self.image_bytes + self.files_bytes


_meta_decoder = msgspec.json.Decoder(SessionMeta)
_encoder = msgspec.json.Encoder()


def packages_of(source: SessionMeta | None) -> tuple[list[str], str] | None:
    """A fork's packages: its original's."""
    return (list(source.packages), source.package_tag) if source is not None and source.packages else None


def key_of(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


class UnknownSession(Exception):
    pass


class Busy(Exception):
    pass


class Unavailable(Exception):
    """The sessions' shared backends cannot be reached now (the call may be tried again)."""


class SessionStore:
    """Sessions of every tenant, in memory and on disk; thread-safe."""

    blocking = False  # whether its calls wait on a database (callers then make them off the event loop)

    def __init__(
        self, root: Path, policy: SessionPolicy | None = None, on_end: Callable[[SessionMeta, str], None] | None = None
    ) -> None:
        self.root = root
        self.policy = policy or SessionPolicy()
        # Told when a session ends, and why ("closed", "expired"): metrics and the audit log.
        self.on_end: Callable[[SessionMeta, str], None] = on_end or (lambda meta, reason: None)
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionMeta] = {}
        self._busy: set[str] = set()
        self._commit_locks: dict[str, threading.Lock] = {}
        self._records: RecordStore | None = None
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        self._load()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wasmrun-sessions-delete")

    # -- start, stop, expiry ------------------------------------------------

    def _load(self) -> None:
        """The sessions left on disk: expired ones deleted, runs cut short by a stop undone."""
        now = time.time()
        for folder in self.root.iterdir():
            if folder.name.startswith(ENDED):  # a removal a stop cut short
                remove_quietly(folder)
                continue
            try:
                meta = _meta_decoder.decode((folder / META).read_bytes())
                if meta.key != folder.name or key_of(meta.session_id) != meta.key:
                    raise ValueError("meta.json names another session")
                if meta.version > 0 and not sandbox_sessions.version_dir(folder, meta.version).is_dir():
                    raise ValueError("its state is missing")  # e.g. the machine crashed: never resume it blank
            except (OSError, ValueError, msgspec.DecodeError):
                logger.warning("removing a damaged session folder %s", folder.name)
                remove_quietly(folder)
                continue
            if meta.expires() <= now:
                remove_quietly(folder)
                self.on_end(meta, "expired")
                continue
            for stale in folder.glob("v*"):
                if stale.name != f"v{meta.version}":
                    remove_quietly(stale)
            self._sessions[meta.key] = meta

    def start(self) -> None:
        """Expire sessions in the background until `stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._sweep_loop, name="wasmrun-sessions", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._deleter.shutdown(wait=True)

    def _sweep_loop(self) -> None:
        while not self._stop.wait(SWEEP_INTERVAL_S):
            try:
                self.sweep()
            except Exception:
                logger.exception("session sweep failed")

    def sweep(self, now: float | None = None) -> int:
        """End every session past its idle timeout or maximum age; how many ended."""
        now = time.time() if now is None else now
        with self._lock:
            ended = [m for k, m in self._sessions.items() if m.expires() <= now and k not in self._busy]
            for meta in ended:
                del self._sessions[meta.key]
        for meta in ended:
            remove_ended(self.root, meta.key)
            self.on_end(meta, "expired")
        return len(ended)

    # -- lookups ------------------------------------------------------------

    def get(self, owner: str, session_id: str) -> SessionMeta:
        """The caller's live session; anything else (unknown, closed, expired,
        another tenant's) is the same UnknownSession."""
        with self._lock:
            meta = self._sessions.get(key_of(session_id))
            if meta is None or meta.owner != owner or meta.expires() <= time.time():
                raise UnknownSession()
            return meta

    def folder(self, meta: SessionMeta) -> Path:
        return self.root / meta.key

    def owned(self, owner: str) -> list[SessionMeta]:
        now = time.time()
        with self._lock:
            return [m for m in self._sessions.values() if m.owner == owner and m.expires() > now]

    def usage(self, owner: str) -> tuple[int, int]:
        """(sessions open, their bytes on disk) for `owner`."""
        mine = self.owned(owner)
        return len(mine), sum(m.disk_bytes for m in mine)

    def tenants(self) -> dict[str, tuple[int, int]]:
        with self._lock:
            found: dict[str, tuple[int, int]] = {}
            for meta in self._sessions.values():
                count, used = found.get(meta.owner, (0, 0))
                found[meta.owner] = (count + 1, used + meta.disk_bytes)
            return found

    def records(self) -> RecordStore:
        """The records kept beside these sessions (sessionstore/records.py), made once:
        files under `<data dir>/session-records/`, beside the sessions' folder."""
        with self._lock:
            if self._records is None:
                self._records = self._open_records()
            return self._records

    def _open_records(self) -> RecordStore:
        return RecordStore(self.root.parent / "session-records")

    def ready(self, meta: SessionMeta) -> None:
        """Make `meta`'s current version runnable here (held by `acquire`): on disk
        already for a local store; the shared store fetches it when missing."""

    def is_busy(self, meta: SessionMeta) -> bool:
        with self._lock:
            return meta.key in self._busy

    # -- changes ------------------------------------------------------------

    @tracing.traced("session.create")
    def create(
        self, owner: str, *, idle_timeout_s: int, limits: dict[str, int], skills: list[str],
        max_sessions: int, source: SessionMeta | None = None, packages: tuple[list[str], str] | None = None,
    ) -> tuple[str, SessionMeta]:
        """A new session (a fork of `source` if given, held by `acquire`: its state
        copied, its packages kept); its id. OverCap if `owner` has `max_sessions` already.
        `packages`: the pins of the package set its runs mount, and their Python's tag."""
        session_id, meta = self._new_meta(owner, idle_timeout_s, limits, skills, packages or packages_of(source))
        with self._lock:
            if sum(m.owner == owner for m in self._sessions.values()) >= max_sessions:
                raise OverCap("sessions", max_sessions)
            self._sessions[meta.key] = meta  # reserved, so the cap holds under concurrency
            # and held while it is made (list_sessions names it): a close, a run or the sweep
            # never meets half a folder, nor removes one a copy is still filling
            self._busy.add(meta.key)
        try:
            self._make(meta, source)
        finally:
            with self._lock:
                self._busy.discard(meta.key)
        return session_id, meta

    def _make(self, meta: SessionMeta, source: SessionMeta | None) -> None:
        """The folder of `meta` (reserved by `create`), a copy of `source`'s version if given."""
        folder = self.root / meta.key
        try:
            folder.mkdir(mode=0o700)
            if source is not None:
                # A fork keeps its original's age (a chain of forks ends at the first's
                # maximum age); its idle time starts now.
                meta.created = source.created
                meta.runs, meta.memory_bytes = source.runs, source.memory_bytes
                meta.image_bytes, meta.files_bytes = source.image_bytes, source.files_bytes
                sandbox_sessions.copy_version(
                    sandbox_sessions.version_dir(self.root / source.key, source.version),
                    sandbox_sessions.version_dir(folder, 0),
                )
            self._write(meta)
        except BaseException:
            with self._lock:
                self._sessions.pop(meta.key, None)
            remove_quietly(folder)
            raise

    def _new_meta(
        self, owner: str, idle_timeout_s: int, limits: dict[str, int], skills: list[str],
        packages: tuple[list[str], str] | None = None,
    ) -> tuple[str, SessionMeta]:
        session_id = ID_PREFIX + secrets.token_urlsafe(24)
        now = time.time()
        pins, tag = packages or ([], "")
        return session_id, SessionMeta(
            session_id=session_id, key=key_of(session_id), owner=owner, created=now, last_used=now,
            idle_timeout_s=idle_timeout_s, max_age_s=self.policy.max_age_s, limits=limits, skills=skills,
            packages=list(pins), package_tag=tag,
        )

    def commit_lock(self, owner: str) -> threading.Lock:
        """Held while a run of `owner`'s is checked against `session_bytes` and kept:
        two of its runs ending at once cannot both fit in the same room."""
        with self._lock:
            found = self._commit_locks.get(owner)
            if found is None:
                found = self._commit_locks[owner] = threading.Lock()
            return found

    def acquire(self, meta: SessionMeta) -> None:
        """Mark `meta` running a request; Busy if it already is (one at a time)."""
        with self._lock:
            if meta.key in self._busy or meta.key not in self._sessions:
                raise Busy() if meta.key in self._busy else UnknownSession()
            self._busy.add(meta.key)

    def release(self, meta: SessionMeta) -> None:
        with self._lock:
            self._busy.discard(meta.key)

    @tracing.traced("session.commit")
    def finish_run(self, meta: SessionMeta, outcome: SessionOutcome | None) -> bool:
        """After a run of `meta` (held by `acquire`): keep its new version, or drop
        it; whether it was kept."""
        folder = self.root / meta.key
        meta.last_used = time.time()
        if outcome is None or not outcome.committed:
            remove_quietly(sandbox_sessions.version_dir(folder, meta.version + 1))
            self._write(meta)
            return False
        meta.version += 1
        meta.reseed = False
        meta.runs += 1
        meta.memory_bytes, meta.image_bytes, meta.files_bytes = (
            outcome.memory_bytes, outcome.image_bytes, outcome.files_bytes,
        )
        self._write(meta)  # the new version is the session's from here on
        # The old one is deleted off the call's path (a start deletes any left over).
        self._deleter.submit(remove_quietly, sandbox_sessions.version_dir(folder, meta.version - 1))
        return True

    def close(self, owner: str, session_id: str) -> None:
        meta = self.get(owner, session_id)
        with self._lock:
            if meta.key in self._busy:
                raise Busy()
            if self._sessions.pop(meta.key, None) is None:
                raise UnknownSession()  # ended meanwhile (another close, the sweep): by that one alone
        remove_ended(self.root, meta.key)
        self.on_end(meta, "closed")

    def _write(self, meta: SessionMeta) -> None:
        path = self.root / meta.key / META
        partial = path.with_name(META + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_encoder.encode(meta))
        os.replace(partial, path)


class OverCap(Exception):
    def __init__(self, limit: str, value: int) -> None:
        super().__init__(limit)
        self.limit = limit
        self.value = value


def remove_quietly(path: Path) -> None:
    """Remove the folder `path` if it is there; a failure is logged, not raised (cleanup)."""
    try:
        if path.exists():
            dirtree.remove(path)
    except OSError:
        logger.warning("could not remove %s", path)


def remove_ended(root: Path, key: str) -> None:
    """The folder of the ended session `key` removed: renamed out of its name first (so a
    second remover, or a late writer by path, finds nothing there), then removed; again
    if something made it anew meanwhile."""
    for _ in range(ENDED_TRIES):
        doomed = root / f"{ENDED}{key}-{secrets.token_hex(4)}"
        try:
            os.rename(root / key, doomed)
        except FileNotFoundError:
            return  # gone (another remover's)
        except OSError as exc:
            logger.warning("could not set aside the folder of an ended session %s: %s", key[:16], exc)
            remove_quietly(root / key)
            return
        remove_quietly(doomed)
    logger.warning("the folder of an ended session %s keeps being made again", key[:16])


def session_expired(meta: SessionMeta) -> CallRecord:
    """The audit log's entry for a session that ended by its idle timeout or age."""
    return CallRecord(
        time=datetime.now(UTC).isoformat(timespec="milliseconds"), tenant=meta.owner, method="session_expired",
        status="ok", duration_ms=0.0, bytes_in=0, bytes_out=0, session=meta.key[:16],
    )
