"""E2B's paths and the session's: `/home/user` (E2B's home, where its code runs) is the
session's working folder, `/workspace` in the sandbox. A path outside it, with `..`
leading out, NUL, or too long is refused."""

from __future__ import annotations

import posixpath

from wasmrun.e2b.calls import FrontError
from wasmrun.e2b.sandboxes import HOME

GUEST_HOME = "/workspace"
MAX_PATH = 4096
MAX_PARTS = 64


def relative(path: str) -> str:
    """The path within the session's files ("" for the folder itself), from an E2B path:
    absolute under /home/user (or /workspace), or relative to it."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH or "\x00" in path:
        raise FrontError(400, f"path must be a non-empty path of at most {MAX_PATH} characters, without NUL")
    if path.startswith("~"):
        path = HOME + path[1:]
    for root in (HOME, GUEST_HOME):
        if path == root or path.startswith(root + "/"):
            path = path[len(root):]
            break
    else:
        if path.startswith("/"):
            raise FrontError(400, f"path {path[:200]!r} is outside the sandbox's files: they are under {HOME}")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise FrontError(400, f"path {path[:200]!r} leads out of {HOME} with '..'")
    if len(parts) > MAX_PARTS:
        raise FrontError(400, f"path is deeper than {MAX_PARTS} folders")
    return "/".join(parts)


def e2b_path(rel: str) -> str:
    return posixpath.join(HOME, rel) if rel else HOME


def guest_path(path: str) -> str:
    """An E2B path as the session's Python sees it."""
    rel = relative(path)
    return posixpath.join(GUEST_HOME, rel) if rel else GUEST_HOME
