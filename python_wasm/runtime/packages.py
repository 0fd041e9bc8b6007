"""Packages installed from inside a run, importable right after the call.

    from runtime import packages
    packages.install(["humanize==4.12.3"])   # -> what was installed
    import humanize

The host resolves the run's current set plus the new requirements inside the operator's
policy and the tenant's quotas (docs/packages.md) and builds (or finds) the set. This run
sees it at once: the host copies it under /tmp/.wasmrun-packages/<set> and it goes on
sys.path ahead of /packages (its path finders made afresh). A session records the set: its later runs, its forks and a
restarted server mount it at /packages, and the first of them moves the paths of what this
run imported from the copy to /packages (`_settle`, called at every run's start), so
that a package imported here keeps importing its submodules after the copy is gone.

A module already imported keeps the version it was imported at (as after pip install in a
running interpreter): an upgrade shows in code that imports it afresh.
"""

from __future__ import annotations

import json
import sys

import _wasmrun

__all__ = ["PackageInstallError", "install"]

ADDED = "/tmp/.wasmrun-packages"  # wasmrun/abi.py's PACKAGES_ADDED; tests/sandbox/test_abi_drift.py-style check in tests
SITE = "/packages"
MAX_REQUIREMENTS = 256  # more are refused here, before the host call (the host's bound is 64)
MAX_REQUIREMENT = 1000  # characters of one (the host's bound is 200)

# Folders this run put on sys.path (copies under ADDED): moved to SITE by the next run's `_settle`.
_moved: list[str] = []


class PackageInstallError(Exception):
    """Nothing was installed: `package` (may be "") was refused by `rule` (off, allowlist,
    name, native, wheels-only, max_set_bytes, max_packages, max_sets_per_tenant,
    max_tenant_bytes, unsafe-wheel, resolve, workspace, timeout)."""

    def __init__(self, message: str, package: str = "", rule: str = "") -> None:
        super().__init__(message)
        self.package = package
        self.rule = rule


def _checked(requirements) -> list[str]:
    if isinstance(requirements, str):
        requirements = [requirements]
    try:
        items = list(requirements)
    except TypeError:
        raise TypeError("install() takes a list of requirement strings, such as ['humanize==4.12.3']") from None
    if len(items) > MAX_REQUIREMENTS:
        raise PackageInstallError(f"{len(items)} requirements at once; at most 64 may be asked for", "", "name")
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"a requirement must be a string, not {type(item).__name__}")
        shown = item[:80]
        if len(item) > MAX_REQUIREMENT:
            raise PackageInstallError(f"{shown!r}...: not a package name ({len(item)} characters)", shown, "name")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            printable = shown.encode("utf-8", "backslashreplace").decode("utf-8")  # no lone surrogate passed on
            raise PackageInstallError(f"{shown!r}: not a package name (it is not valid text)", printable, "name") from None
    return items


def install(requirements) -> dict:
    """Install `requirements` (names with optional versions: "humanize", "tabulate==0.9.0",
    "requests[socks]>=2") for this run and, in a session, its later runs. Returns what the
    run's set now holds: {"set", "packages": [{"name", "version", "bytes", "requested"}],
    "added": ["name==version", ...], "bytes", "cached", "seconds", "in_image"}. Raises
    PackageInstallError naming the package and the rule when nothing was installed."""
    items = _checked(requirements)
    if not items:
        raise PackageInstallError("no package was named", "", "name")
    request = json.dumps({"requirements": items}).encode("utf-8")
    reply = json.loads(_wasmrun.packages_install(request))
    if not reply.get("ok"):
        raise PackageInstallError(reply.get("error") or "nothing was installed", reply.get("package", ""),
                                  reply.get("rule", ""))
    _activate(reply["path"])
    return {key: reply[key] for key in ("set", "packages", "added", "bytes", "cached", "seconds", "in_image")}


def _activate(path: str) -> None:
    """`path` on sys.path before /packages (and before earlier copies): its versions win."""
    if path in sys.path:
        return
    at = len(sys.path)
    for n, entry in enumerate(sys.path):
        if entry == SITE or entry.startswith(ADDED + "/"):
            at = n
            break
    sys.path.insert(at, path)
    _moved.append(path)
    _forget_finders()


def _moved_path(value: str) -> str:
    for old in _moved:
        if value == old or value.startswith(old + "/"):
            return SITE + value[len(old):]
    return value


def _settle() -> None:
    """At a run's start, when an earlier run of this session installed packages: the copies
    it imported from are gone and the set is at /packages; what was imported from them
    (modules' files, packages' __path__) is moved there, and sys.path no longer names them."""
    if not _moved:
        return
    sys.path[:] = [entry for entry in sys.path if _moved_path(entry) == entry]
    if SITE not in sys.path:
        sys.path.append(SITE)
    for old in _moved:
        sys.path_importer_cache.pop(old, None)
    for module in list(sys.modules.values()):
        where = getattr(module, "__file__", None)
        if isinstance(where, str) and where.startswith(ADDED + "/"):
            try:
                module.__file__ = _moved_path(where)
                spec = getattr(module, "__spec__", None)
                if spec is not None and isinstance(spec.origin, str):
                    spec.origin = _moved_path(spec.origin)
            except (AttributeError, TypeError):
                pass
        search = getattr(module, "__path__", None)
        if search is not None:
            try:
                paths = list(search)
                moved = [_moved_path(p) if isinstance(p, str) else p for p in paths]
                if moved != paths:
                    if isinstance(search, list):
                        search[:] = moved
                    else:  # a namespace package's _NamespacePath
                        search._path[:] = moved
            except (AttributeError, TypeError):
                pass
    _moved.clear()
    _forget_finders()


def _forget_finders() -> None:
    """The path finders of /packages and the copies made again on their next use (a folder's
    listing is cached). Not importlib.invalidate_caches(): that re-reads the standard
    library's zip directory, seconds in the guest."""
    for key in list(sys.path_importer_cache):
        if isinstance(key, str) and (key == SITE or key.startswith((SITE + "/", ADDED + "/"))):
            del sys.path_importer_cache[key]
