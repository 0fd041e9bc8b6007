"""`make onefile`: dist/wasmrun-<version>-<platform>, one executable file that runs
`serve`, `run` and `mcp` with nothing else installed (PyInstaller, from PyPI).

It carries the Python interpreter and wasmrun's packages (the MCP SDK included),
the bundled skills and the playground (PyInstaller's archive, unpacked to a
temporary folder on each start), then, appended after it (python_wasm/payload.py),
the built guest and the guest compiled to machine code for this wasmtime and
engine configuration: unpacked once into the cache on the first start, whose run
loads that code instead of compiling for 10-30 s (wasmrun/sandbox/images/compiled.py);
a machine whose CPU cannot load it compiles once into its cache, as a wheel does.

    python scripts/onefile.py [--out dist]      prints the file it made
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import wasmtime  # noqa: E402

from python_wasm import build as guest_build  # noqa: E402
from python_wasm import payload  # noqa: E402
from wasmrun.sandbox import WORKER_PACKAGE, compiled, precompile  # noqa: E402

ENTRY = """\
import sys
from pathlib import Path

from python_wasm import build, payload
from python_wasm.downloads import cache_root

# The guest rides after PyInstaller's archive; unpacked into the cache on the first start.
unpacked = payload.unpack(Path(sys.executable), cache_root())
if unpacked is not None:
    build.PACKAGED_DIR = unpacked

if sys.argv[1:2] == ["-m"] and sys.argv[2:3] == [WORKER_PACKAGE]:
    # `python -m MODULE ...`, as the server starts its sandbox workers (sys.executable is this file).
    import runpy

    module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    sys.exit(0)

from wasmrun.cli.main import main

sys.exit(main())
""".replace("WORKER_PACKAGE", repr(WORKER_PACKAGE))  # the pool's workers: `python -m` on it
# Imported by name at run time (uvicorn's loop and protocol choice, the MCP SDK's
# server parts; not mcp.cli, which needs typer), which PyInstaller's import scan does not see.
COLLECT = ("uvicorn", "wasmrun", "mcp.server", "mcp.shared")
METADATA = ("wasmrun", "wasmtime", "mcp", "starlette", "uvicorn", "msgspec")


# The scale extra (a shared PostgreSQL and S3 store: several servers) and the
# developer tools of this checkout's venv: a one-file server is a local one.
EXCLUDE = ("boto3", "botocore", "s3transfer", "psycopg", "psycopg_binary", "psycopg_pool", "mypy", "mypyc",
           "pytest", "_pytest", "trustme", "ruff", "PyInstaller", "setuptools", "pip", "build",
           # jsonschema's optional IRI format check (its grammar is a data file PyInstaller leaves
           # out: the executable failed at start); code mode checks tool arguments without it
           "rfc3987_syntax")


def target_name() -> str:
    return f"wasmrun-{version('wasmrun')}-{sys.platform}-{platform.machine()}"


def _stage_guest(stage: Path) -> Path:
    """A zip of the packaged guest folder (as a wheel has it) plus the guest compiled
    to machine code for this wasmtime and engine configuration, under compiled/."""
    guest = guest_build.ready_guest(quiet=False)
    packaged = stage / "guest"
    guest_build.copy_into_package(guest, packaged)
    made = precompile(guest)
    (packaged / "compiled").mkdir()
    # Under the name the cache gives it (wasmtime version, engine settings, module hash).
    shutil.copy2(made, packaged / "compiled" / compiled.shipped_path(made).name)
    archive = stage / "guest.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for path in sorted(packaged.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(packaged).as_posix())
    return archive


def _stage_data(stage: Path) -> list[str]:
    """The bundled skills and the playground, laid out as in a wheel; --add-data arguments."""
    shutil.copytree(ROOT / "skills", stage / "wasmrun" / "bundled_skills",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pairs = [(stage / "wasmrun" / "bundled_skills", "wasmrun/bundled_skills"),
             (ROOT / "wasmrun" / "playground", "wasmrun/playground")]
    return [arg for src, dest in pairs for arg in ("--add-data", f"{src}:{dest}")]


def build(out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="wasmrun-onefile-") as tmp:
        work = Path(tmp)
        entry = work / "wasmrun_onefile.py"
        entry.write_text(ENTRY)
        args = [
            sys.executable, "-m", "PyInstaller", "--onefile", "--noconfirm", "--log-level", "WARN", "--strip",
            "--name", target_name(), "--distpath", str(out), "--workpath", str(work / "build"),
            # The checkout first: an editable install's import hook is invisible to PyInstaller.
            "--specpath", str(work), "--paths", str(ROOT), *_stage_data(work / "stage"),
        ]
        for package in COLLECT:
            args += ["--collect-submodules", package]
        # wasmtime loads its library from <package>/<platform>-<machine>/ by path.
        lib = next(Path(wasmtime.__file__).parent.glob("*-*/_libwasmtime.*"))
        args += ["--add-binary", f"{lib}:wasmtime/{lib.parent.name}"]
        for module in EXCLUDE:
            args += ["--exclude-module", module]
        for package in METADATA:
            args += ["--copy-metadata", package]
        subprocess.run([*args, str(entry)], check=True, cwd=work)
        made = out / target_name()
        if not made.is_file():
            raise RuntimeError(f"PyInstaller did not make {made}")
        archive = _stage_guest(work / "guest")
        payload.append(made, archive, hashlib.sha256(archive.read_bytes()).digest())
    return made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="the folder to write it to (default dist/)")
    args = parser.parse_args()
    print(build(args.out.resolve()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
