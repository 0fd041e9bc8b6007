"""The environment E2B's SDK reads, set as a user sets it for a wasmrun server."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from tests.liveserver import LiveServer

E2B_VARS = ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_DEBUG", "E2B_DOMAIN")


@contextlib.contextmanager
def e2b_environment(server: LiveServer | None = None, key: str | None = None) -> Iterator[None]:
    """Every E2B variable of this process unset, then the two URLs of `server` and the key
    set when given (what a user changes to point E2B code at wasmrun); afterwards the
    variables as they were."""
    saved = {name: os.environ.pop(name, None) for name in E2B_VARS}
    if server is not None:
        os.environ.update(E2B_API_URL=f"{server.base_url}/e2b/api", E2B_SANDBOX_URL=f"{server.base_url}/e2b/sandbox")
    if key is not None:
        os.environ["E2B_API_KEY"] = key
    try:
        yield
    finally:
        for name in E2B_VARS:
            os.environ.pop(name, None)
        os.environ.update({name: value for name, value in saved.items() if value is not None})
