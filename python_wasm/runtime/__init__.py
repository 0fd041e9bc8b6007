"""The in-sandbox helper library of the Skills Protocol.

    from runtime import blobs, log, packages, skills

Everything here runs inside the wasm guest and reaches the host only
through the `_wasmrun` built-in module (wasm imports checked by the host).
"""

from runtime import blobs, http, log, packages, skills

__all__ = ["blobs", "http", "log", "packages", "skills"]
