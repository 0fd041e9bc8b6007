"""`pip`, `pip3`, `python -m pip` and `uv pip` for the sandbox's shell (runtime/commands.py).

`pip install` goes through runtime.packages.install (the `packages_install` host call): the
host resolves the names inside the operator's policy, and the packages import in this run
right after (`pip install humanize && python -c "import humanize"`) and, in a session, in
its later runs. `pip list`, `pip freeze` and `pip show` answer from what is mounted
(importlib.metadata over sys.path: runtime/_shellpy.py).

The flags agents write are taken (-q, -U/--upgrade, --user, --no-cache-dir,
--break-system-packages, -r requirements.txt read from the sandbox's files...); those that
would install from somewhere else than the operator's index (-e, a path, a URL,
--index-url...) are refused, saying why. The output is pip's ("Successfully installed
humanize-4.12.3"), its errors on stderr with status 1.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.types import CommandContext, ExecResult
# isort: on

from runtime import _shellpy, packages

USAGE = """Usage:
  pip install [options] <requirement specifier> ...
  pip install [options] -r <requirements file> ...
  pip list | pip freeze | pip show <package> ...

In the sandbox, `pip install` installs pure-Python packages from the server's package index,
inside its operator's policy; they import in this run and in a session's later runs.
"""
# Options that change nothing here: the sandbox's installs are always like this.
_QUIET = frozenset({"-q", "--quiet", "-qq", "-qqq"})
_NO_EFFECT = frozenset({
    "-v", "--verbose", "-vv", "--no-color", "--disable-pip-version-check", "--no-input", "--isolated",
    "-U", "--upgrade", "--user", "--no-cache-dir", "--break-system-packages", "--system", "--force-reinstall",
    "--no-warn-script-location", "--no-warn-conflicts", "--prefer-binary", "--no-compile", "--compile",
    "--ignore-installed", "-I", "--pre", "--no-python-version-warning", "--no-build-isolation",
    "--use-pep517", "--exists-action=i", "--only-binary=:all:", "--only-binary", "--progress-bar=off",
    "--root-user-action=ignore",
})
# Options with a value that change nothing here.
_NO_EFFECT_WITH_VALUE = frozenset({
    "--upgrade-strategy", "--progress-bar", "--root-user-action", "--timeout", "--retries",
    "--exists-action", "--only-binary", "--python-version", "--cache-dir", "--log",
})
# Options refused, with the reason.
_FROM_ELSEWHERE = (
    "the sandbox installs from its server's package index only (its operator's configuration):"
    " {option} is not taken"
)
_REFUSED = {
    "-e": "editable installs (-e) need a source tree and a build; the sandbox installs wheels from the index",
    "--editable": "editable installs (-e) need a source tree and a build; the sandbox installs wheels from the index",
    "-i": _FROM_ELSEWHERE, "--index-url": _FROM_ELSEWHERE, "--extra-index-url": _FROM_ELSEWHERE,
    "-f": _FROM_ELSEWHERE, "--find-links": _FROM_ELSEWHERE, "--trusted-host": _FROM_ELSEWHERE,
    "--no-index": _FROM_ELSEWHERE,
    "-t": "packages are installed into the run's package set, not a folder of your choice ({option})",
    "--target": "packages are installed into the run's package set, not a folder of your choice ({option})",
    "--prefix": "packages are installed into the run's package set, not a folder of your choice ({option})",
    "--root": "packages are installed into the run's package set, not a folder of your choice ({option})",
    "--no-binary": "the sandbox installs wheels only: building from source ({option}) would run the package's"
                   " code on the server",
    "-c": "constraints files ({option}) are not supported: pin versions in the requirements themselves",
    "--constraint": "constraints files ({option}) are not supported: pin versions in the requirements themselves",
    "--no-deps": "dependencies are always installed with a package ({option} is not taken)",
}
MAX_REQUIREMENTS_FILE = 1 << 20  # bytes of a requirements file read at most
MAX_INCLUDE_DEPTH = 5  # -r inside a requirements file, nested


class _Refused(Exception):
    pass


def _local_or_url(text: str) -> str | None:
    """Why `text` is no requirement from the index (a URL, a path, a local archive), or None."""
    lowered = text.lower()
    if "://" in text or lowered.startswith(("git+", "hg+", "svn+", "bzr+", "file:")) or "@" in text:
        return f"{text[:80]!r} is a URL: the sandbox installs packages by name from its server's index"
    if text.startswith((".", "/", "~")) or "/" in text or "\\" in text or lowered.endswith((".whl", ".tar.gz", ".zip", ".tgz")):
        return (f"{text[:80]!r} is a local path or archive: the sandbox installs packages by name from its"
                " server's index (wheels only)")
    return None


def _read_requirements(path: str, cwd: str, depth: int = 0) -> list[str]:
    if depth > MAX_INCLUDE_DEPTH:
        raise _Refused(f"requirements files nested more than {MAX_INCLUDE_DEPTH} deep (-r in {path})")
    full = os.path.join(cwd, path)
    try:
        with open(full, "rb") as f:
            data = f.read(MAX_REQUIREMENTS_FILE + 1)
    except OSError as exc:
        raise _Refused(f"Could not open requirements file: [Errno {exc.errno}] {exc.strerror}: {path!r}") from None
    if len(data) > MAX_REQUIREMENTS_FILE:
        raise _Refused(f"requirements file {path!r} is larger than {MAX_REQUIREMENTS_FILE} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(f"requirements file {path!r} is not UTF-8 text") from None
    found: list[str] = []
    lines = text.replace("\\\n", "").splitlines()
    for line in lines:
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.startswith("-"):
            option, _, value = line.partition(" ")
            option, eq, inline = option.partition("=")
            value = (inline if eq else value).strip()
            if option in ("-r", "--requirement"):
                found += _read_requirements(value, os.path.dirname(full), depth + 1)
                continue
            if option in _REFUSED:
                raise _Refused(f"{path}: " + _REFUSED[option].format(option=option))
            if option in _NO_EFFECT or option in _NO_EFFECT_WITH_VALUE:
                continue
            raise _Refused(f"{path}: the option {option!r} is not supported in the sandbox")
        found.append(line)
    return found


def _parse_install(args: list[str], cwd: str) -> tuple[list[str], bool, bool]:
    """(requirements, quiet, upgrade) from `pip install`'s arguments; _Refused with the reason."""
    requirements: list[str] = []
    quiet = upgrade = False
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        option, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if arg in _QUIET:
            quiet = True
        elif arg in ("-U", "--upgrade"):
            upgrade = True
        elif arg in _NO_EFFECT or option in _NO_EFFECT:
            continue
        elif option in _NO_EFFECT_WITH_VALUE:
            if not eq:
                i += 1
        elif option in ("-r", "--requirement") or (arg.startswith("-r") and len(arg) > 2):
            if arg.startswith("-r") and len(arg) > 2 and not arg.startswith("--"):
                value = arg[2:]
            elif eq:
                value = inline
            else:
                if i >= len(args):
                    raise _Refused(f"{arg} option requires 1 argument")
                value = args[i]
                i += 1
            requirements += _read_requirements(value, cwd)
        elif option in _REFUSED or arg[:2] in ("-e", "-i", "-f", "-t", "-c") and arg[:2] in _REFUSED:
            key = option if option in _REFUSED else arg[:2]
            raise _Refused(_REFUSED[key].format(option=key))
        elif arg.startswith("-"):
            raise _Refused(f"no such option: {arg[:80]}")
        else:
            requirements.append(arg)
    for requirement in requirements:
        why = _local_or_url(requirement)
        if why is not None:
            raise _Refused(why)
    return requirements, quiet, upgrade


def _where(dist: object) -> str:
    """Where pip would say a distribution is: an installed set's, or the image's own."""
    root = str(dist.locate_file(""))  # type: ignore[attr-defined]
    return f"in {packages.SITE}" if root.startswith((packages.SITE, packages.ADDED)) else "in the image"


def _in_image(name: str, asked: list[str], have: dict[str, Any]) -> str:
    """pip's line for a name the image has built in: satisfied, or, when the version asked is
    not the image's, that the image's is used (the image's own packages were built with it;
    the host never replaces it: docs/packages.md). `have`: the distributions found."""
    dist = have.get(name)
    if dist is None:
        return f"Requirement already satisfied: {name} (built into the image)"
    have = dist.version
    wanted = asked[-1] if asked else name
    specifier = wanted[len(_name_of(wanted)):].strip()
    if not specifier or _satisfies(have, specifier):
        return f"Requirement already satisfied: {name} in the image ({have})"
    return (f"WARNING: {wanted} was asked; the image has {name} {have} built in, which its own packages use:"
            f" {have} is used (it is not replaced)")


def _satisfies(version: str, specifier: str) -> bool:
    """`version` is within `specifier` (packaging's rules where the image has packaging)."""
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:
        return specifier in (f"=={version}", f"==={version}")
    try:
        return SpecifierSet(specifier).contains(version, prereleases=True)
    except InvalidSpecifier:
        return False


def install(args: list[str], cwd: str) -> ExecResult:
    try:
        requirements, quiet, upgrade = _parse_install(args, cwd)
    except _Refused as exc:
        return ExecResult(stderr=f"ERROR: {exc}\n", exit_code=1)
    if not requirements:
        return ExecResult(stderr="ERROR: You must give at least one requirement to install (see \"pip help install\")\n",
                          exit_code=1)
    # Agents ask for the modules they import (smolagents sends its `additional_imports`):
    # a bare name of the standard library needs nothing (PyPI's namesakes are old sdists).
    stdlib = [r for r in requirements if r in sys.stdlib_module_names]
    requirements = [r for r in requirements if r not in sys.stdlib_module_names]
    notes = "".join(f"Requirement already satisfied: {name} (Python's standard library)\n" for name in stdlib)
    have = _shellpy._distributions()  # (a scan of sys.path: once)
    if not upgrade:  # as pip: a bare name already installed is satisfied (-U asks for the newest)
        for name in [r for r in requirements if _name_of(r) == r and _shellpy._canonical(r) in have]:
            dist = have[_shellpy._canonical(name)]
            notes += f"Requirement already satisfied: {name} {_where(dist)} ({dist.version})\n"
            requirements.remove(name)
    if not requirements:
        return ExecResult(stdout="" if quiet else notes)
    try:
        installed = packages.install(requirements)
    except packages.PackageInstallError as exc:
        rule = f" (rule: {exc.rule})" if exc.rule else ""
        return ExecResult(stderr=f"ERROR: {exc}{rule}\n", exit_code=1)
    except TypeError as exc:
        return ExecResult(stderr=f"ERROR: {exc}\n", exit_code=1)
    if quiet:
        return ExecResult()
    added = installed["added"]
    lines = [notes.rstrip("\n")] if notes else []
    versions = {p["name"]: p["version"] for p in installed["packages"]}
    asked = {_shellpy._canonical(_name_of(r)) for r in requirements}
    for name in sorted(asked - {_shellpy._canonical(pin.split("==")[0]) for pin in added}):
        if name in versions:
            lines.append(f"Requirement already satisfied: {name} in /packages ({versions[name]})")
        elif name in installed["in_image"]:
            lines.append(_in_image(name, [r for r in requirements if _shellpy._canonical(_name_of(r)) == name], have))
    if added:
        lines.append("Successfully installed " + " ".join(pin.replace("==", "-") for pin in added))
    return ExecResult(stdout="".join(line + "\n" for line in lines))


def _name_of(requirement: str) -> str:
    for n, c in enumerate(requirement):
        if not (c.isalnum() or c in "-_."):
            return requirement[:n]
    return requirement


def pip(args: list[str], cwd: str | None = None) -> ExecResult:
    cwd = cwd or os.getcwd()
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] not in ("-h", "--help", "-V", "--version"):
        i += 1  # global options before the command (-q, --disable-pip-version-check...)
    globals_, words = args[:i], args[i:]
    if not words or words[0] in ("-h", "--help", "help"):
        return ExecResult(stdout=USAGE)
    if words[0] in ("-V", "--version"):
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return ExecResult(stdout=f"pip (sandbox: installs through the server's package index) (python {version})\n")
    sub, rest = words[0], words[1:]
    if sub == "install":
        return install(globals_ + rest, cwd)
    if sub in ("list", "freeze", "show"):
        return _shellpy.pip_report(sub, rest)
    if sub in ("uninstall", "download", "wheel"):
        return ExecResult(stderr=f"ERROR: pip {sub} is not available in the sandbox: the packages a run has are"
                                 " read-only (pip install adds to them)\n", exit_code=1)
    return ExecResult(stderr=f'ERROR: unknown command "{sub[:80]}"\n', exit_code=1)


class PipCommand:
    """`pip` and `pip3` (`python -m pip` reaches `pip` through _shellpy)."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def execute(self, args: list[str], ctx: CommandContext) -> ExecResult:
        return pip(args, ctx.cwd)


class UvCommand:
    """`uv pip install/list/show/freeze`: the same as pip's."""

    name = "uv"

    async def execute(self, args: list[str], ctx: CommandContext) -> ExecResult:
        if args[:1] == ["pip"]:
            return pip(args[1:], ctx.cwd)
        if args[:1] in (["--version"], ["-V"]):
            return ExecResult(stdout="uv (sandbox: `uv pip` only)\n")
        shown = args[0][:40] if args else ""
        return ExecResult(stderr=f"error: `uv {shown}` is not available in the sandbox; `uv pip install NAME`"
                                 " (or `pip install NAME`) installs packages\n", exit_code=2)


def python_module_pip(argv: list[str]) -> Any:
    """`python -m pip ...`: runpy would look for a pip package the sandbox does not ship."""
    result = pip(argv)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.exit_code:
        raise SystemExit(result.exit_code)
