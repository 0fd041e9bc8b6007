"""E2B's paths and the session's: `/home/user` (E2B's home, where its code runs) is the
session's working folder, `/workspace` in the sandbox. A path outside it, with `..`
leading out, NUL, or too long is refused (wasmrun/doors/paths.py, the Azure door's check too)."""

from __future__ import annotations

import posixpath

from wasmrun.doors import paths as doors_paths
from wasmrun.doors.paths import PathRefused, Refusal
from wasmrun.e2b.calls import FrontError
from wasmrun.e2b.sandboxes import HOME

GUEST_HOME = "/workspace"
MAX_PATH = 4096
MAX_PARTS = 64


def relative(path: str) -> str:
    """The path within the session's files ("" for the folder itself), from an E2B path:
    absolute under /home/user (or /workspace), or relative to it (the doors' check); a
    refusal is a 400 in E2B's words."""
    try:
        return doors_paths.relative(path, (HOME, GUEST_HOME), max_chars=MAX_PATH, max_parts=MAX_PARTS, home=HOME)
    except PathRefused as refused:
        raise FrontError(400, _WORDS[refused.why].format(path=refused.shown)) from None


_WORDS = {
    Refusal.MALFORMED: f"path must be a non-empty path of at most {MAX_PATH} characters, without NUL",
    Refusal.OUTSIDE: "path {path!r} is outside the sandbox's files: they are under " + HOME,
    Refusal.LEADS_OUT: "path {path!r} leads out of " + HOME + " with '..'",
    Refusal.TOO_DEEP: f"path is deeper than {MAX_PARTS} folders",
}


def e2b_path(rel: str) -> str:
    return posixpath.join(HOME, rel) if rel else HOME


def guest_path(path: str) -> str:
    """An E2B path as the session's Python sees it."""
    rel = relative(path)
    return posixpath.join(GUEST_HOME, rel) if rel else GUEST_HOME
