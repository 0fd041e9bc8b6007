"""The advisory locks the shared backend takes, each purpose in its own class.

PostgreSQL keys an advisory lock by one 64-bit number or by two 32-bit ones (two
spaces that never overlap). Each lock here is the two-key form: a class naming
its purpose, and the hash of what it guards (an owner, an object's name). Two
purposes never share a key, so a tenant's skill creation never waits behind
another tenant's run admission whose hash happens to be the same; within one
purpose, two owners with equal hashes only take turns.
"""

from __future__ import annotations

import psycopg

# The classes (any distinct 32-bit numbers).
SKILLS_OF_OWNER = 0x736B  # creating a tenant's skills (database/skills.py): its quota counts hold
RUNS_OF_TENANT = 0x7275  # admitting a tenant's runs (database/runs.py)
BLOBS_OF_OWNER = 0x626C  # changing a tenant's blobs and their usage row (database/blobs.py)
SESSIONS_OF_OWNER = 0x7365  # creating a tenant's sessions (database/sessions.py): its `sessions` cap holds
OBJECT = 0x776F  # an object in the object store, from its write until its row commits (database/orphans.py)


def hold(conn: psycopg.Connection, lock_class: int, key: str) -> None:
    """Hold the lock of `key` in `lock_class` until the transaction ends (waiting for it)."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (lock_class, key))


def try_hold(conn: psycopg.Connection, lock_class: int, key: str) -> bool:
    """Hold the lock of `key` in `lock_class` until the transaction ends, if no one else does."""
    row = conn.execute("SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (lock_class, key)).fetchone()
    return bool(row and row[0])
