"""CPython's own regression tests (3.11, unmodified: the Lib/test of the
interpreter the guest is built from) run inside the sandbox.

Each module runs in one sandbox under unittest, with the test package mounted
read-only. A failure or error fails this test unless it is listed in
EXPECTED_FAILURES with the sandbox limit that causes it (docs/sandbox-python.md
has the same list); a listed test that passes fails it too, so the list stays
true. `WASMRUN_CPYTHON_TESTS=all` runs every module instead of the CI set
(slow: a long job, not CI's).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from python_wasm import build
from python_wasm.downloads import Progress
from wasmrun.sandbox.contract.limits import Limits
from wasmrun.sandbox.contract.types import MountedSkill, RunRequest

# Chosen to cover what the guest's build decides: the parser and compiler
# (stack, allocator, string functions), libm, the C modules we compile
# ourselves (zlib, bz2, lzma, sqlite3) and the stdlib agents use most.
CI_MODULES = (
    "test_ast", "test_grammar", "test_compile", "test_math", "test_cmath", "test_float", "test_int",
    "test_fractions", "test_statistics", "test_json", "test_re", "test_string", "test_unicode",
    "test_datetime", "test_zlib", "test_bz2", "test_lzma", "test_sqlite3", "test_tarfile", "test_csv",
    # The allocator and builtins we build ourselves (pymalloc, sum): python_wasm/native.py.
    "test_builtin", "test_sys", "test_gc", "test_itertools", "test_list", "test_dict",
    # Files as on Linux (paths, trees, temporary files): the WASI guard's path answers (wasi_paths.py).
    "test_os", "test_shutil", "test_pathlib", "test_glob", "test_tempfile", "test_posixpath", "test_fileio",
    "test_genericpath",
)

EXPECTED_FAILURES = {
    "test.test_ast.ASTValidatorTests.test_stdlib_validates":
        "the standard library is a zip file (/lib/wasmrun-guest.zip), not a folder to list",
    "test.test_sys.SysModuleTest.test_stdlib_dir":
        "the standard library is a zip file (/lib/wasmrun-guest.zip): there is no stdlib folder, "
        "so sys._stdlib_dir is None",
    "test.test_sqlite3.test_transactions.TransactionTests.test_locking":
        "WASI has no file locks: SQLite uses its lock-free VFS (a run is one single-threaded process)",
    "test.test_sqlite3.test_transactions.TransactionTests.test_raise_timeout":
        "WASI has no file locks: SQLite uses its lock-free VFS (a run is one single-threaded process)",
}

RUNNER = """
import io, sys, unittest
sys.path.insert(0, "/skills/cpython")

def main(args):
    suite = unittest.defaultTestLoader.loadTestsFromName("test." + args["module"])
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
    broken = result.failures + result.errors + [(t, "unexpected success") for t in result.unexpectedSuccesses]
    return {"run": result.testsRun, "broken": {t.id(): text[-1500:] for t, text in broken}}
"""


def _test_lib() -> Path:
    return build.unpack_cpython(Progress(quiet=True)) / "lib" / "python3.11"


def _modules() -> tuple[str, ...]:
    if os.environ.get("WASMRUN_CPYTHON_TESTS") == "all":
        found = (_test_lib() / "test").glob("test_*")
        return tuple(sorted(p.stem for p in found if p.suffix == ".py" or (p / "__init__.py").exists()))
    return CI_MODULES


@pytest.mark.parametrize("module", _modules())
def test_cpython_module_passes_in_the_sandbox(engine, module: str) -> None:
    result = engine.run(RunRequest(
        kind="code", code=RUNNER, args_json=json.dumps({"module": module}).encode(),
        skills=[MountedSkill(name="cpython", root=str(_test_lib()))],
        limits=Limits(timeout_ms=300_000, cpu_ms=300_000, memory_bytes=1 << 30, output_bytes=1 << 20),
    ))
    assert result.status == "completed", (result.error, result.logs[-3000:])
    outcome = result.output
    assert outcome["run"] > 0
    broken = outcome["broken"]
    unexpected = {test: text for test, text in broken.items() if test not in EXPECTED_FAILURES}
    assert not unexpected, "\n\n".join(f"{test}\n{text}" for test, text in unexpected.items())
    mine = {test for test in EXPECTED_FAILURES if test.startswith(f"test.{module}.")}
    assert mine <= set(broken), f"listed as failing but passed: {sorted(mine - set(broken))}"
