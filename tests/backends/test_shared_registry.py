"""The skill registry on the shared backend: list_skills pages and filters created
skills in SQL (merged with the operator's skills in one order, the local
registry's), bundles live in the object store and are checked by hash when a
server materialises them, and objects no row names are swept. Real PostgreSQL
(tests/postgres.py), real `rclone serve s3` (tests/objectstore.py), real servers."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import psycopg

from tests.backends.test_shared_blobs import result, shared  # noqa: F401  (fixture)
from tests.backends.test_shared_database import call, skill_params, wasmrun
from tests.liveserver import LiveServer, wasmrun_env
from tests.objectstore import S3Server, s3_server  # noqa: F401  (fixtures)
from tests.postgres import database_url, postgres_server  # noqa: F401  (fixtures)
from wasmrun.blobs.objects import ObjectStore, ObjectStoreLocation
from wasmrun.database.blobs import SharedBlobStore
from wasmrun.database.connection import Database
from wasmrun.database.orphans import OBJECT_LOCK_CLASS, sweep_orphans
from wasmrun.registry.bundle import digest, pack
from wasmrun.registry.manifest import SemVer
from wasmrun.registry.skill import version_order

# (name, version, namespace or None): versions that order by semantic precedence, not
# text (0.10.0 > 0.9.0, a release above its pre-releases, numeric pre-release ids below
# alphanumeric ones, build metadata only breaking ties), names among the operator's own
# (data.*, text.*) and without a namespace.
ACME = [
    ("user.team.echo", v, None)
    for v in ["0.9.0", "0.10.0", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-2", "1.0.0-10",
              "1.0.0", "1.0.0+build.2", "10.0.0"]
] + [
    ("user.tools.zip", "1.0.0", None),
    ("aaa", "0.1.0", None),
    ("data.mine", "0.1.0", None),
    ("text.extra", "3.0.0", "user.team"),
    ("zeta.last", "2.0.0", None),
]
BOB = [("user.team.echo", "5.0.0", None), ("user.bob.only", "1.0.0", None), ("data.bobs", "1.0.0", None)]


def params(name: str, version: str, namespace: str | None) -> dict[str, Any]:
    made = skill_params(name, version, said=f"{name} {version}")
    if namespace is not None:
        made["manifest"]["namespace"] = namespace
    return made


def create_all(servers: list[LiveServer], key: str, skills: list[tuple[str, str, str | None]]) -> None:
    for i, skill in enumerate(skills):
        made = call(servers[i % len(servers)], key, "create_skill", params(*skill)).json()
        assert "result" in made, made


def walk(servers: list[LiveServer], key: str, limit: int, **filters: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """Every page of list_skills, each from the next server in turn: the skills and cursors."""
    listed: list[tuple[str, str]] = []
    cursors: list[str] = []
    cursor = None
    for turn in range(200):
        page = result(call(servers[turn % len(servers)], key, "list_skills",
                           {"limit": limit, **filters, **({"cursor": cursor} if cursor else {})}))
        assert len(page["skills"]) <= limit
        listed += [(s["name"], s["version"]) for s in page["skills"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return listed, cursors
        cursors.append(cursor)
    raise AssertionError("the listing never ended")


def add_tenant(name: str, *where: str) -> str:
    added = wasmrun("tenants", "add", name, *where)
    assert added.returncode == 0, added.stderr
    return added.stdout.strip()


def raw_call(server: LiveServer, key: str, method: str, params: Any) -> httpx2.Response:
    """A call whose JSON may carry escaped lone surrogates (json.dumps writes them as \\ud800)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return httpx2.post(server.endpoint, content=body.encode(), timeout=120,
                       headers={"authorization": f"Bearer {key}", "content-type": "application/json"})


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert "error" in body, body
    error: dict[str, Any] = body["error"]
    return error


def test_version_order_sorts_as_semantic_versions() -> None:
    versions = ["0.9.0", "0.10.0", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
                "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.0+a", "1.0.0+b", "1.0.0-0",
                "1.0.0-9", "1.0.0-10", "1.0.0-a-b", "1.0.0--", "2.0.0", "10.0.0", "99999999999999999999.0.0",
                "1.10.0", "1.9.0", "1.0.10", "1.0.9", "0.0.0", "1.0.0-alpha.0", "1.0.0-alpha0"]
    by_text = sorted(versions, key=version_order)
    assert by_text == sorted(versions, key=SemVer)
    assert len({version_order(v) for v in versions}) == len(versions)


def test_paging_across_servers_is_the_local_registrys_order(
    tmp_path: Path, shared: list[str], database_url: str  # noqa: F811
) -> None:
    """Two tenants create skills through two servers; each page comes from either server;
    the walk is the one a local server with the same skills gives, cursor for cursor."""
    acme = add_tenant("acme", "--database-url", database_url)
    bob = add_tenant("bob", "--database-url", database_url)
    local_data = tmp_path / "local"
    local_keys = {name: add_tenant(name, "--data-dir", str(local_data)) for name in ("acme", "bob")}
    servers = [LiveServer(tmp_path / f"data-{i}", *shared) for i in range(2)]
    local = LiveServer(local_data)
    try:
        create_all(servers, acme, ACME)
        create_all(servers, bob, BOB)
        create_all([local], local_keys["acme"], ACME)
        create_all([local], local_keys["bob"], BOB)
        everything, _ = walk([local], local_keys["acme"], 200)
        assert len(everything) == len(set(everything))
        for limit in (1, 3, 200):
            for filters in ({}, {"namespace": "user"}, {"namespace": "user.team"}, {"namespace": "data"}):
                shared_walk = walk(servers, acme, limit, **filters)
                assert shared_walk == walk([local], local_keys["acme"], limit, **filters), (limit, filters)
                listed = shared_walk[0]
                assert len(listed) == len(set(listed)), listed  # no duplicates
                assert listed == [s for s in everything if s in listed]  # the one order, no gaps below
        shared_all, _ = walk(servers, acme, 4)
        assert shared_all == everything
        # Each of acme's versions, and none of bob's (not even under a name acme has too).
        assert {(n, v) for n, v, _ in ACME} <= set(shared_all)
        assert not {(n, v) for n, v, _ in BOB} & set(shared_all)
        bobs, _ = walk(servers, bob, 5, namespace="user")
        assert [s for s in bobs if s[0].startswith("user.")] == [
            ("user.bob.only", "1.0.0"), ("user.team.echo", "5.0.0")
        ]
        # The namespace filter takes whole dotted parts, as the local registry does.
        assert walk(servers, acme, 50, namespace="use")[0] == []
        assert walk(servers, acme, 50, namespace="user.team")[0][:1] == [("text.extra", "3.0.0")]

        # Hostile cursors: -32602 naming `cursor`, from either server.
        real = result(call(servers[0], acme, "list_skills", {"limit": 2}))["next_cursor"]
        tampered = ("X" if real[0] != "X" else "Y") + real[1:]

        def encoded(text: str) -> str:
            return base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode().rstrip("=")

        hostile = [
            tampered, "garbage!", "x" * 5000, "A" * 2048, "\0", "\ud800",
            encoded('["user\\u0000", "echo", "1.0.0"]'), encoded('["\\ud800", "echo", "1.0.0"]'),
            encoded('["user", "echo\\u0000", "1.0.0"]'), encoded('["user", "echo", "1.0.0\\u0000"]'),
            encoded('["user", "' + "a" * 5000 + '", "1.0.0"]'), encoded("[" * 5000 + "]" * 5000),
            encoded('["user", "echo", "1.0"]'), encoded('["USER", "echo", "1.0.0"]'),
            encoded('["user", "echo", "1.0.0", "x"]'), encoded('{"a": 1}'), encoded("\ud800"),
        ]
        for i, cursor in enumerate(hostile):
            error = error_of(raw_call(servers[i % 2], acme, "list_skills", {"cursor": cursor}))
            if error["code"] == -32700:  # the wire refuses a lone surrogate in any string of the body
                assert "\ud800" in cursor, error
                continue
            assert error["code"] == -32602 and error["data"]["field"] == "cursor", (cursor[:40], error)
        # Hostile namespaces: refused naming the field, or simply matching nothing.
        too_long = error_of(call(servers[0], acme, "list_skills", {"namespace": "u" * 5000}))
        assert too_long["code"] == -32602 and too_long["data"]["field"] == "namespace"
        for namespace in ["user\0", "user.\0team", "\ud800", "user'; DROP TABLE wasmrun_skills; --", "%", "user.%",
                          "u" * 256]:
            answer = raw_call(servers[1], acme, "list_skills", {"namespace": namespace}).json()
            if "error" in answer and answer["error"]["code"] == -32700:
                assert "\ud800" in namespace, answer
            elif "error" in answer:
                assert answer["error"]["code"] == -32602 and answer["error"]["data"]["field"] == "namespace", answer
            else:
                assert answer["result"] == {"skills": [], "next_cursor": None}, (namespace, answer)
        for name in ["user.team.echo\0", "\ud800", "x" * 5000, "user.%"]:
            answer = raw_call(servers[0], acme, "describe_skill", {"name": name}).json()
            assert answer["error"]["code"] in ((-32602, -32700) if "\ud800" in name else (-32602,)), answer
        # Both keep serving, the table whole.
        assert walk(servers, acme, 7)[0] == everything
        # Skills created mid-walk: one after the cursor shows later in that walk, one before it
        # does not; nothing repeats or goes missing.
        first = result(call(servers[0], acme, "list_skills", {"limit": 3}))
        for made in (params("zzz.new", "1.0.0", None), params("a", "1.0.0", None)):
            assert "result" in call(servers[1], acme, "create_skill", made).json()
        rest, cursor = [], first["next_cursor"]
        while cursor is not None:
            page = result(call(servers[len(rest) % 2], acme, "list_skills", {"limit": 3, "cursor": cursor}))
            rest += [(s["name"], s["version"]) for s in page["skills"]]
            cursor = page["next_cursor"]
        seen = [(s["name"], s["version"]) for s in first["skills"]] + rest
        assert seen == everything + [("zzz.new", "1.0.0")]
        assert walk(servers, acme, 5)[0] == [("a", "1.0.0"), *everything, ("zzz.new", "1.0.0")]
    finally:
        for server in [*servers, local]:
            server.stop()


def test_bundles_are_in_the_object_store_and_checked_when_materialised(
    tmp_path: Path, shared: list[str], database_url: str, s3_server: S3Server  # noqa: F811
) -> None:
    a = LiveServer(tmp_path / "data-a", *shared)
    try:
        assert "result" in call(a, None, "create_skill", params("user.team.echo", "1.0.0", None)).json()
        assert "result" in call(a, None, "create_skill", params("user.team.other", "1.0.0", None)).json()
    finally:
        logged = a.stop()
    assert "sweep" not in logged, logged  # the orphan sweep ran at start (nothing to sweep) without failing
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, sha256, bundle_object, bundle IS NULL FROM wasmrun_skills ORDER BY name"
        ).fetchall()
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("user.team.echo", "skills/" + rows[0][1], True), ("user.team.other", "skills/" + rows[1][1], True)
    ]
    objects = ObjectStore(ObjectStoreLocation.parse(shared[3]))
    stored = objects.get(rows[0][2])
    assert digest(stored) == rows[0][1]  # the bytes are in the store, named by their hash

    # A second server with an empty cache of one entry restores each bundle from the store
    # and runs it, again after the other one evicted it.
    b = LiveServer(tmp_path / "data-b", *shared, env=wasmrun_env() | {"WASMRUN_SKILL_CACHE_ENTRIES": "1"})
    try:
        for name in ("user.team.echo", "user.team.other", "user.team.echo", "user.team.other"):
            ran = result(call(b, None, "execute_skill", {"name": name, "args": {"n": 1}}))
            assert ran["status"] == "completed" and ran["output"] == {f"{name} 1.0.0": {"n": 1}}, ran
        # Bytes changed in the store (another valid bundle): putting the evicted version
        # back for a run is a clear error, nothing mounted.
        objects.put(rows[0][2], objects.get(rows[1][2]))
        error = error_of(call(b, None, "execute_skill", {"name": "user.team.echo", "args": {}}))
        assert error["code"] == -32603 and "do not match the hash recorded" in error["message"], error
        assert result(call(b, None, "execute_skill", {"name": "user.team.other", "args": {}}))["status"] == "completed"
    finally:
        b.stop()

    # A server that never had it: the same error for every way to reach it.
    c = LiveServer(tmp_path / "data-c", *shared)
    try:
        for method, extra in [("execute_skill", {"args": {}}), ("describe_skill", {}), ("run_code", None)]:
            if extra is None:
                call_params: dict[str, Any] = {"language": "python", "code": "def main(args):\n    return 1\n",
                                               "mount_skills": ["user.team.echo"]}
            else:
                call_params = {"name": "user.team.echo", **extra}
            error = error_of(call(c, None, method, call_params))
            assert error["code"] == -32603, error
            assert "do not match the hash recorded" in error["message"], error
            assert "/" not in error["message"].replace("user.team.echo", "")  # no host path
        cache = tmp_path / "data-c" / "skill-cache"
        assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == []
        # The other skill, whose bytes are whole, runs; a missing object is a clear error too.
        assert result(call(c, None, "execute_skill", {"name": "user.team.other", "args": {}}))["status"] == "completed"
        objects.delete(rows[0][2])
        error = error_of(call(c, None, "execute_skill", {"name": "user.team.echo", "args": {}}))
        assert error["code"] == -32603 and "missing" in error["message"], error
        assert "result" in call(c, None, "list_skills").json()  # listing reads rows, never bundles
    finally:
        c.stop()


def test_rows_from_before_the_listing_columns_are_listed(
    tmp_path: Path, shared: list[str], database_url: str  # noqa: F811
) -> None:
    """A skill stored by an older wasmrun (bundle in its row, no listing columns) is
    given them at start, then listed and run; with --blob-store its bundle moves there."""
    database = Database(database_url)
    database.migrate()
    folder = tmp_path / "old"
    (folder / "code").mkdir(parents=True)
    made = params("user.old.echo", "0.3.0", None)
    (folder / "skill.toml").write_text(
        'name = "user.old.echo"\nversion = "0.3.0"\ndescription = "Echo the args."\nkind = "action"\n\n'
        '[runtime]\nlanguage = "python"\nentrypoint = "code/main.py"\nexport = "main"\n'
    )
    (folder / "SKILL.md").write_text(made["skill_md"])
    for f in made["files"]:
        (folder / f["path"]).write_text(f["content"])
    bundle = pack(folder)
    with database.connection() as conn:
        conn.execute(
            "INSERT INTO wasmrun_skills (owner, name, version, namespace, sha256, size_bytes, bundle)"
            " VALUES ('local', 'user.old.echo', '0.3.0', 'user.old', %s, 1, %s)", (digest(bundle), bundle)
        )
    server = LiveServer(tmp_path / "data", "--database-url", database_url)
    try:
        listed = result(call(server, None, "list_skills", {"namespace": "user"}))["skills"]
        assert [(s["name"], s["version"], s["namespace"]) for s in listed] == [("user.old.echo", "0.3.0", "user.old")]
        ran = result(call(server, None, "execute_skill", {"name": "user.old.echo", "args": {}}))
        assert ran["output"] == {"user.old.echo 0.3.0": {}}, ran
    finally:
        server.stop()
    with database.connection() as conn:
        assert conn.execute("SELECT count(*) FROM wasmrun_skills WHERE manifest IS NULL").fetchone() == (0,)
        assert conn.execute("SELECT bundle IS NOT NULL, bundle_object FROM wasmrun_skills").fetchone() == (True, None)
    # A server with an object store moves the bundle there; one with an empty cache runs it from there.
    server = LiveServer(tmp_path / "data-s3", *shared)
    try:
        ran = result(call(server, None, "execute_skill", {"name": "user.old.echo", "args": {"x": 1}}))
        assert ran["output"] == {"user.old.echo 0.3.0": {"x": 1}}, ran
    finally:
        server.stop()
    with database.connection() as conn:
        row = conn.execute("SELECT bundle IS NULL, bundle_object FROM wasmrun_skills").fetchone()
    assert row == (True, "skills/" + digest(bundle))
    assert ObjectStore(ObjectStoreLocation.parse(shared[3])).get(str(row[1])) == bundle
    database.close()
    # The operator's `skills list` shows it with its owner, from the row (no bundle read).
    listed = subprocess.run(
        [sys.executable, "-m", "wasmrun", "skills", "list", "--data-dir", str(tmp_path / "cli")],
        env={**wasmrun_env(), "WASMRUN_DATABASE_URL": database_url}, capture_output=True, text=True, timeout=180,
    )
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:3] == ["local", "user.old.echo", "0.3.0"] for line in listed.stdout.splitlines())
    assert any(line.split()[:2] == ["-", "text.stats"] for line in listed.stdout.splitlines())


def test_the_sweep_deletes_old_objects_no_row_names(
    tmp_path: Path, shared: list[str], database_url: str  # noqa: F811
) -> None:
    database = Database(database_url)
    database.migrate()
    objects = ObjectStore(ObjectStoreLocation.parse(shared[3]))
    blobs = SharedBlobStore(database_url, shared[3])
    kept_blob = blobs.create(b"kept", "text/plain")  # its row committed
    old_blob = "blobs/" + "a" * 32
    old_bundle = "skills/" + "b" * 64
    busy = "skills/" + "c" * 64
    foreign = "someone-elses/file"
    for name in (old_blob, old_bundle, busy, foreign):
        objects.put(name, b"left over")
    time.sleep(2.5)  # the store's times have whole seconds
    fresh = "blobs/" + "d" * 32
    objects.put(fresh, b"just written")
    fresh_at = dict(objects.listing("blobs/"))[fresh].timestamp()
    # A writer holds `busy`'s object lock: its row is on its way.
    writer = psycopg.connect(database_url)
    writer.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (OBJECT_LOCK_CLASS, busy))
    try:
        assert sweep_orphans(database, objects, older_than_s=1.0, now=fresh_at) == 2
    finally:
        writer.rollback()
        writer.close()
    left = {name for prefix in ("blobs/", "skills/", "someone") for name, _ in objects.listing(prefix)}
    assert left == {"blobs/" + kept_blob[5:], busy, fresh, foreign}
    assert blobs.read(kept_blob, 0, 10) == b"kept"
    # Once the writer is gone (its row never came), `busy` goes too; the default grace keeps the rest.
    assert sweep_orphans(database, objects, older_than_s=1.0, now=fresh_at) == 1
    assert sweep_orphans(database, objects) == 0
    assert json.dumps(sorted(name for name, _ in objects.listing("blobs/"))) == json.dumps(
        sorted(["blobs/" + kept_blob[5:], fresh])
    )
    database.close()
