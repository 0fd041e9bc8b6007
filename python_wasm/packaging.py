"""The setuptools hook that makes a wheel self-contained (pyproject.toml's cmdclass).

A wheel carries, besides the Python packages:
- the built guest (python_wasm/guest/: snapshot module, stdlib zip, manifest),
  built here first if the cache does not hold it yet, so that an installed
  wheel never needs the toolchain;
- beside it, the data image's compiled C replacements (datacode.py), so that making the
  data image from an installed wheel needs no toolchain either;
- the bundled skills (wasmrun/bundled_skills/, from skills/ at the root).

An editable install gets neither: it runs from the checkout, which finds the
guest in the build cache and the skills at skills/.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools.command.build_py import build_py

# The source tree: the checkout, or an unpacked sdist (MANIFEST.in puts skills/ in it).
ROOT = Path(__file__).resolve().parent.parent
SKILLS_SOURCE = ROOT / "skills"
SKILLS_IN_WHEEL = ("wasmrun", "bundled_skills")  # mirrors wasmrun.settings.BUNDLED_SKILLS


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        # setuptools loads this file by its path, not as part of python_wasm;
        # the guest build imports its sibling modules by package name.
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from python_wasm import build, datacode

        lib = Path(self.build_lib)
        packaged = lib / "python_wasm" / build.PACKAGED_DIR.name
        build.copy_into_package(build.build(), packaged)
        datacode.copy_into_package(packaged)
        skills = lib.joinpath(*SKILLS_IN_WHEEL)
        if skills.exists():  # left from an earlier build in the same folder
            shutil.rmtree(skills)
        shutil.copytree(SKILLS_SOURCE, skills, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
