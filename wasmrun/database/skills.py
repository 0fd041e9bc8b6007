"""Created skills in the shared database: a skill one server creates is listed,
described and run by every server on its next call.

The operator's skills stay in folders (each server has its own copy of them).
Each server checks the database's newest skill on every call that reads the
registry (one indexed query), loads the versions it has not seen, and
materialises each into its local read-only cache (registry/bundle.py), which is
what a run mounts. The cache is bounded: a run, or a read of a skill's files,
holds its folder for as long as it needs it, and puts it back first from the
database's bundle if it was evicted meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import tarfile
from collections.abc import Sequence
from pathlib import Path

import psycopg

from wasmrun.database import DatabaseError
from wasmrun.database.connection import Database
from wasmrun.protocol.errors import SkillExists
from wasmrun.registry.bundle import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, BundleMissing, SkillCache, digest, pack
from wasmrun.registry.store import (
    DirectoryRegistry,
    Skill,
    SkillKey,
    SkillQuota,
    SkillUnavailable,
    check_skill_quota,
    folder_bytes,
    load_skill,
)

logger = logging.getLogger("wasmrun.database")


class PgSkillRegistry(DirectoryRegistry):
    def __init__(
        self, read_only: Sequence[Path], writable: Path, database: Database, cache: Path,
        cache_entries: int = DEFAULT_MAX_ENTRIES, cache_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.database = database
        self.cache = SkillCache(cache, cache_entries, cache_bytes)
        self._seen_seq = -1  # the newest created skill loaded
        self._created: dict[SkillKey, Skill] = {}
        super().__init__(read_only, writable)

    def _checks_every_call(self) -> bool:
        return True

    def _created_changed(self) -> bool:
        try:
            with self.database.connection() as conn:
                row = conn.execute("SELECT coalesce(max(seq), 0) FROM wasmrun_skills").fetchone()
        except (psycopg.Error, DatabaseError) as exc:
            logger.error("cannot check the database for created skills, serving those last read: %s", exc)
            return False
        return (int(row[0]) if row else 0) != self._seen_seq

    def _load_created(self, index: dict[SkillKey, Skill], operator_names: set[str]) -> None:
        try:
            self._load_new_rows()
        except (psycopg.Error, DatabaseError) as exc:
            logger.error("cannot read created skills from the database, serving those last read: %s", exc)
        for (owner, _, _), skill in self._created.items():
            # As loaded: its cached folder may be evicted meanwhile (runs put it back).
            self._add_loaded(index, skill, owner, reserved=operator_names)

    def _load_new_rows(self) -> None:
        with self.database.connection() as conn:
            rows = conn.execute(
                "SELECT seq, owner, name, version, sha256 FROM wasmrun_skills WHERE seq > %s ORDER BY seq",
                (self._seen_seq,),
            ).fetchall()
            for seq, owner, name, version, sha256 in rows:
                try:
                    with self.cache.held(sha256, functools.partial(self._bundle, conn, owner, name, version)) as folder:
                        self._created[(owner, name, version)] = dataclasses.replace(load_skill(folder), owner=owner)
                except BundleMissing:
                    continue
                except Exception:  # one bad row never stops the others from loading
                    logger.exception("skipping created skill %s %s of %s", name, version, owner)
                self._seen_seq = max(self._seen_seq, int(seq))
            if self._seen_seq < 0:
                self._seen_seq = 0

    @staticmethod
    def _bundle(conn: psycopg.Connection, owner: str, name: str, version: str) -> bytes | None:
        row = conn.execute(
            "SELECT bundle FROM wasmrun_skills WHERE owner = %s AND name = %s AND version = %s", (owner, name, version)
        ).fetchone()
        return bytes(row[0]) if row is not None else None

    def _fetch(self, skill: Skill) -> bytes | None:
        assert skill.owner is not None
        with self.database.connection() as conn:
            return self._bundle(conn, skill.owner, skill.name, skill.version)

    # -- the cached folders, held while in use --------------------------------

    def cached(self, skill: Skill) -> bool:
        return skill.owner is not None and self.cache.holds(skill.root)

    def hold(self, skills: Sequence[Skill]) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        with stack:
            for skill in skills:
                if not self.cached(skill):
                    continue
                try:
                    stack.enter_context(self.cache.held(skill.root.name, functools.partial(self._fetch, skill)))
                except (psycopg.Error, DatabaseError, BundleMissing, OSError, tarfile.TarError) as exc:
                    # Its folder was evicted, and putting it back failed (database away, disk full).
                    logger.error("cannot put skill %s %s back into the cache: %s", skill.name, skill.version, exc)
                    raise SkillUnavailable(
                        f"skill {skill.name} {skill.version} cannot be made ready now; try again"
                    ) from None
            return stack.pop_all()

    def read_file(self, skill: Skill, path: str, max_bytes: int) -> bytes:
        with self.hold([skill]):
            return super().read_file(skill, path, max_bytes)

    def list_files(self, skill: Skill) -> list[str]:
        with self.hold([skill]):
            return super().list_files(skill)

    def _publish(self, tmp: Path, key: SkillKey, quota: SkillQuota | None) -> Skill:
        owner, name, version = key
        assert owner is not None
        with self._lock:
            self._check_name(name)
        skill = load_skill(tmp)
        bundle = pack(tmp)
        size = folder_bytes(tmp)
        try:
            with self.database.transaction() as conn:
                # One creation at a time per owner, across servers: the quota counts hold.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("wasmrun-skills:" + owner,))
                if quota is not None:
                    row = conn.execute(
                        "SELECT count(*), coalesce(sum(size_bytes), 0) FROM wasmrun_skills WHERE owner = %s",
                        (owner,),
                    ).fetchone()
                    count, used = (int(row[0]), int(row[1])) if row else (0, 0)
                    check_skill_quota(quota, count, lambda: used, size)
                conn.execute(
                    "INSERT INTO wasmrun_skills (owner, name, version, namespace, sha256, size_bytes, bundle)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (owner, name, version, skill.manifest.effective_namespace, digest(bundle), size, bundle),
                )
        except psycopg.errors.UniqueViolation:
            raise SkillExists(f"skill {name} {version} already exists", field="manifest") from None
        with self.cache.held(digest(bundle), lambda: bundle) as folder:
            created = dataclasses.replace(load_skill(folder), owner=owner)
        with self._lock:  # served here at once; the next check loads it (again) from its row
            self._created[key] = created
            self._set_index({**self._index, key: created})
        return created
