"""wasmrun: a self-hosted Skills Runtime. `from wasmrun import Client` (or AsyncClient)
is the typed client (wasmrun/client/__init__.py), imported on first use so that `import wasmrun`
(and every command that does not need the client) stays cheap."""

from __future__ import annotations

from typing import Any

__all__ = ["AsyncClient", "Client"]
_LAZY = {"Client": "wasmrun.client", "AsyncClient": "wasmrun.client"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wasmrun' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
