"""Pre-initialise the interpreter and bake the result into a new module.

The Wizer technique, done with wasmtime-py: instantiate the linked reactor,
call `_initialize` (libc constructors) and `wasmrun_init` (start CPython,
import the hot modules), then copy linear memory and the values of every
mutable global into a new module: memory becomes active data segments
(all-zero pages dropped), the memory minimum is raised to the snapshot's
size, and mutable globals start at their snapshot values. A fresh instance
of that module starts where `wasmrun_init` left off.

To read globals that the module does not export, the module run for the
snapshot is an instrumented copy that exports each of them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

PAGE = 65536
CHUNK = 4096  # granularity for dropping zero runs

SEC_GLOBAL, SEC_EXPORT, SEC_MEMORY, SEC_DATA, SEC_DATACOUNT = 6, 7, 5, 11, 12
EXPORT_GLOBAL = 3
GLOBAL_EXPORT_PREFIX = "__wasmrun_snapshot_global_"


# --- a minimal reader/writer for the wasm binary format -------------------

def _uleb(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _enc_uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _enc_sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        done = (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40)
        out.append(byte if done else byte | 0x80)
        if done:
            return bytes(out)


def _skip_const_expr(data: bytes, pos: int) -> int:
    while True:
        op = data[pos]
        pos += 1
        if op == 0x0B:  # end
            return pos
        if op in (0x41, 0x42, 0x23, 0xD2):  # i32/i64.const, global.get, ref.func
            _, pos = _uleb(data, pos)
        elif op == 0x43:
            pos += 4
        elif op == 0x44:
            pos += 8
        elif op == 0xD0:
            pos += 1
        elif op in (0x6A, 0x6B, 0x6C, 0x7C, 0x7D, 0x7E):  # extended-const arithmetic
            pass
        else:
            raise ValueError(f"unsupported opcode 0x{op:02x} in a constant expression")


def _sections(wasm: bytes) -> list[tuple[int, bytes]]:
    if wasm[:8] != b"\0asm\x01\0\0\0":
        raise ValueError("not a wasm module (version 1)")
    pos, out = 8, []
    while pos < len(wasm):
        sid = wasm[pos]
        size, pos = _uleb(wasm, pos + 1)
        out.append((sid, wasm[pos : pos + size]))
        pos += size
    return out


def _assemble(sections: list[tuple[int, bytes]]) -> bytes:
    parts = [b"\0asm\x01\0\0\0"]
    for sid, body in sections:
        parts += [bytes([sid]), _enc_uleb(len(body)), body]
    return b"".join(parts)


@dataclass
class _Global:
    valtype: int
    mutable: bool
    raw: bytes  # the whole entry as in the module


def _globals(body: bytes) -> list[_Global]:
    count, pos = _uleb(body, 0)
    out = []
    for _ in range(count):
        start = pos
        valtype, mutable = body[pos], body[pos + 1]
        pos = _skip_const_expr(body, pos + 2)
        out.append(_Global(valtype, bool(mutable), body[start:pos]))
    return out


def _globals_initial_i32(g: _Global) -> int:
    """The value of an `i32.const` initialiser (a stack pointer's)."""
    if g.raw[2] != 0x41:
        raise ValueError("not an i32.const initialiser")
    value, shift, pos = 0, 0, 3
    while True:
        byte = g.raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value - (1 << shift) if byte & 0x40 else value


def _const_expr(valtype: int, value: int | float) -> bytes:
    import struct

    if valtype == 0x7F:
        return b"\x41" + _enc_sleb(_signed(int(value), 32)) + b"\x0b"
    if valtype == 0x7E:
        return b"\x42" + _enc_sleb(_signed(int(value), 64)) + b"\x0b"
    if valtype == 0x7D:
        return b"\x43" + struct.pack("<f", value) + b"\x0b"
    if valtype == 0x7C:
        return b"\x44" + struct.pack("<d", value) + b"\x0b"
    raise ValueError(f"cannot snapshot a mutable global of type 0x{valtype:02x}")


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _imported_globals(wasm_sections: list[tuple[int, bytes]]) -> int:
    for sid, body in wasm_sections:
        if sid == 2:  # import section
            count, pos = _uleb(body, 0)
            globals_ = 0
            for _ in range(count):
                for _field in range(2):
                    n, pos = _uleb(body, pos)
                    pos += n
                kind = body[pos]
                pos += 1
                if kind == 0:
                    _, pos = _uleb(body, pos)
                elif kind == 1:  # table: reftype + limits
                    pos += 1
                    flags = body[pos]
                    _, pos = _uleb(body, pos + 1)
                    if flags & 1:
                        _, pos = _uleb(body, pos)
                elif kind == 2:
                    flags = body[pos]
                    _, pos = _uleb(body, pos + 1)
                    if flags & 1:
                        _, pos = _uleb(body, pos)
                elif kind == 3:
                    globals_ += 1
                    pos += 2
                else:
                    raise ValueError(f"unsupported import kind {kind}")
            return globals_
    return 0


def _instrument(sections: list[tuple[int, bytes]], mutable: list[int]) -> bytes:
    """A copy of the module that also exports every mutable global."""
    out = []
    for sid, body in sections:
        if sid == SEC_EXPORT:
            count, pos = _uleb(body, 0)
            extra = b"".join(
                _enc_uleb(len(name := f"{GLOBAL_EXPORT_PREFIX}{i}".encode())) + name
                + bytes([EXPORT_GLOBAL]) + _enc_uleb(i)
                for i in mutable
            )
            body = _enc_uleb(count + len(mutable)) + body[pos:] + extra
        out.append((sid, body))
    return _assemble(out)


def _data_segments(memory: bytes) -> list[tuple[int, bytes]]:
    zero = bytes(CHUNK)
    segments: list[tuple[int, bytes]] = []
    start = None
    for off in range(0, len(memory), CHUNK):
        if memory[off : off + CHUNK] == zero:
            if start is not None:
                segments.append((start, memory[start:off]))
                start = None
        elif start is None:
            start = off
    if start is not None:
        segments.append((start, memory[start:]))
    trimmed = []
    for offset, data in segments:
        stripped = data.rstrip(b"\0")
        lead = len(stripped) - len(stripped.lstrip(b"\0"))
        trimmed.append((offset + lead, stripped[lead:]))
    return trimmed


def _leading_passive(body: bytes) -> list[bytes]:
    """The raw passive segments that come before every active one (their
    indices stay valid when the active ones are replaced); refuses other layouts."""
    count, pos = _uleb(body, 0)
    passive: list[bytes] = []
    seen_active = False
    for _ in range(count):
        start, flag = pos, body[pos]
        if flag == 1:
            if seen_active:
                raise ValueError("a passive data segment after an active one is not supported")
            n, pos = _uleb(body, pos + 1)
            pos += n
            passive.append(body[start:pos])
            continue
        if flag != 0:
            raise ValueError("only data segments of memory 0 are supported")
        seen_active = True
        pos = _skip_const_expr(body, pos + 1)
        n, pos = _uleb(body, pos)
        pos += n
    return passive


def _rewrite(
    sections: list[tuple[int, bytes]],
    memory: bytes,
    global_values: dict[int, int | float],
    n_imported_globals: int,
) -> tuple[bytes, int]:
    segments = _data_segments(memory)
    pages = len(memory) // PAGE
    # Passive segments (code refers to them by index) are kept, in front.
    passive = _leading_passive(next((body for sid, body in sections if sid == SEC_DATA), b"\x00"))
    data_body = _enc_uleb(len(passive) + len(segments)) + b"".join(passive) + b"".join(
        b"\x00" + b"\x41" + _enc_sleb(_signed(offset, 32)) + b"\x0b" + _enc_uleb(len(data)) + data
        for offset, data in segments
    )
    out = []
    for sid, body in sections:
        if sid == SEC_MEMORY:
            count, pos = _uleb(body, 0)
            if count != 1:
                raise ValueError("expected exactly one memory")
            flags = body[pos]
            if flags & ~1:
                raise ValueError("shared or 64-bit memories are not supported")
            _, p2 = _uleb(body, pos + 1)
            rest = body[p2:]  # the maximum, if any
            body = _enc_uleb(1) + bytes([flags]) + _enc_uleb(pages) + rest
        elif sid == SEC_GLOBAL:
            entries = _globals(body)
            rebuilt = []
            for i, g in enumerate(entries):
                index = n_imported_globals + i
                if g.mutable:
                    rebuilt.append(bytes([g.valtype, 1]) + _const_expr(g.valtype, global_values[index]))
                else:
                    rebuilt.append(g.raw)
            body = _enc_uleb(len(entries)) + b"".join(rebuilt)
        elif sid == SEC_DATACOUNT:
            body = _enc_uleb(len(passive) + len(segments))
        elif sid == SEC_DATA:
            body = data_body
        out.append((sid, body))
    if not any(sid == SEC_DATA for sid, _ in sections):
        raise ValueError("module has no data section")
    return _assemble(out), len(segments)


# --- running the init export ---------------------------------------------

def make_snapshot(base_wasm: Path, lib_dir: Path, out: Path) -> dict[str, object]:
    """Write the pre-initialised module to `out`; returns size figures."""
    import wasmtime

    from python_wasm import exports as exports_
    from wasmrun.abi import GUEST_LIB

    original = base_wasm.read_bytes()
    sections = _sections(original)
    n_imported = _imported_globals(sections)
    global_body = next(body for sid, body in sections if sid == SEC_GLOBAL)
    mutable = [
        n_imported + i for i, g in enumerate(_globals(global_body)) if g.mutable
    ]

    engine = wasmtime.Engine()
    module = wasmtime.Module(engine, _instrument(sections, mutable))
    linker = wasmtime.Linker(engine)
    linker.define_wasi()

    def refuse(*_args: object) -> None:
        raise RuntimeError("host calls are not available while snapshotting")

    for name, ty in exports_.func_imports(module, "wasmrun").items():
        linker.define_func("wasmrun", name, ty, refuse)

    store = wasmtime.Store(engine)
    wasi = wasmtime.WasiConfig()
    wasi.preopen_dir(str(lib_dir), GUEST_LIB, fs_mutable=False)
    wasi.inherit_stderr()
    store.set_wasi(wasi)
    instance = linker.instantiate(store, module)
    exports = instance.exports(store)
    exports_.func(exports, "_initialize")(store)
    status = exports_.func(exports, "wasmrun_init")(store)
    if status != 0:
        raise RuntimeError(f"wasmrun_init failed with status {status} (see the output above)")

    memory = exports_.memory(exports)
    size = memory.data_len(store)
    image = bytes(memory.read(store, 0, size))
    values = {i: exports_.global_(exports, f"{GLOBAL_EXPORT_PREFIX}{i}").value(store) for i in mutable}
    snapshot, n_segments = _rewrite(sections, image, values, n_imported)
    out.write_bytes(snapshot)
    return {
        "memory_bytes": size,
        "data_segments": n_segments,
        "data_bytes": sum(len(d) for _, d in _data_segments(image)),
        "mutable_globals": len(mutable),
        "sha256": hashlib.sha256(snapshot).hexdigest(),
    }
