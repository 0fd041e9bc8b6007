"""Tenants and their key hashes in the shared database: every server sees a
new tenant or a revoked key on its next call, as with the tenants file."""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator

import msgspec
import psycopg
from psycopg.types.json import Jsonb

from wasmrun.database import DatabaseError
from wasmrun.database.connection import Database
from wasmrun.tenants.store import KeyRecord, TenantEditor, TenantError, TenantRecord, TenantsFile


class PgTenantStore(TenantEditor):
    def __init__(self, database: Database) -> None:
        self.database = database

    def load(self) -> TenantsFile:
        try:
            with self.database.transaction() as conn:
                return _read(conn)
        except (psycopg.Error, DatabaseError) as exc:
            raise TenantError(f"cannot read the tenants from the database: {exc}") from None

    def signature(self) -> Hashable:
        try:
            with self.database.connection() as conn:
                row = conn.execute("SELECT version FROM wasmrun_tenants_version").fetchone()
        except (psycopg.Error, DatabaseError) as exc:
            raise TenantError(f"cannot read the tenants from the database: {exc}") from None
        return int(row[0]) if row else 0

    @contextlib.contextmanager
    def _editing(self) -> Iterator[TenantsFile]:
        with self.database.transaction() as conn:
            # The version row's lock orders every edit, from any server.
            conn.execute("SELECT version FROM wasmrun_tenants_version FOR UPDATE")
            doc = _read(conn)
            before = msgspec.json.encode(doc)
            yield doc
            if msgspec.json.encode(doc) == before:
                return
            conn.execute("DELETE FROM wasmrun_tenant_keys")
            conn.execute("DELETE FROM wasmrun_tenants")
            for record in doc.tenants.values():
                conn.execute(
                    "INSERT INTO wasmrun_tenants (name, created, limits) VALUES (%s, %s, %s)",
                    (record.name, record.created, Jsonb(record.limits)),
                )
                for key in record.keys:  # in order: the last is the newest
                    conn.execute(
                        "INSERT INTO wasmrun_tenant_keys (hash, tenant, created) VALUES (%s, %s, %s)",
                        (key.hash, record.name, key.created),
                    )
            conn.execute("UPDATE wasmrun_tenants_version SET version = version + 1")


def _read(conn: psycopg.Connection) -> TenantsFile:
    doc = TenantsFile()
    for name, created, limits in conn.execute("SELECT name, created, limits FROM wasmrun_tenants ORDER BY name"):
        doc.tenants[name] = TenantRecord(name=name, created=created, limits={k: int(v) for k, v in limits.items()})
    for tenant, hash_, created in conn.execute(
        "SELECT tenant, hash, created FROM wasmrun_tenant_keys ORDER BY seq"
    ):
        doc.tenants[tenant].keys.append(KeyRecord(hash_, created))
    return doc
