"""Packages on demand (docs/packages.md) in `wasmrun bench`: what a cached set's mount adds to
a run, and how long a new small pure package takes to be importable.

Both need the package index (pip's own configuration, as the server's installs do): the
first install of CACHED, made once per run before the rows are measured, is the probe. Where
it fails, both rows are absent with pip's reason. The new-package row installs a version of
humanize the run has not installed yet in each sample (NEW_VERSIONS, all pure wheels); it
sits out `--quick` (seconds a sample) unless chosen with `--rows`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wasmrun.bench.interleave import alternating
from wasmrun.bench.systems import HELLO, as_run_code

if TYPE_CHECKING:
    from wasmrun.bench.run import Bench

CACHED = "humanize==4.10.0"
# Versions of one small pure package (py3-none-any, no dependencies): a set never built in each sample.
NEW_VERSIONS = ("4.4.0", "4.5.0", "4.6.0", "4.7.0", "4.8.0", "4.9.0", "4.11.0", "4.12.0", "4.12.1", "4.12.2",
                "4.12.3", "4.13.0", "4.14.0", "4.15.0", "4.16.0")
WITH_SET = f"wasmrun, HTTP, run_code hello with a cached set ({CACHED})"
WITH_IMPORT = f"wasmrun, HTTP, run_code `import humanize` with the cached set ({CACHED})"
WITHOUT = "wasmrun, HTTP keep-alive"
NEW = "wasmrun, HTTP, run_code `import humanize` with a new version (resolve, download, unpack, run)"
TARGET_MS = 5.0  # the issue's: a cached set's mount overhead


def _params(code: str, packages: list[str] | None) -> dict[str, Any]:
    params: dict[str, Any] = {"language": "python", "code": as_run_code(code)}
    if packages is not None:
        params["packages"] = packages
    return params


def absent(bench: Bench) -> str | None:
    """The first install of CACHED, once a run: None when it worked, else why (pip's words)."""
    if "packages.probe" not in bench.state:
        try:
            result = bench.http.call("run_code", _params("import humanize", [CACHED]))
            bench.state["packages.probe"] = None
            took = (result.get("packages") or {}).get("seconds")
            bench.notes.append(f"packages: the first install of {CACHED} (before the rows, their probe) took "
                               f"{took} s as the run's result says")
        except (RuntimeError, OSError) as exc:
            bench.state["packages.probe"] = (f"the package index did not answer from here ({str(exc)[:200]}); "
                                             "these rows need pip's index (pip config list)")
    why: str | None = bench.state["packages.probe"]
    return why


def absent_new(bench: Bench) -> str | None:
    if bench.opts.quick and "packages-new" not in (bench.opts.rows or ()):
        return "skipped with --quick (each sample installs a new set: seconds); `--rows packages-new` runs it"
    return absent(bench)


def cached(bench: Bench) -> dict[str, float]:
    """The same hello with the cached set mounted and without packages, and an import from the set."""
    with_set, with_import, without = (_params(HELLO, [CACHED]), _params("import humanize", [CACHED]),
                                      _params(HELLO, None))
    return alternating(bench, [
        (WITH_SET, lambda: bench.http.timed_call("run_code", with_set)),
        (WITH_IMPORT, lambda: bench.http.timed_call("run_code", with_import)),
        (WITHOUT, lambda: bench.http.timed_call("run_code", without)),
    ])


def new_package(bench: Bench) -> dict[str, float]:
    """A version not installed yet in this run, its first run importing it; no sample once all are used."""
    used: int = bench.state.get("packages.new_used", 0)
    if used >= len(NEW_VERSIONS):
        return {}
    bench.state["packages.new_used"] = used + 1
    params = _params("import humanize\nassert humanize.__version__", [f"humanize=={NEW_VERSIONS[used]}"])
    hello = _params(HELLO, None)
    return alternating(bench, [
        (NEW, lambda: bench.http.timed_call("run_code", params)),
        (WITHOUT, lambda: bench.http.timed_call("run_code", hello)),
    ])


def target_lines(rows: dict[str, Any]) -> list[str]:
    """The mount overhead against the issue's target, and the new package's seconds, read off the rows."""
    parts = []
    got = rows.get("packages-cached", {}).get("systems", {})
    if WITH_SET in got and WITHOUT in got:
        added = got[WITH_SET]["p50_ms"] - got[WITHOUT]["p50_ms"]
        parts.append(f"a cached set's mount adds {added:.2f} ms p50 to a run (goal <= {TARGET_MS:.0f} ms)")
    new = rows.get("packages-new", {}).get("systems", {}).get(NEW)
    if new is not None:
        parts.append(f"a new small pure package is importable after {new['p50_ms'] / 1000:.2f} s p50 "
                     f"(max {new['max_ms'] / 1000:.2f} s, n {new['n']})")
    return ["", "Packages on demand: " + "; ".join(parts) + "."] if parts else []


__all__ = ["CACHED", "NEW", "WITH_SET", "WITHOUT", "absent", "absent_new", "cached", "new_package"]
