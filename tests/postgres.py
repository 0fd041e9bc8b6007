"""A real PostgreSQL server for the shared-backend tests, in a temporary folder.

The Debian `postgresql` package (installed by .ci/postgres) brings initdb and
pg_ctl, which refuse to run as root: as root they run as the `postgres` user.
The server listens on a Unix socket in its own folder only (no TCP at all),
and trusts local connections: it lives as long as the test session.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SUPERUSER = "wasmrun"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PostgresServer:
    def __init__(self) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            pytest.skip("PostgreSQL is not installed (.ci/postgres installs it: apt-get install postgresql)")
        self.bin_dir = bin_dir
        self.as_user: list[str] = []
        owner = None
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and there is no `postgres` user to run PostgreSQL as")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.root = Path(tempfile.mkdtemp(prefix="wasmrun-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "socket"
        self.socket_dir.mkdir()
        if owner is not None:
            for path in (self.root, self.socket_dir):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "--no-sync", "-E", "UTF8")
        options = f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off -c max_connections=60"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "-t", "120", "start")
        self._databases = 0

    def _run(self, tool: str, *args: str) -> None:
        result = subprocess.run(
            [*self.as_user, str(self.bin_dir / tool), *args], capture_output=True, text=True, timeout=180
        )
        if result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stdout}{result.stderr}")

    def url(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@/{database}?host={self.socket_dir}"

    def new_database(self) -> str:
        """A fresh, empty database's URL: each test starts from nothing."""
        import psycopg

        self._databases += 1
        name = f"test_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run([*self.as_user, str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def database_url(postgres_server: PostgresServer) -> str:
    return postgres_server.new_database()
