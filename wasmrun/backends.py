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
`wasmrun migrate` are the only callers of `migrate_database`. Each store is built when the
server asks for it; a PostgreSQL store holds a connection of its own (database/connection.py),
so that stores do not wait on each other's calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wasmrun.blobs.store import BlobStore, FileBlobStore
from wasmrun.observe.audit import AuditLog
from wasmrun.protocol.sessionstore import SessionStore
from wasmrun.registry.store import DirectoryRegistry
from wasmrun.sandbox import BlobOpener
from wasmrun.settings import Settings, load_blob_store
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


def open_backends(settings: Settings) -> Backends:
    """The backends `settings` name; with --database-url its schema is brought up to date first."""
    load_blob_store(settings.blob_store, settings.database_url)  # Settings.load's rule, for settings made directly
    if settings.database_url is None:
        return Backends(LocalRecords(settings), LocalBlobs(settings))
    migrate_database(settings.database_url)
    records = SharedRecords(settings, settings.database_url)
    if settings.blob_store is None:
        return Backends(records, LocalBlobs(settings))
    return Backends(records, SharedBlobs(settings, settings.database_url, settings.blob_store))


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

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def tenant_store(self) -> TenantEditor:
        return TenantStore(self.settings.data_dir)

    def audit_log(self) -> AuditLog | None:
        return AuditLog(self.settings.audit_log) if self.settings.audit_log is not None else None

    def run_gate(self) -> RunGate:
        return RunGate(self.settings.queue_timeout, pool_size=self.settings.workers)

    def skill_registry(self, package_layer: Path) -> DirectoryRegistry:
        return DirectoryRegistry(self.settings.operator_skill_dirs, self.settings.skills_home, package_layer)


class SharedRecords:
    """In the PostgreSQL of --database-url; created skills' bundles in the object store
    with --blob-store (else in the database), unpacked into a local cache."""

    shared = True

    def __init__(self, settings: Settings, database_url: str) -> None:
        self.settings = settings
        self.database_url = database_url

    def tenant_store(self) -> TenantEditor:
        from wasmrun.database.connection import Database
        from wasmrun.database.tenants import PgTenantStore

        return PgTenantStore(Database(self.database_url))

    def audit_log(self) -> PgAuditLog | None:
        if self.settings.audit_log is None:
            return None
        from wasmrun.database.audit import PgAuditLog
        from wasmrun.database.connection import Database

        return PgAuditLog(Database(self.database_url))

    def run_gate(self) -> RunGate:
        """A tenant's concurrent runs count across servers."""
        from wasmrun.database.runs import SharedRunGate

        return SharedRunGate(self.database_url, self.settings.queue_timeout, pool_size=self.settings.workers)

    def skill_registry(self, package_layer: Path) -> DirectoryRegistry:
        from wasmrun.database.connection import Database
        from wasmrun.database.skills import PgSkillRegistry

        objects = None
        if self.settings.blob_store is not None:  # bundles beside the blobs' bytes
            from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation

            objects = ObjectStore(ObjectStoreLocation.parse(self.settings.blob_store))
        settings = self.settings
        return PgSkillRegistry(
            settings.operator_skill_dirs, settings.skills_home, Database(self.database_url), settings.skill_cache,
            objects, cache_entries=settings.skill_cache_entries, cache_bytes=settings.skill_cache_bytes,
            package_layer=package_layer,
        )


# -- blobs -------------------------------------------------------------------------------


class LocalBlobs:
    """Files under `<data_dir>/blobs` and `<data_dir>/sessions`."""

    shared = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def blob_store(self) -> BlobStore:
        store = FileBlobStore(self.settings.blobs_dir)
        store.sweep()  # what writers killed before this start left behind
        return store

    def for_workers(self) -> BlobOpener:
        return BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(self.settings.blobs_dir)])

    def session_store(self) -> SessionStore:
        return SessionStore(self.settings.data_dir / "sessions", self.settings.sessions)

    def recount(self) -> None:
        FileBlobStore(self.settings.blobs_dir).recount()

    def orphan_sweeper(self) -> None:
        return None  # (FileBlobStore.sweep removes a killed writer's files)


class SharedBlobs:
    """Bytes in the object store of --blob-store, metadata and ownership in the database:
    any server reads any blob and resumes any session."""

    shared = True

    def __init__(self, settings: Settings, database_url: str, blob_store: str) -> None:
        self.settings = settings
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
        cache = self.settings.data_dir / "session-cache"
        return SharedSessionStore(cache, self.database_url, self.location, self.settings.sessions)

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
