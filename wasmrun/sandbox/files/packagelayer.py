"""The operator's package layer as runs see it (built by wasmrun/packages).

The published version is looked up at every run (one readlink of
`<data_dir>/packages/<tag>/current`), so a `wasmrun packages add` or
`remove` shows in the next run of a running server, without a restart. Its
site-packages is mounted read-only at /packages (appended to sys.path) and its
bytecode at /pycache/packages, where the guest's sys.pycache_prefix finds it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

VERSION = re.compile(r"v-[0-9a-z_-]+", re.ASCII)


class PackageLayer:
    GUEST_SITE = "/packages"
    GUEST_PYCACHE = "/pycache/packages"

    def __init__(self, root: Path | None) -> None:
        self.root = root  # <data_dir>/packages/<tag>; None: no layer

    @classmethod
    def for_engine(cls, layers: Path | None, python_tag: str) -> PackageLayer:
        """The layer for a guest of `python_tag` under `layers` (<data_dir>/packages);
        none without it."""
        return cls(layers / python_tag if layers is not None else None)

    def current(self) -> Path | None:
        """The published version's folder, None without one."""
        if self.root is None:
            return None
        try:
            target = os.readlink(self.root / "current")
        except OSError:
            return None
        if not VERSION.fullmatch(target):
            return None  # only a link `packages add` made
        folder = self.root / target
        return folder if (folder / "site-packages").is_dir() else None

    def version(self) -> str:
        """Names the published version (part of the keys of skills' pages): '' without one."""
        folder = self.current()
        return f":{folder.name}" if folder is not None else ""

    @classmethod
    def mounts(cls, folder: Path | None) -> list[tuple[str, str]]:
        """(host folder, guest path) pairs to preopen read-only for `folder`."""
        if folder is None:
            return []
        return [(str(folder / "site-packages"), cls.GUEST_SITE), (str(folder / "pycache"), cls.GUEST_PYCACHE)]
