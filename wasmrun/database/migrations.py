"""The database schema, as numbered steps applied in order, once each.

A step is never edited once released: a change is a new step. Every server
applies the missing steps at start (`wasmrun migrate` does it alone), under a
transaction-scoped advisory lock, so servers starting together apply each step
exactly once and none serves on a half-made schema.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE wasmrun_tenants (
            name text PRIMARY KEY,
            created text NOT NULL,
            limits jsonb NOT NULL DEFAULT '{}'::jsonb
        );
        CREATE TABLE wasmrun_tenant_keys (
            hash text PRIMARY KEY,
            tenant text NOT NULL REFERENCES wasmrun_tenants(name) ON DELETE CASCADE,
            created text NOT NULL,
            seq bigserial NOT NULL
        );
        CREATE INDEX wasmrun_tenant_keys_tenant ON wasmrun_tenant_keys (tenant, seq);
        -- Bumped by every change to tenants or keys: a server rereads them when it moves.
        CREATE TABLE wasmrun_tenants_version (
            only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
            version bigint NOT NULL
        );
        INSERT INTO wasmrun_tenants_version VALUES (true, 0);
        CREATE TABLE wasmrun_audit (
            id bigserial PRIMARY KEY,
            at timestamptz NOT NULL DEFAULT now(),
            tenant text NOT NULL,
            -- The call's JSON line as text: exactly what the file log would hold, escapes
            -- included (jsonb would refuse an escaped NUL, which a hostile method name may carry).
            record text NOT NULL
        );
        CREATE INDEX wasmrun_audit_tenant ON wasmrun_audit (tenant, id);
        """,
    ),
    (
        2,
        """
        -- Created skills: each version's folder as a tar bundle (registry/bundle.py),
        -- unique per owner, name and version: of two servers creating one at once,
        -- the database lets exactly one insert.
        CREATE TABLE wasmrun_skills (
            seq bigserial UNIQUE,
            owner text NOT NULL,
            name text NOT NULL,
            version text NOT NULL,
            namespace text NOT NULL,
            sha256 text NOT NULL,
            size_bytes bigint NOT NULL,
            bundle bytea NOT NULL,
            created timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (owner, name, version)
        );
        CREATE INDEX wasmrun_skills_listing ON wasmrun_skills (owner, namespace, name);
        """,
    ),
    (
        3,
        """
        -- Blob metadata and ownership; the bytes are in the object store (--blob-store).
        -- A blob exists once its row does: the bytes are stored before the row.
        CREATE TABLE wasmrun_blobs (
            blob_id text PRIMARY KEY,
            owner text NOT NULL,
            kind text NOT NULL,
            size_bytes bigint NOT NULL,
            sha256 text NOT NULL,
            created timestamptz NOT NULL,
            run_id text,
            utf8 boolean NOT NULL
        );
        CREATE INDEX wasmrun_blobs_owner_created ON wasmrun_blobs (owner, created);
        -- What each owner stores, changed in the transaction that adds or removes a row.
        CREATE TABLE wasmrun_blob_usage (
            owner text PRIMARY KEY,
            bytes bigint NOT NULL,
            count bigint NOT NULL
        );
        -- The secret blob ids are an HMAC under (blobs/store.py): one for every server.
        CREATE TABLE wasmrun_blob_key (
            only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
            secret bytea NOT NULL
        );
        """,
    ),
    (
        4,
        """
        -- Runs in a sandbox on any server, per tenant: concurrent_runs across servers.
        -- A lease whose server stopped answering its heartbeat is dropped.
        CREATE TABLE wasmrun_servers (
            id text PRIMARY KEY,
            seen timestamptz NOT NULL
        );
        CREATE TABLE wasmrun_run_leases (
            id bigserial PRIMARY KEY,
            tenant text NOT NULL,
            server text NOT NULL,
            started timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX wasmrun_run_leases_tenant ON wasmrun_run_leases (tenant);
        """,
    ),
    (
        5,
        """
        -- The registry pages created skills in SQL (database/skills.py), in the local
        -- registry's order: namespace and name by code point (the "C" collation),
        -- then version_order descending (registry/store.py version_order: semantic
        -- precedence as text). A listing reads manifest and frontmatter (JSON text,
        -- as the audit log keeps its lines) from the row, never the bundle.
        ALTER TABLE wasmrun_skills ALTER COLUMN namespace TYPE text COLLATE "C";
        ALTER TABLE wasmrun_skills ALTER COLUMN name TYPE text COLLATE "C";
        ALTER TABLE wasmrun_skills ADD COLUMN version_order text COLLATE "C";
        ALTER TABLE wasmrun_skills ADD COLUMN manifest text;
        ALTER TABLE wasmrun_skills ADD COLUMN frontmatter text;
        -- With --blob-store a bundle's bytes are the object bundle_object (named by
        -- its sha256) and `bundle` is null; without it they stay in `bundle`.
        ALTER TABLE wasmrun_skills ALTER COLUMN bundle DROP NOT NULL;
        ALTER TABLE wasmrun_skills ADD COLUMN bundle_object text;
        ALTER TABLE wasmrun_skills ADD CONSTRAINT wasmrun_skills_bundle_somewhere
            CHECK ((bundle IS NULL) <> (bundle_object IS NULL));
        DROP INDEX wasmrun_skills_listing;
        CREATE INDEX wasmrun_skills_page ON wasmrun_skills (owner, namespace, name, version_order DESC);
        CREATE INDEX wasmrun_skills_bundle_object ON wasmrun_skills (bundle_object);
        """,
    ),
    (
        6,
        """
        -- queued_runs and runs_per_minute across servers (database/runs.py): a run waiting
        -- for one of its tenant's slots holds a lease too, marked waiting (dropped with its
        -- server like the others); each run's start is a row, counted over the last minute.
        ALTER TABLE wasmrun_run_leases ADD COLUMN waiting boolean NOT NULL DEFAULT false;
        CREATE TABLE wasmrun_run_starts (
            id bigserial PRIMARY KEY,
            tenant text NOT NULL,
            at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX wasmrun_run_starts_tenant ON wasmrun_run_starts (tenant, at);
        """,
    ),
    (
        7,
        """
        -- Sessions with the shared backends (database/sessions.py): one row each, its
        -- current version's objects in the object store (named in `objects`, all
        -- stored before the row names them). `busy_server` is the server running a
        -- request in it (one at a time across servers): a server silent in
        -- wasmrun_servers for long enough holds it no more.
        CREATE TABLE wasmrun_sessions (
            key text PRIMARY KEY,
            owner text NOT NULL,
            version integer NOT NULL,
            expires double precision NOT NULL,
            disk_bytes bigint NOT NULL,
            busy_server text,
            objects jsonb NOT NULL DEFAULT '{}'::jsonb,
            meta text NOT NULL
        );
        CREATE INDEX wasmrun_sessions_owner ON wasmrun_sessions (owner);
        CREATE INDEX wasmrun_sessions_expires ON wasmrun_sessions (expires);
        """,
    ),
    (
        8,
        """
        -- Records kept beside the sessions (database/records.py): a door's own documents
        -- about sessions (the E2B front's sandboxes), one row each, read by every server.
        CREATE TABLE wasmrun_session_records (
            kind text NOT NULL,
            key text NOT NULL,
            owner text NOT NULL,
            expires double precision NOT NULL,
            doc text NOT NULL,
            PRIMARY KEY (kind, key)
        );
        CREATE INDEX wasmrun_session_records_owner ON wasmrun_session_records (kind, owner);
        CREATE INDEX wasmrun_session_records_expires ON wasmrun_session_records (kind, expires);
        """,
    ),
)

LATEST = MIGRATIONS[-1][0]
