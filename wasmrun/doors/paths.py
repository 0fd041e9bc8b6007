"""A client's file path checked against the session's folder, as every door's file calls
take one: absolute under one of the folder's names (E2B's /home/user or /workspace, Azure's
/mnt/data), or relative to it. Too long, NUL, another absolute path (`/`, or `\\` as a
Windows client writes one), `..` leading out, or too deep is a `PathRefused`, which the door
words and answers in its own shape."""

from __future__ import annotations

import enum
from collections.abc import Sequence


class Refusal(enum.Enum):
    MALFORMED = "malformed"  # not text, empty, too long, or with NUL
    OUTSIDE = "outside"  # absolute, and not under the folder
    LEADS_OUT = "leads out"  # a `..` part
    TOO_DEEP = "too deep"  # more parts than allowed


class PathRefused(Exception):
    """Why a path is refused, and the path (cut to 200 characters) to name in the answer."""

    def __init__(self, why: Refusal, shown: str) -> None:
        super().__init__(f"{why.value}: {shown!r}")
        self.why = why
        self.shown = shown


def relative(path: object, roots: Sequence[str], *, max_chars: int, max_parts: int, home: str | None = None) -> str:
    """The path within the folder ("" for the folder itself). `roots` are the folder's
    absolute names; with `home`, a leading `~` is that folder (as a shell reads it)."""
    if not isinstance(path, str) or not path or len(path) > max_chars or "\x00" in path:
        raise PathRefused(Refusal.MALFORMED, path[:200] if isinstance(path, str) else "")
    if home is not None and path.startswith("~"):
        path = home + path[1:]
    for root in roots:
        if path == root or path.startswith(root + "/"):
            path = path[len(root):]
            break
    else:
        if path.startswith(("/", "\\")):
            raise PathRefused(Refusal.OUTSIDE, path[:200])
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathRefused(Refusal.LEADS_OUT, path[:200])
    if len(parts) > max_parts:
        raise PathRefused(Refusal.TOO_DEEP, path[:200])
    return "/".join(parts)
