"""The sandbox shell's library, built into both guest images (runtime/commands.py).

just-bash (a pure-Python port of Vercel's just-bash: bash syntax and 70+ commands,
Apache-2.0) and what its import needs, as wheels from PyPI pinned by version and
sha256, fetched by the image builds (python_wasm/build.py for the stdlib image,
python_wasm/dataimage.py for the data image) into the download cache, never at run
time. Left out on purpose: aiohttp and its eight dependencies, needed only by
just-bash's curl support, which the sandbox does not register (no sockets; the
network is the host's egress: runtime/_shelljb.py). aiofiles is imported by
just-bash's own real-filesystem class, which the sandbox replaces (it needs threads:
runtime/_shellfs.py), and is never called. markdownify (`html-to-markdown`) is
imported only by that command.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

from python_wasm.downloads import Download, Progress, fetch

JUST_BASH = Download(
    "just-bash==0.2.1",
    "just_bash-0.2.1-py3-none-any.whl",
    "a51b13e7ef5e4205112b5f5cdba55a1f41c2005ac2fc019023361b251a1f9c8c",
    1,
)
AIOFILES = Download(
    "aiofiles==25.1.0",
    "aiofiles-25.1.0-py3-none-any.whl",
    "abe311e527c862958650f9438e859c1fa7568a141b22abcd015e120e86a85695",
    1,
)
NEST_ASYNCIO = Download(
    "nest-asyncio==1.6.0",
    "nest_asyncio-1.6.0-py3-none-any.whl",
    "87af6efd6b5e897c81050477ef65c62e2b2f35d51703cae01aff2905b1852e1c",
    1,
)
MARKDOWNIFY = Download(
    "markdownify==1.2.3",
    "markdownify-1.2.3-py3-none-any.whl",
    "a189a0bedfd14009030fde5f85bb6f77c56897cb839b5c25315dd7d4e3e290ba",
    1,
)
WHEELS = (JUST_BASH, AIOFILES, NEST_ASYNCIO, MARKDOWNIFY)


def inputs() -> str:
    """What names these wheels in an image's key."""
    return ",".join(f"{w.requirement}:{w.sha256}" for w in WHEELS)


def fetched(progress: Progress) -> list[Path]:
    """The wheels, from the download cache (fetched there first if missing), sha256-checked."""
    return [fetch(w, progress) for w in WHEELS]


def members(wheels: list[Path]) -> Iterator[tuple[str, bytes]]:
    """Every file of the wheels, by its path in site-packages: the packages and their
    .dist-info (so importlib.metadata, and the shell's `pip list`, see them). A wheel
    member that would land outside the folder is refused."""
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for name in sorted(zf.namelist()):
                if name.endswith("/"):
                    continue
                parts = name.split("/")
                if name.startswith("/") or ".." in parts or "\\" in name or parts[0].endswith(".data"):
                    raise RuntimeError(f"{wheel.name}: unexpected member {name!r}")
                yield name, zf.read(name)
