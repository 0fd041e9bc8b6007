"""Where the server keeps its state, chosen once from settings and handed to the server and
its worker processes as objects (server.py, sandbox/pool/pool.py).

Two choices, independent but for one rule (a blob store keeps its metadata in the database,
so --blob-store needs --database-url: settings.py refuses it alone):

- the records (tenants and their keys, the audit log, created skills, run admission): files
  under the data folder (`LocalRecords`), or the PostgreSQL of --database-url
  (`SharedRecords`), shared by every server on it;
- the blobs (their bytes, and sessions): under the data folder (`LocalBlobs`), or in the
  object store of --blob-store with their metadata in the database (`SharedBlobs`).

`open_backends` makes both choices and brings the database's schema up to date: it and
`wasmrun migrate` are the only callers of `migrate_database`. It is also the one place here
that reads the settings: each backend gets the parts it needs (`StorePlaces`, `RunAdmission`,
`SessionPolicy`, a URL), never the whole `Settings`. Each store is built when the server asks
for it, once (server.py's `assemble`); a PostgreSQL store holds a connection of its own
(database/connection.py), so that stores do not wait on each other's calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wasmrun.blobs.store import BlobStore, FileBlobStore
from wasmrun.observe.audit import AuditLog
from wasmrun.registry.store import DirectoryRegistry
from wasmrun.sandbox import BlobOpener
from wasmrun.sessionstore.store import SessionStore
from wasmrun.settings import Settings, load_blob_store
from wasmrun.tenants.limits import SessionPolicy
from wasmrun.tenants.quotas import RunGate
from wasmrun.tenants.store import TenantEditor, TenantStore

if TYPE_CHECKING:
    from wasmrun.database.audit import PgAuditLog
    from wasmrun.database.orphans import OrphanSweeper


class Records(Protocol):
    """Tenants and their keys, the audit log, created skills, run admission."""

    shared: bool

    def tenant_store(self) -> TenantEditor: ...

    def audit_log(self) -> AuditLog | PgAuditLog | None:
        """None when the operator turned the audit log off (--audit-log -)."""

    def run_gate(self) -> RunGate: ...

    def skill_registry(self, package_layer: Path) -> DirectoryRegistry:
        """The operator's skill folders and the tenants' created skills; `package_layer`:
        the operator's packages for the served image, which skills may require."""


class Blobs(Protocol):
    """Blobs (bytes and metadata) and sessions."""

    shared: bool

    def blob_store(self) -> BlobStore: ...

    def for_workers(self) -> BlobOpener:
        """How each worker process opens the same blob store for its runs."""

    def session_store(self) -> SessionStore: ...

    def recount(self) -> None:
        """Usage counters brought in line with what is stored, before serving (quotas start there)."""

    def orphan_sweeper(self) -> OrphanSweeper | None:
        """What deletes stored bytes a killed server left without metadata, started; None: nothing to do."""


@dataclass(frozen=True)
class Backends:
    records: Records
    blobs: Blobs

    @property
    def shared(self) -> bool:
        """Any state shared with other servers (--database-url)."""
        return self.records.shared or self.blobs.shared


@dataclass(frozen=True)
class StorePlaces:
    """Where the stores keep what they keep on this machine (all under the data folder but
    the operator's skill folders)."""

    data_dir: Path  # tenants.json (local records)
    operator_skill_dirs: tuple[Path, ...]  # read-only, every tenant's
    skills_home: Path  # created skills (local records)
    skill_cache: Path  # created skills from the database, unpacked (shared records)
    blobs_dir: Path  # local blobs
    sessions_dir: Path  # local sessions
    session_cache: Path  # shared sessions' versions fetched or made here

    @classmethod
    def of(cls, settings: Settings) -> StorePlaces:
        return cls(
            settings.data_dir, settings.operator_skill_dirs, settings.skills_home, settings.skill_cache,
            settings.blobs_dir, settings.data_dir / "sessions", settings.data_dir / "session-cache",
        )


@dataclass(frozen=True)
class RunAdmission:
    """How runs are admitted: how long a run may wait for a sandbox, and how many there are."""

    queue_timeout: float
    pool_size: int


@dataclass(frozen=True)
class SkillCacheBounds:
    """The local cache of created skills unpacked from the shared database (shared records)."""

    entries: int
    bytes: int


def open_backends(settings: Settings) -> Backends:
    """The backends `settings` name; with --database-url its schema is brought up to date first.
    The settings are read here, and each backend given the parts it needs."""
    load_blob_store(settings.blob_store, settings.database_url)  # Settings.load's rule, for settings made directly
    places = StorePlaces.of(settings)
    admission = RunAdmission(settings.queue_timeout, settings.workers)
    if settings.database_url is None:
        return Backends(LocalRecords(places, admission, settings.audit_log), LocalBlobs(places, settings.sessions))
    migrate_database(settings.database_url)
    records = SharedRecords(
        places, admission, settings.database_url, audited=settings.audit_log is not None,
        bundles=settings.blob_store, cache=SkillCacheBounds(settings.skill_cache_entries, settings.skill_cache_bytes),
    )
    if settings.blob_store is None:
        return Backends(records, LocalBlobs(places, settings.sessions))
    return Backends(records, SharedBlobs(places, settings.sessions, settings.database_url, settings.blob_store))


def migrate_database(database_url: str) -> list[int]:
    """Bring the shared database's schema up to date; the versions applied (none: it was)."""
    from wasmrun.database.connection import Database

    database = Database(database_url)
    try:
        return database.migrate()
    finally:
        database.close()


# -- records -----------------------------------------------------------------------------


class LocalRecords:
    """Under the data folder: `tenants.json`, the audit log file, `skills/`; run admission
    counts this server's runs only."""

    shared = False

    def __init__(self, places: StorePlaces, admission: RunAdmission, audit_log: Path | None) -> None:
        self.places = places
        self.admission = admission
        self.audit_path = audit_log  # None: no audit log

    def tenant_store(self) -> TenantEditor:
        return TenantStore(self.places.data_dir)

    def audit_log(self) -> AuditLog | None:
        return AuditLog(self.audit_path) if self.audit_path is not None else None

    def run_gate(self) -> RunGate:
        return RunGate(self.admission.queue_timeout, pool_size=self.admission.pool_size)

    def skill_registry(self, package_layer: Path) -> DirectoryRegistry:
        return DirectoryRegistry(self.places.operator_skill_dirs, self.places.skills_home, package_layer)


class SharedRecords:
    """In the PostgreSQL of --database-url; created skills' bundles in the object store
    `bundles` (--blob-store; None: in the database), unpacked into a local cache."""

    shared = True

    def __init__(
        self, places: StorePlaces, admission: RunAdmission, database_url: str, *, audited: bool,
        bundles: str | None, cache: SkillCacheBounds,
    ) -> None:
        self.places = places
        self.admission = admission
        self.database_url = database_url
        self.audited = audited
        self.bundles = bundles
        self.cache = cache

    def tenant_store(self) -> TenantEditor:
        from wasmrun.database.connection import Database
        from wasmrun.database.tenants import PgTenantStore

        return PgTenantStore(Database(self.database_url))

    def audit_log(self) -> PgAuditLog | None:
        if not self.audited:
            return None
        from wasmrun.database.audit import PgAuditLog
        from wasmrun.database.connection import Database

        return PgAuditLog(Database(self.database_url))

    def run_gate(self) -> RunGate:
        """A tenant's concurrent runs count across servers."""
        from wasmrun.database.runs import SharedRunGate

        return SharedRunGate(self.database_url, self.admission.queue_timeout, pool_size=self.admission.pool_size)

    def skill_registry(self, package_layer: Path) -> DirectoryRegistry:
        from wasmrun.database.connection import Database
        from wasmrun.database.skills import PgSkillRegistry

        objects = None
        if self.bundles is not None:  # bundles beside the blobs' bytes
            from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation

            objects = ObjectStore(ObjectStoreLocation.parse(self.bundles))
        places = self.places
        return PgSkillRegistry(
            places.operator_skill_dirs, places.skills_home, Database(self.database_url), places.skill_cache,
            objects, cache_entries=self.cache.entries, cache_bytes=self.cache.bytes, package_layer=package_layer,
        )


# -- blobs -------------------------------------------------------------------------------


class LocalBlobs:
    """Files under `<data_dir>/blobs` and `<data_dir>/sessions`."""

    shared = False

    def __init__(self, places: StorePlaces, sessions: SessionPolicy) -> None:
        self.places = places
        self.sessions = sessions

    def blob_store(self) -> BlobStore:
        store = FileBlobStore(self.places.blobs_dir)
        store.sweep()  # what writers killed before this start left behind
        return store

    def for_workers(self) -> BlobOpener:
        return BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(self.places.blobs_dir)])

    def session_store(self) -> SessionStore:
        return SessionStore(self.places.sessions_dir, self.sessions)

    def recount(self) -> None:
        FileBlobStore(self.places.blobs_dir).recount()

    def orphan_sweeper(self) -> None:
        return None  # (FileBlobStore.sweep removes a killed writer's files)


class SharedBlobs:
    """Bytes in the object store of --blob-store, metadata and ownership in the database:
    any server reads any blob and resumes any session."""

    shared = True

    def __init__(self, places: StorePlaces, sessions: SessionPolicy, database_url: str, blob_store: str) -> None:
        self.places = places
        self.sessions = sessions
        self.database_url = database_url
        self.location = blob_store

    def blob_store(self) -> BlobStore:
        from wasmrun.database.blobs import SharedBlobStore

        return SharedBlobStore(self.database_url, self.location)

    def for_workers(self) -> BlobOpener:
        # The URLs go down the worker's pipe (poolworker.WorkerSetup), never on its command line.
        return BlobOpener("wasmrun.database.blobs:SharedBlobStore", [self.database_url, self.location])

    def session_store(self) -> SessionStore:
        from wasmrun.database.sessions import SharedSessionStore

        # A cache of versions fetched or made here, one folder per process.
        return SharedSessionStore(self.places.session_cache, self.database_url, self.location, self.sessions)

    def recount(self) -> None:
        pass  # the database's counters change with its rows: nothing to recount

    def orphan_sweeper(self) -> OrphanSweeper:
        """Objects a killed server stored without their row, deleted at start, then periodically."""
        from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation
        from wasmrun.database.connection import Database
        from wasmrun.database.orphans import OrphanSweeper

        sweeper = OrphanSweeper(Database(self.database_url), ObjectStore(ObjectStoreLocation.parse(self.location)))
        sweeper.start()
        return sweeper
