"""The images' names: the two a server can run, and which one a guest key names.

A guest key (`Image.key`) names the build of a guest; a session's pages record the key that
made them (sessions/pages.py), so a session is tied to its image. Light on purpose: the
session stores read it without loading wasmtime.
"""

from __future__ import annotations

IMAGES = ("stdlib", "data")
# The data image's guest keys start so (images/dataimage.py's DataImage); the stdlib image's never do.
DATA_GUEST_PREFIX = "data-"


def image_name(guest_key: str) -> str:
    """The image ("stdlib" or "data") of a guest key."""
    return "data" if guest_key.startswith(DATA_GUEST_PREFIX) else "stdlib"
