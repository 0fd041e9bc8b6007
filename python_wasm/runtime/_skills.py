"""`import skills.<skill name>`: the skills mounted in this run, as modules.

A skill named `salesforce.leads.sync` mounted at `/skills/salesforce.leads.sync/`
is imported as `skills.salesforce.leads.sync`; that module is the skill's
`runtime.entrypoint` file. Every prefix (`skills`, `skills.salesforce`, ...)
is an empty package. The entrypoint module is itself a package whose path is
the entrypoint's folder, so `from . import helpers` works inside a skill.
A skill that is not mounted is not importable.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys

ROOT = "skills"
# The host mounts each skill's compiled bytecode, read-only, at
# /pycache/skills/<name> (wasmrun/sandbox/bytecode.py).
SKILLS_DIR = "/skills/"
BYTECODE_PREFIX = "/pycache"
# The operator's package layer: compiled at install time into /pycache/packages (wasmrun/packages).
PACKAGES_DIR = "/packages/"


class SkillFinder:
    def __init__(self) -> None:
        # dotted skill name -> entrypoint path inside the guest
        self.entrypoints: dict[str, str] = {}

    def mount(self, entrypoints: dict[str, str]) -> None:
        self.entrypoints = dict(entrypoints)

    def _is_prefix(self, dotted: str) -> bool:
        return any(name.startswith(dotted + ".") for name in self.entrypoints)

    def find_spec(self, fullname, path=None, target=None):
        if fullname == ROOT:
            return importlib.machinery.ModuleSpec(fullname, None, is_package=True)
        if not fullname.startswith(ROOT + "."):
            return None
        dotted = fullname[len(ROOT) + 1 :]
        entry = self.entrypoints.get(dotted)
        if entry is not None:
            folder = entry.rsplit("/", 1)[0]
            return importlib.util.spec_from_file_location(
                fullname, entry, submodule_search_locations=[folder]
            )
        if self._is_prefix(dotted):
            return importlib.machinery.ModuleSpec(fullname, None, is_package=True)
        return None


FINDER = SkillFinder()


def _skill_bytecode_paths() -> None:
    """Bytecode of a file under /skills or /packages lives under /pycache (as if
    sys.pycache_prefix were "/pycache"); every other file keeps CPython's
    default, __pycache__ beside its source. A global sys.pycache_prefix would
    send py_compile, compileall and PyZipFile.writepy for files in /workspace
    to the read-only /pycache as well."""
    import importlib._bootstrap_external as external

    original = external.cache_from_source

    def cache_from_source(path, *args, **kwargs):  # 3.11's (path, debug_override, *, optimization); 3.15 dropped one
        if sys.pycache_prefix is None and str(path).startswith((SKILLS_DIR, PACKAGES_DIR)):
            sys.pycache_prefix = BYTECODE_PREFIX
            try:
                return original(path, *args, **kwargs)
            finally:
                sys.pycache_prefix = None
        return original(path, *args, **kwargs)

    cache_from_source.__doc__ = original.__doc__
    external.cache_from_source = cache_from_source
    importlib.util.cache_from_source = cache_from_source


def install() -> None:
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)
        _skill_bytecode_paths()
