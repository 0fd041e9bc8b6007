"""python_wasm/addcode.py, the small linker that gives a function of a prebuilt module a
body compiled from C (the data image's sum() and _Py_Dealloc: python_wasm/datacode.py). Real objects
and modules, compiled with the build's pinned zig, run with wasmtime."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import wasmtime

from python_wasm import addcode, datacode
from python_wasm.build import unpack_zig
from python_wasm.downloads import Progress
from python_wasm.native import _zig_env

BASE = """
__attribute__((noinline)) void poke(int *p) { *p += 1; }
__attribute__((noinline, export_name("twice"))) int twice(int x) { return 2 * x; }
__attribute__((export_name("apply"))) int apply(int x) { return twice(x) + 1; }
__attribute__((export_name("keep"))) void keep(int *p) { poke(p); }
"""
# twice's new body: its own helper, a shadow-stack local (the module's __stack_pointer),
# a call into the module (poke) and a call of twice's original body for negative numbers.
NEW_TWICE = """
void poke(int *p);
int original_twice(int x);
__attribute__((noinline)) int thrice(int x) { return 3 * x; }
int new_twice(int x) {
    if (x < 0) return original_twice(x);
    int box = x;
    poke(&box);
    return thrice(box);
}
"""


def _zig(*args: str) -> None:
    zig = unpack_zig(Progress(True))
    done = subprocess.run([str(zig), "cc", *args], env=_zig_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def base_module(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    folder = tmp_path_factory.mktemp("addcode")
    (folder / "base.c").write_text(BASE)
    _zig("-target", "wasm32-wasi", "-mexec-model=reactor", "-O2", str(folder / "base.c"), "-o", str(folder / "base.wasm"))
    return (folder / "base.wasm").read_bytes()


def _object(tmp_path: Path, source: str) -> bytes:
    (tmp_path / "new.c").write_text(source)
    return datacode.compile_object(tmp_path / "new.c", tmp_path / "new.o").read_bytes()


def _run(wasm: bytes, export: str, *args: int) -> int:
    engine = wasmtime.Engine()
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    store = wasmtime.Store(engine)
    store.set_wasi(wasmtime.WasiConfig())
    instance = linker.instantiate(store, wasmtime.Module(engine, wasm))
    func = instance.exports(store)[export]
    assert isinstance(func, wasmtime.Func)
    return int(func(store, *args))


def test_the_new_body_takes_the_functions_place_everywhere(base_module: bytes, tmp_path: Path) -> None:
    assert (_run(base_module, "twice", 5), _run(base_module, "apply", 5)) == (10, 11)
    patched = addcode.replace_in_module(base_module, _object(tmp_path, NEW_TWICE), "twice", "new_twice",
                                        "original_twice")
    # Through its export and through the module's own call site: (5 + 1) * 3.
    assert (_run(patched, "twice", 5), _run(patched, "apply", 5)) == (18, 19)
    assert _run(patched, "twice", -4) == -8  # the original body, called by the new one
    names = addcode._module(addcode._sections(patched)).names
    assert len(names["twice"]) == len(names["original_twice"]) == len(names["new_twice.thrice"]) == 1


@pytest.mark.parametrize(("source", "reason"), [
    ('int new_twice(int x) { const char *volatile s = "literal"; return s[x]; }', "static data"),
    ("static int counter;\nint new_twice(int x) { return counter += x; }", "static data"),
    ("extern int elsewhere;\nint new_twice(int x) { return elsewhere + x; }", "static data"),
    ("int other(int);\nint new_twice(int x) { int (*volatile f)(int) = other; return f(x); }", "function pointer"),
    ("int original_twice(int x);\nint new_twice(long long x) { return original_twice((int)x); }", "signature"),
    ("int not_in_the_module(int);\nint new_twice(int x) { return not_in_the_module(x); }", "0 functions named"),
    ("double poke(double);\nint new_twice(int x) { return (int)poke(x); }", "another signature"),
    ("int other_name(int x) { return x; }", "defines 0 functions named 'new_twice'"),
])
def test_what_it_cannot_place_is_refused_with_the_reason(base_module: bytes, tmp_path: Path, source: str,
                                                         reason: str) -> None:
    with pytest.raises(addcode.LinkError, match=reason):
        addcode.replace_in_module(base_module, _object(tmp_path, source), "twice", "new_twice", "original_twice")


def test_a_target_the_name_section_lacks_is_refused(base_module: bytes, tmp_path: Path) -> None:
    obj = _object(tmp_path, "int new_twice(int x) { return x; }")
    with pytest.raises(addcode.LinkError, match="0 functions named 'no_such_function'"):
        addcode.replace_in_module(base_module, obj, "no_such_function", "new_twice", "original_twice")


@pytest.mark.parametrize("replacement", datacode.REPLACEMENTS, ids=lambda r: r.source)
def test_the_data_images_objects_link_cleanly(tmp_path: Path, replacement: datacode.Replacement) -> None:
    """Each native/data_*.c compiles to code the linker accepts: no data, only the known relocations."""
    obj = addcode.parse_object(datacode.compile_object(replacement.path, tmp_path / "o.o").read_bytes())
    assert {r.type for r in obj.relocs} <= addcode.APPLIED
    assert replacement.entry in {s.name for s in obj.symbols if not s.undefined}
    assert replacement.original in {name for name, _ in obj.imported_functions}


def test_an_installed_wheel_takes_its_packaged_sum_object_and_the_wheel_gets_the_compiled_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """packaging.py puts the compiled native/data_*.c beside the wheel's guest; datacode then
    takes those files and never the toolchain (an installed wheel has no zig)."""
    from python_wasm import build

    monkeypatch.setattr(build, "PACKAGED_DIR", tmp_path)
    datacode.copy_into_package(tmp_path)
    for replacement in datacode.REPLACEMENTS:
        packaged = tmp_path / datacode.object_name(replacement)
        assert packaged.read_bytes().startswith(b"\0asm")  # a wasm object, compiled
        packaged.write_bytes(b"\0asm the wheel's copy")
        assert datacode.object_file(replacement) == b"\0asm the wheel's copy"
