"""The host-guest contract (wasmrun/abi.py) against every side that cannot import it.

bridge.c is C and the runtime runs inside the guest, so neither takes its
constants from the abi module: this test reads their sources (and the built
guest's imports and exports) and fails on any difference, naming it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import msgspec
import pytest
import wasmtime

from python_wasm import build as guest_build
from tests.liveserver import REPO
from wasmrun import abi
from wasmrun.sandbox.guest import door, hostcalls

ROOT = REPO
BRIDGE_C = ROOT / "python_wasm" / "bridge.c"
RUNTIME = ROOT / "python_wasm" / "runtime"
DATAIMAGE_MAKER = ROOT / "python_wasm" / "dataimage.py"


# --- reading the sources ----------------------------------------------------------------------

def c_source() -> str:
    """bridge.c without its comments (a commented-out line is no declaration)."""
    text = BRIDGE_C.read_text()
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.DOTALL)


def c_defines(source: str) -> dict[str, int]:
    """`#define NAME <integer expression>`, evaluated (`(64 * 1024)`, `(-1)`)."""
    found = {}
    for name, expr in re.findall(r"^#define\s+(\w+)\s+([-()\d\s*+<]+)$", source, flags=re.MULTILINE):
        found[name] = int(eval(expr, {"__builtins__": {}}))  # digits and operators only (the regex)
    return found


def c_wasm_type(c_type: str) -> str:
    c_type = c_type.replace("const", "").strip()
    if "*" in c_type or c_type == "int32_t":  # wasm32: a pointer is an i32
        return "i32"
    if c_type == "int64_t":
        return "i64"
    raise AssertionError(f"bridge.c: a host call uses C type {c_type!r}, which has no wasm type here")


def c_host_calls(source: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each `WASMRUN_IMPORT("name") extern <ret> host_<name>(<params>);`: its wasm signature."""
    calls = {}
    pattern = r'WASMRUN_IMPORT\("(\w+)"\)\s*extern\s+(\w+)\s+host_(\w+)\s*\(([^)]*)\)\s*;'
    for name, ret, c_name, params in re.findall(pattern, source):
        assert c_name == name, f"bridge.c: import {name!r} is declared as host_{c_name}"
        args = [p.strip() for p in params.split(",")] if params.strip() not in ("", "void") else []
        types = tuple(c_wasm_type(re.sub(r"\w+$", "", a)) for a in args)  # the type without the name
        results = () if ret == "void" else (c_wasm_type(ret),)
        calls[name] = (types, results)
    return calls


def runtime_tree(name: str) -> ast.Module:
    return ast.parse((RUNTIME / name).read_text(), filename=name)


def module_constants(tree: ast.Module) -> dict[str, object]:
    """Top-level `A, B = range(1, 3)` / `A, B = -1, -2` / `A = 1`, evaluated."""
    found: dict[str, object] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        try:
            value = eval(compile(ast.Expression(node.value), "<const>", "eval"), {"__builtins__": {"range": range}})
        except Exception:
            continue
        if isinstance(target, ast.Name):
            found[target.id] = value
        elif isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
            found.update(zip((e.id for e in target.elts if isinstance(e, ast.Name)), value, strict=True))
    return found


def public_functions(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}


def keys_read_from(tree: ast.AST, variable: str) -> set[str]:
    """Every `variable["key"]` and `variable.get("key", ...)` in `tree`."""
    keys = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == variable
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            keys.add(node.slice.value)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == variable
                and node.args and isinstance(node.args[0], ast.Constant)):
            keys.add(node.args[0].value)
    return keys


def dict_keys_assigned(tree: ast.AST, variable: str) -> set[str]:
    """The keys of the dict literal assigned to `variable`."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == variable for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    raise AssertionError(f"no dict literal assigned to {variable}")


def literals(tree: ast.AST, kind: type) -> set[object]:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, kind)}


def fields(struct: type[msgspec.Struct]) -> set[str]:
    return set(struct.__struct_fields__)


# --- bridge.c ---------------------------------------------------------------------------------

def test_bridge_declares_the_host_calls_with_their_signatures() -> None:
    declared = c_host_calls(c_source())
    assert declared == {call.name: (call.params, call.results) for call in abi.HOST_CALLS}


def test_bridge_imports_from_the_contracts_module() -> None:
    assert re.findall(r'import_module\("(\w+)"\)', c_source()) == [abi.IMPORT_MODULE]


def test_bridge_error_codes_and_buffer_sizes() -> None:
    defines = c_defines(c_source())
    assert {name: defines.get(f"HOST_{name}") for name in abi.ERRNO} == abi.ERRNO
    assert defines.get("IO_CAPACITY") == abi.IO_CAPACITY
    assert defines.get("OUT_CAPACITY") == abi.OUT_CAPACITY
    assert defines.get("MAX_BLOB_ID") == abi.MAX_BLOB_ID
    assert "uint8_t id[MAX_BLOB_ID];" in c_source()  # the buffer blob_write's id lands in


def test_bridge_exports() -> None:
    assert set(re.findall(r'export_name\("(\w+)"\)', c_source())) == {str(e) for e in abi.Export}


def test_bridge_guest_module_functions_and_names() -> None:
    source = c_source()
    table = source[source.index("PyMethodDef wr_methods[]"):]
    table = table[: table.index("};")]
    assert set(re.findall(r'\{"(\w+)",', table)) == abi.GUEST_FUNCTIONS
    assert f'PyModuleDef_HEAD_INIT, "{abi.GUEST_MODULE}"' in source
    assert f'PyErr_NewException("{abi.GUEST_MODULE}.{abi.RUN_STOPPED}"' in source
    assert f'"{abi.RUN_STOPPED_MESSAGE}"' in source
    assert f'L"{abi.GUEST_LIB}/{abi.ZIP_NAME}"' in source  # the interpreter's module path
    assert f'L"{abi.GUEST_LIB}"' in source  # its home


# --- the runtime (both guests) -------------------------------------------------------------------

def test_door_opcodes_errors_and_functions() -> None:
    tree = runtime_tree("_door.py")
    constants = module_constants(tree)
    assert {op.name: constants.get(op.name) for op in abi.DoorOp} == {op.name: op.value for op in abi.DoorOp}
    assert {name: constants.get(name) for name in abi.ERRNO} == abi.ERRNO
    assert public_functions(tree) == abi.GUEST_FUNCTIONS | abi.IMAGE_MAKER_FUNCTIONS
    for name in abi.IMAGE_MAKER_FUNCTIONS:  # its maker calls each by name
        assert f'sys.modules["{abi.GUEST_MODULE}"].{name}()' in DATAIMAGE_MAKER.read_text()
    # The stop request's exception, as the host's reply.py looks for it (bridge.c's on the stdlib guest).
    assert constants.get("RUN_STOPPED_MESSAGE") == abi.RUN_STOPPED_MESSAGE
    assert any(isinstance(node, ast.ClassDef) and node.name == abi.RUN_STOPPED for node in tree.body)


def test_display_frames_level_and_bounds() -> None:
    constants = module_constants(runtime_tree("_display.py"))
    assert constants.get("DISPLAY_LEVEL") == abi.DISPLAY_LEVEL
    assert constants.get("MAX_DISPLAYS") == abi.MAX_DISPLAYS
    assert constants["INLINE_BYTES"] < abi.MAX_DISPLAY_BYTES  # a frame's forms fit under the host's bound


def test_boot_reads_exactly_the_requests_fields() -> None:
    read = keys_read_from(runtime_tree("_boot.py"), "request")
    assert read - fields(abi.GuestRequest) == set(), "the runtime reads fields the host never sends"
    assert fields(abi.GuestRequest) - read == set(), "the host sends fields the runtime never reads"


def test_boot_reply_prefixes_and_failure_shape() -> None:
    tree = runtime_tree("_boot.py")
    one_byte = {b for b in literals(tree, bytes) if isinstance(b, bytes) and len(b) == 1}
    assert one_byte == {abi.REPLY_COMPLETED, abi.REPLY_FAILED, abi.REPLY_WARNINGS}
    strings = literals(tree, str)
    for name in (abi.ENTRYPOINT_NOT_FOUND, abi.INVALID_OUTPUT, abi.SYSTEM_EXIT, abi.GUEST_CRASH, abi.WORKSPACE):
        assert name in strings, f"runtime/_boot.py no longer says {name!r}"
    failed = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_failed")
    shape = next(n for n in ast.walk(failed) if isinstance(n, ast.Dict))
    assert {k.value for k in shape.keys if isinstance(k, ast.Constant)} == fields(abi.GuestFailure)


def test_http_frame() -> None:
    tree = runtime_tree("http.py")
    assert dict_keys_assigned(tree, "meta") == fields(abi.HttpRequestMeta)
    assert dict_keys_assigned(tree, "_ERRORS") == abi.NETWORK_ERRORS
    head = keys_read_from(tree, "head")
    assert head <= abi.HTTP_REPLY_FIELDS | abi.HTTP_REFUSAL_FIELDS
    assert f"reply[:{abi.HTTP_HEAD_LEN_BYTES}]" in (RUNTIME / "http.py").read_text()


def test_runtime_calls_only_what_the_guest_module_offers() -> None:
    used = set()
    for path in RUNTIME.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == abi.GUEST_MODULE:
                used.add(node.attr)
    assert used <= abi.GUEST_FUNCTIONS


# --- the host ------------------------------------------------------------------------------------

def test_the_engines_buffer_probe_asks_for_contract_exports() -> None:
    assert {f"wasmrun_{name}" for name in hostcalls.GuestBuffers._fields} <= {str(e) for e in abi.Export}


def test_host_implements_every_host_call_and_door_op() -> None:
    assert set(hostcalls.HOST_FUNCTIONS) == abi.HOST_CALL_NAMES
    assert set(door._OPS) == {call.door for call in abi.HOST_CALLS if call.door is not None} == set(abi.DoorOp)


def test_http_reply_frame_round_trip() -> None:
    frame = abi.http_reply_frame({"status": 200, "reason": "OK", "headers": [], "url": "https://x/é"}, b"body")
    n = int.from_bytes(frame[: abi.HTTP_HEAD_LEN_BYTES], "little")
    assert msgspec.json.decode(frame[abi.HTTP_HEAD_LEN_BYTES : abi.HTTP_HEAD_LEN_BYTES + n])["url"] == "https://x/é"
    assert frame[abi.HTTP_HEAD_LEN_BYTES + n :] == b"body"


# --- the built guest -----------------------------------------------------------------------------

def _wasm_type(ty: wasmtime.ValType) -> str:
    return str(ty)


def test_built_guest_imports_and_exports() -> None:
    from wasmrun.sandbox.images.stdlibimage import engine_config, load_module

    guest = guest_build.find_guest()
    if guest is None:
        pytest.skip("no built guest (python -m python_wasm.build)")
    module = load_module(wasmtime.Engine(engine_config()), guest.snapshot_wasm)
    imports = {
        imp.name: (tuple(map(_wasm_type, imp.type.params)), tuple(map(_wasm_type, imp.type.results)))
        for imp in module.imports
        if imp.module == abi.IMPORT_MODULE and isinstance(imp.type, wasmtime.FuncType)
    }
    assert imports == {call.name: (call.params, call.results) for call in abi.HOST_CALLS}
    exports = {e.name for e in module.exports}
    assert {str(e) for e in abi.Export} | {abi.MEMORY_EXPORT} <= exports


# --- layering: the guest build reaches only leaves of wasmrun --------------------------------------

LEAVES = {"wasmrun.abi", "wasmrun.durable", "wasmrun.dirtree"}


def _wasmrun_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] if node.module != "wasmrun" else [f"wasmrun.{a.name}" for a in node.names]
        found |= {n for n in names if n == "wasmrun" or n.startswith("wasmrun.")}
    return found


def test_python_wasm_imports_only_leaf_modules_of_wasmrun() -> None:
    """python_wasm <-> wasmrun.sandbox was a package cycle: the guest build (and
    the data image's) import only these leaves, which import nothing of wasmrun."""
    host_side = [p for p in (ROOT / "python_wasm").glob("*.py")]
    used = set().union(*(_wasmrun_imports(p) for p in host_side))
    assert used <= LEAVES, f"python_wasm imports {used - LEAVES}"
    for leaf in LEAVES:
        assert _wasmrun_imports(ROOT / (leaf.replace(".", "/") + ".py")) == set(), f"{leaf} is no longer a leaf"
