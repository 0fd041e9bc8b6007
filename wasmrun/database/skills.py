"""Created skills in the shared database: a skill one server creates is listed,
described and run by every server on its next call.

The operator's skills stay in folders (each server has its own copy of them,
indexed in memory as DirectoryRegistry does). Created skills are never indexed
in memory: each call asks the database for what it needs.

- A listing page is one keyset query over the caller's own rows, in the
  registry's order (namespace, name, version descending: the `version_order`
  column), filtered by namespace in SQL, merged with the operator's skills of
  the same page. The row holds the manifest and frontmatter, so listing never
  reads a bundle.
- describe/read/execute of a name (and version) reads that one row and
  materialises its bundle into the local read-only cache (registry/bundle.py),
  which is what a run mounts. The bundle's bytes are checked against the
  sha256 recorded with the row before they are unpacked. The cache is bounded:
  a run, or a read of a skill's files, holds its folder for as long as it needs
  it, and puts it back first from the bundle if it was evicted meanwhile.
- Bundles are in the object store (`--blob-store`) under `skills/<sha256>`
  when one is configured, else in the row itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import heapq
import logging
import tarfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import psycopg

from wasmrun.blobs.objects import ObjectStore, ObjectStoreError
from wasmrun.blobs.store import STALE_WRITE_S
from wasmrun.database import DatabaseError, locks
from wasmrun.database.connection import Database
from wasmrun.database.orphans import BUNDLE_PREFIX, lock_object
from wasmrun.registry import agentskills
from wasmrun.registry.bundle import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ENTRIES,
    BundleMismatch,
    BundleMissing,
    SkillCache,
    digest,
    pack,
)
from wasmrun.registry.errors import Part, SkillAlreadyExists, SkillDamaged, SkillUnavailable
from wasmrun.registry.files import folder_bytes
from wasmrun.registry.folders import load_skill
from wasmrun.registry.interface import SkillQuota, check_skill_quota
from wasmrun.registry.manifest import MAX_VERSION, SEMVER, ManifestError, validate_manifest
from wasmrun.registry.skill import (
    RESERVED_NAMESPACE,
    ListingPosition,
    Page,
    Skill,
    SkillKey,
    SkillSummary,
    is_reserved_namespace,
    is_skill_name,
    version_order,
)
from wasmrun.registry.store import DirectoryRegistry

logger = logging.getLogger("wasmrun.database")
# Loaded skills kept per process, by bundle hash (the same bytes are the same skill).
LOADED_CACHE = 1024


def bundle_object(sha256: str) -> str:
    return BUNDLE_PREFIX + sha256


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode("utf-8")


def _listed_frontmatter(frontmatter: dict[str, Any]) -> str:
    """The frontmatter a listing reads (its text entries, e.g. `name`, `short_description`),
    as JSON: a YAML date or number would come back from JSON as another type."""
    return _json({k: v for k, v in frontmatter.items() if isinstance(k, str) and isinstance(v, str)})


def _could_exist(name: str, version: str | None) -> bool:
    """Whether a created skill could have this name and version (else no query is
    sent: a NUL, a lone surrogate or 5,000 characters never reach the database)."""
    if not is_skill_name(name) or is_reserved_namespace(name):
        return False
    return version is None or (len(version) <= MAX_VERSION and SEMVER.fullmatch(version) is not None)


class PgSkillRegistry(DirectoryRegistry):
    def __init__(
        self, read_only: Sequence[Path], writable: Path, database: Database, cache: Path,
        objects: ObjectStore | None = None, *,
        cache_entries: int = DEFAULT_MAX_ENTRIES, cache_bytes: int = DEFAULT_MAX_BYTES,
        package_layer: Path | None = None,
    ) -> None:
        self.database = database
        self.cache = SkillCache(cache, cache_entries, cache_bytes)
        self.objects = objects
        self._loaded: OrderedDict[str, Skill] = OrderedDict()  # sha256 -> the skill (owner None)
        self._loaded_lock = threading.Lock()
        super().__init__(read_only, writable, package_layer)
        self._fill_listing_columns()
        self._move_bundles_to_store()

    # The in-memory index holds the operator's folders alone.
    def _load_created(self, index: dict[SkillKey, Skill], operator_names: set[str]) -> None:
        return None

    def _check_quota(self, owner: str, quota: SkillQuota, adding: int) -> None:
        return None  # counted in the database, in the transaction that inserts (_publish)

    @contextlib.contextmanager
    def _reachable(self) -> Iterator[None]:
        """The database out of reach (stopped, restarting, a statement cancelled) is the
        registry's SkillUnavailable, worth trying again; any other database error is a bug."""
        try:
            yield
        except (psycopg.OperationalError, DatabaseError) as exc:
            logger.error("the skill registry cannot reach its database: %s", exc)
            raise SkillUnavailable("the skill registry's database cannot be reached now; try again") from None

    # -- reading ----------------------------------------------------------------

    def skills(self, owner: str | None = None) -> list[Skill]:
        operator = super().skills(None)
        if owner is None:
            return operator
        with self._reachable(), self.database.connection() as conn:
            rows = conn.execute(
                "SELECT owner, name, version, sha256 FROM wasmrun_skills"
                f" WHERE owner = %s AND {self._visible_sql()}", (owner, sorted(self._operator_names)),
            ).fetchall()
        created = [self._materialised(*row) for row in rows]
        return sorted([*operator, *created], key=Skill.sort_key)

    def page(
        self, owner: str | None, *, namespace: str | None = None, after: ListingPosition | None = None,
        limit: int,
    ) -> Page:
        # Up to limit + 1 from each source: the merge's first limit + 1 tell whether more follow.
        operator_page = super().page(None, namespace=namespace, after=after, limit=limit + 1)
        created: list[SkillSummary] = []
        if owner is not None and limit > 0 and (not namespace or is_skill_name(namespace)):
            created = self._created_page(owner, namespace, after, limit + 1)
        merged = list(heapq.merge(operator_page.skills, created, key=SkillSummary.sort_key))
        return Page(merged[:limit], more=len(merged) > limit)

    def _visible_sql(self) -> str:
        """Rows a tenant sees: none named like the operator's skills (second parameter,
        a list) or in the reserved namespace; such a row is never listed, as in folders."""
        return (
            f"NOT (name = ANY(%s)) AND name <> '{RESERVED_NAMESPACE}'"
            f" AND NOT starts_with(name, '{RESERVED_NAMESPACE}.')"
        )

    def _created_page(
        self, owner: str, namespace: str | None, after: ListingPosition | None, limit: int
    ) -> list[SkillSummary]:
        # A row without its listing columns (stored by a wasmrun older than schema 5 since
        # this server started) is listed once a start has filled them (_fill_listing_columns).
        where = [f"owner = %s AND {self._visible_sql()} AND manifest IS NOT NULL"]
        params: list[Any] = [owner, sorted(self._operator_names)]
        if namespace:
            where.append("(namespace = %s OR starts_with(namespace, %s))")
            params += [namespace, namespace + "."]
        if after is not None:
            # Keyset: after (namespace, name), or the same name at a lower version_order. Said
            # as one range from (namespace, name) less that name's higher versions, so the
            # index scan starts at the cursor instead of filtering the owner's rows before it.
            where.append(
                "(namespace, name) >= (%s::text COLLATE \"C\", %s::text COLLATE \"C\")"
                " AND NOT (namespace = %s AND name = %s AND version_order >= %s::text COLLATE \"C\")"
            )
            order = version_order(after.version)
            params += [after.namespace, after.name, after.namespace, after.name, order]
        sql = (
            "SELECT owner, manifest, frontmatter FROM wasmrun_skills WHERE " + " AND ".join(where)
            + " ORDER BY namespace, name, version_order DESC LIMIT %s"
        )
        with self._reachable(), self.database.connection() as conn:
            rows = conn.execute(sql, [*params, limit]).fetchall()
        listed = []
        for row_owner, manifest, frontmatter in rows:
            try:
                parsed = validate_manifest(msgspec.json.decode(manifest))
            except (ManifestError, msgspec.DecodeError):  # a row this wasmrun wrote and checked
                logger.error("skipping a created skill of %s: its stored manifest is invalid", row_owner)
                continue
            listed.append(SkillSummary(parsed, msgspec.json.decode(frontmatter), owner=str(row_owner)))
        return listed

    def finds_in_memory(self, name: str, owner: str | None = None) -> bool:
        # The operator's skills, or a name no created skill can have: the folders' index.
        name = agentskills.normalise_name(name)
        return owner is None or name in self._operator_names or not _could_exist(name, None)

    def find(self, name: str, version: str | None = None, owner: str | None = None) -> Skill | None:
        self._refresh()
        name = agentskills.normalise_name(name)
        # An operator's name resolves among the operator's skills only, whatever a tenant created.
        if owner is None or name in self._operator_names or not _could_exist(name, version):
            return super().find(name, version, None)
        sql = "SELECT owner, name, version, sha256 FROM wasmrun_skills WHERE owner = %s AND name = %s"
        params: list[Any] = [owner, name]
        if version is not None:
            sql += " AND version = %s"
            params.append(version)
        with self._reachable(), self.database.connection() as conn:
            row = conn.execute(sql + " ORDER BY version_order DESC NULLS LAST LIMIT 1", params).fetchone()
        return None if row is None else self._materialised(*row)

    def versions(self, name: str, owner: str | None = None) -> list[str]:
        self._refresh()
        name = agentskills.normalise_name(name)
        if owner is None or name in self._operator_names or not _could_exist(name, None):
            return super().versions(name, None)
        with self._reachable(), self.database.connection() as conn:
            rows = conn.execute(
                "SELECT version FROM wasmrun_skills WHERE owner = %s AND name = %s"
                " ORDER BY version_order DESC NULLS LAST",
                (owner, name),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def every_skill(self) -> list[SkillSummary]:
        operator = super().every_skill()
        with self._reachable(), self.database.connection() as conn:
            rows = conn.execute(
                "SELECT owner, manifest, frontmatter FROM wasmrun_skills WHERE manifest IS NOT NULL"
            ).fetchall()
        created = [
            SkillSummary(validate_manifest(msgspec.json.decode(m)), msgspec.json.decode(f), owner=str(o))
            for o, m, f in rows
        ]
        return sorted([*operator, *created], key=lambda s: (s.owner or "", *s.sort_key()))

    def _materialised(self, owner: str, name: str, version: str, sha256: str) -> Skill:
        """The created skill of this row, its folder in the local cache (fetched and checked
        against `sha256` unless it is there already; a run holds it again, `hold`)."""
        with self._loaded_lock:
            loaded = self._loaded.get(sha256)
            if loaded is not None:
                self._loaded.move_to_end(sha256)
        if loaded is None:
            with self._held(owner, name, version, sha256) as folder:
                loaded = load_skill(folder)
            self._remember(sha256, loaded)
        return dataclasses.replace(loaded, owner=owner)

    def _remember(self, sha256: str, loaded: Skill) -> None:
        with self._loaded_lock:
            self._loaded[sha256] = loaded
            while len(self._loaded) > LOADED_CACHE:
                self._loaded.popitem(last=False)

    @contextlib.contextmanager
    def _held(self, owner: str, name: str, version: str, sha256: str) -> Iterator[Path]:
        """The version's cached folder, kept from eviction during the block; unpacked first,
        from its bundle checked against `sha256`, when it is not cached."""
        what = f"skill {name} {version}"
        stack = contextlib.ExitStack()
        try:
            folder = stack.enter_context(
                self.cache.held(sha256, functools.partial(self._bundle, owner, name, version))
            )
        except BundleMismatch as exc:
            logger.error("%s of %s is not served: %s", what, owner, exc)
            raise SkillDamaged(
                f"{what}: its stored files do not match the hash recorded when it was created"
                " (changed or damaged since), so they are not served"
            ) from None
        except BundleMissing:
            raise SkillDamaged(f"{what}: its stored files are missing") from None
        except (ObjectStoreError, psycopg.Error, DatabaseError, OSError, tarfile.TarError) as exc:
            # The store or database out of reach, or the disk full: it may work next time.
            logger.error("cannot make %s of %s ready: %s", what, owner, exc)
            raise SkillUnavailable(f"{what} cannot be made ready now; try again") from None
        with stack:
            yield folder

    def _bundle(self, owner: str, name: str, version: str) -> bytes | None:
        """The version's bundle, from the object store or its row; None when it is gone."""
        with self.database.connection() as conn:
            row = conn.execute(
                "SELECT bundle, bundle_object FROM wasmrun_skills WHERE owner = %s AND name = %s AND version = %s",
                (owner, name, version),
            ).fetchone()
        if row is None:
            return None
        if row[0] is not None:
            return bytes(row[0])
        if self.objects is None:
            raise SkillUnavailable(f"skill {name} {version} is in the object store, and this server has no --blob-store")
        try:
            return self.objects.get(str(row[1]))
        except KeyError:
            return None

    # -- the cached folders, held while in use --------------------------------

    def cached(self, skill: Skill) -> bool:
        return skill.owner is not None and self.cache.holds(skill.root)

    def hold(self, skills: Sequence[Skill]) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        with stack:
            for skill in skills:
                if self.cached(skill):
                    assert skill.owner is not None
                    stack.enter_context(self._held(skill.owner, skill.name, skill.version, skill.root.name))
            return stack.pop_all()

    def read_file(self, skill: Skill, path: str, max_bytes: int) -> bytes:
        with self.hold([skill]):
            return super().read_file(skill, path, max_bytes)

    def list_files(self, skill: Skill) -> list[str]:
        with self.hold([skill]):
            return super().list_files(skill)

    # -- create_skill -------------------------------------------------------------

    def _publish(self, tmp: Path, key: SkillKey, quota: SkillQuota | None) -> Skill:
        owner, name, version = key
        assert owner is not None
        with self._lock:
            self._check_name(name)
        skill = load_skill(tmp)
        bundle = pack(tmp)
        sha256 = digest(bundle)
        size = folder_bytes(tmp)
        location = bundle_object(sha256) if self.objects is not None else None
        exists = SkillAlreadyExists(f"skill {name} {version} already exists", Part.MANIFEST)
        try:
            with self._reachable():
                # What would refuse it, asked before uploading anything (asked again, under
                # the owner's lock, in the transaction that inserts).
                with self.database.connection() as conn:
                    self._check_room(conn, key, quota, size, exists)
            # The bytes before the row, uploaded outside any transaction: however slow the
            # store, no connection, lock or event loop waits for it. The name is the content's
            # hash, so another creation of the same bytes writes the same object. Until the row
            # commits nothing names it; the orphan sweep leaves objects younger than its grace
            # period alone, and under the object's lock (taken below) it leaves it alone for good.
            uploaded = time.monotonic()
            if location is not None and self.objects is not None:
                self.objects.put(location, bundle)
            with self._reachable(), self.database.transaction() as conn:
                # One creation at a time per owner, across servers: the quota counts hold.
                locks.hold(conn, locks.SKILLS_OF_OWNER, owner)
                self._check_room(conn, key, quota, size, exists)
                if location is not None and self.objects is not None:
                    lock_object(conn, location)
                    if time.monotonic() - uploaded > STALE_WRITE_S / 2:
                        # Old enough that a sweep may have taken it for left over: again, under the lock.
                        self.objects.put(location, bundle)
                conn.execute(
                    "INSERT INTO wasmrun_skills (owner, name, version, namespace, sha256, size_bytes, bundle,"
                    " bundle_object, version_order, manifest, frontmatter)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        owner, name, version, skill.manifest.effective_namespace, sha256, size,
                        None if location is not None else bundle, location, version_order(version),
                        _json(skill.raw_manifest), _listed_frontmatter(skill.frontmatter),
                    ),
                )
        except psycopg.errors.UniqueViolation:
            raise exists from None
        except ObjectStoreError as exc:
            raise SkillUnavailable(f"skill {name} {version} cannot be stored now ({exc}); try again") from None
        with self.cache.held(sha256, lambda: bundle) as folder:
            created = load_skill(folder)
        self._remember(sha256, created)
        return dataclasses.replace(created, owner=owner)

    @staticmethod
    def _check_room(
        conn: psycopg.Connection, key: SkillKey, quota: SkillQuota | None, size: int, exists: SkillAlreadyExists
    ) -> None:
        """Refuse a version the owner has already, or one over the owner's quota."""
        owner, name, version = key
        taken = conn.execute(
            "SELECT 1 FROM wasmrun_skills WHERE owner = %s AND name = %s AND version = %s", (owner, name, version),
        ).fetchone()
        if taken is not None:
            raise exists
        if quota is not None:
            row = conn.execute(
                "SELECT count(*), coalesce(sum(size_bytes), 0) FROM wasmrun_skills WHERE owner = %s", (owner,),
            ).fetchone()
            count, used = (int(row[0]), int(row[1])) if row else (0, 0)
            check_skill_quota(quota, count, lambda: used, size)

    # -- rows from before the listing columns (schema version 5) -----------------------

    def _fill_listing_columns(self) -> None:
        """Rows created before the listing columns existed get them from their bundle
        (once: later starts find none). A row that cannot be read is left unlisted."""
        try:
            with self.database.connection() as conn:
                rows = conn.execute(
                    "SELECT owner, name, version, sha256 FROM wasmrun_skills"
                    " WHERE version_order IS NULL OR manifest IS NULL OR frontmatter IS NULL"
                ).fetchall()
            for owner, name, version, sha256 in rows:
                try:
                    skill = self._materialised(owner, name, version, sha256)
                except Exception:  # one bad row never stops the server from starting
                    logger.exception("cannot fill the listing columns of skill %s %s of %s", name, version, owner)
                    continue
                with self.database.connection() as conn:
                    conn.execute(
                        "UPDATE wasmrun_skills SET version_order = %s, manifest = %s, frontmatter = %s"
                        " WHERE owner = %s AND name = %s AND version = %s",
                        (version_order(version), _json(skill.raw_manifest), _listed_frontmatter(skill.frontmatter),
                         owner, name, version),
                    )
        except (psycopg.Error, DatabaseError) as exc:
            logger.error("cannot fill the listing columns of created skills: %s", exc)

    def _move_bundles_to_store(self) -> None:
        """With --blob-store, bundles still in their rows (stored without one, or by a
        wasmrun older than schema 5) move to the object store, one row per transaction:
        the object first, under its lock, then the row names it. A bundle whose bytes do
        not match its hash stays where it is (and is refused when asked for)."""
        if self.objects is None:
            return
        try:
            with self.database.connection() as conn:
                keys = conn.execute(
                    "SELECT owner, name, version FROM wasmrun_skills WHERE bundle IS NOT NULL"
                ).fetchall()
            moved = 0
            for owner, name, version in keys:
                with self.database.transaction() as conn:
                    row = conn.execute(
                        "SELECT sha256, bundle FROM wasmrun_skills WHERE owner = %s AND name = %s AND version = %s"
                        " AND bundle IS NOT NULL FOR UPDATE",
                        (owner, name, version),
                    ).fetchone()
                    if row is None:  # another server moved it meanwhile
                        continue
                    sha256, data = str(row[0]), bytes(row[1])
                    if digest(data) != sha256:
                        logger.error("skill %s %s of %s: its bundle does not match its hash; left in place",
                                     name, version, owner)
                        continue
                    location = bundle_object(sha256)
                    lock_object(conn, location)
                    self.objects.put(location, data)
                    conn.execute(
                        "UPDATE wasmrun_skills SET bundle = NULL, bundle_object = %s"
                        " WHERE owner = %s AND name = %s AND version = %s",
                        (location, owner, name, version),
                    )
                    moved += 1
            if moved:
                logger.info("moved %d created skills' bundles from the database to the object store", moved)
        except (psycopg.Error, DatabaseError, ObjectStoreError) as exc:
            logger.error("cannot move created skills' bundles to the object store (they are served from the"
                         " database meanwhile): %s", exc)
