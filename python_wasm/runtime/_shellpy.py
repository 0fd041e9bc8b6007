"""`python`, `python3` and `pip` for the sandbox's shell (runtime/commands.py).

There are no processes in WASI, so `python` runs in this interpreter, as a process
would look from outside: a fresh `__main__` namespace, `sys.argv` set, the
command's cwd, stdin, stdout and stderr (captured into the pipeline, so
`python -c 'print(1)' | wc -l` works), `sys.exit(n)` as exit status n and an
uncaught exception as its traceback on stderr and status 1. What it changed of
the interpreter's process state (argv, cwd, standard streams, `sys.path[0]`,
`os.environ`) is put back afterwards; modules it imported stay imported, as they
would in the caller's own process.

`pip list/freeze/show` speak for the packages the interpreter really has
(importlib.metadata); `pip install` is runtime/_shellpip.py's (on demand, through the host).
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import importlib.metadata
import io
import os
import re
import runpy
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.types import CommandContext, ExecResult
# isort: on


USAGE = "usage: python [-c cmd | -m mod | file | -] [arg] ...\n"
# Options CPython takes without an argument that change nothing for code run in this
# interpreter (it is already started: -u's unbuffered streams, -B, -E, -I, -s, -S, -q, -O).
_NO_EFFECT = frozenset("uBEIsSqObdv")
# The same options that take an argument (-W default, -X dev).
_NO_EFFECT_WITH_ARG = frozenset("WX")


class _Exit(Exception):
    """A command-line problem: its message on stderr, its status the exit code."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def _parse(args: list[str]) -> tuple[str, str, list[str]]:
    """(kind, target, argv) from python's command line: kind is "c" (target: the code),
    "m" (a module), "file" (a path), "stdin" or "version"."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-V", "--version"):
            return "version", "", []
        if arg in ("-h", "--help", "-?"):
            return "help", "", []
        if arg == "-" or not arg.startswith("-") or arg == "--":
            break
        # Clustered short options: `-uc CODE`, `-Bm mod`, `-cCODE`.
        j = 1
        while j < len(arg):
            flag = arg[j]
            rest = arg[j + 1:]
            if flag in "cm":
                if rest:
                    value, argv_tail = rest, args[i + 1:]
                elif i + 1 < len(args):
                    value, argv_tail = args[i + 1], args[i + 2:]
                else:
                    raise _Exit(f"Argument expected for the -{flag} option\n{USAGE}")
                return ("c", value, ["-c", *argv_tail]) if flag == "c" else ("m", value, [value, *argv_tail])
            if flag in _NO_EFFECT_WITH_ARG:
                if not rest:
                    i += 1
                    if i >= len(args):
                        raise _Exit(f"Argument expected for the -{flag} option\n{USAGE}")
                break
            if flag not in _NO_EFFECT:
                raise _Exit(f"Unknown option: -{flag}\n{USAGE}")
            j += 1
        i += 1
    rest_args = args[i:]
    if rest_args and rest_args[0] == "--":
        rest_args = rest_args[1:]
    if not rest_args or rest_args[0] == "-":
        return "stdin", "", ["-", *rest_args[1:]] if rest_args else [""]
    return "file", rest_args[0], rest_args


def exported_env(env: dict[str, str]) -> dict[str, str]:
    """The shell variables a child process would see: the exported ones."""
    attributes: Callable[[str], set[str]] | None = getattr(env, "get_attributes", None)
    if attributes is None:
        return dict(env)
    return {name: value for name, value in env.items() if "x" in attributes(name)}


# Set by the shell (runtime/commands.py) while a command runs whose output goes to the shell's
# own streams, not into a pipe, a redirection or a `$(...)`: then `python` writes there as it
# runs, as a process inherits its parent's stdout, instead of into a string handed back.
INHERITS_STREAMS: contextvars.ContextVar[bool] = contextvars.ContextVar("INHERITS_STREAMS", default=False)


class _Captured(io.StringIO):
    """A standard stream of the command: code that closes it as it ends (json.tool's
    `with outfile`) leaves what it wrote readable."""

    def close(self) -> None:
        self.flush()

    @property
    def buffer(self) -> Any:  # a process's stdout has bytes under it: `sys.stdout.buffer.write(b"...")`
        return _TextBytes(self)


class _Input(io.StringIO):
    """The command's stdin: text, and bytes under it (`sys.stdin.buffer.read()`) for code that
    reads bytes; the bytes are what the text had not yet given (a pipe's bytes as they came)."""

    _bytes: io.BytesIO | None = None

    @property
    def buffer(self) -> io.BytesIO:
        if self._bytes is None:
            rest = self.read()
            try:
                data = rest.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                data = rest.encode("utf-8", "replace")
            self._bytes = io.BytesIO(data)
        return self._bytes


PIECE = 1 << 20  # how much output is encoded and written at once (runtime/commands.py `_emit` too)


class _Inherited(io.TextIOBase):
    """The shell's own stdout or stderr, handed to a `python` command that inherits it:
    written through; closing it (json.tool's `with outfile`) ends the command's use of
    it, not the stream, as closing an inherited descriptor would."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self._stream = stream

    def write(self, text: str) -> int:
        # A MiB at a time: a 100 MB print is encoded piece by piece, not into 100 MB more at once.
        for start in range(0, len(text), PIECE):
            self._stream.write(text[start:start + PIECE])
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    def getvalue(self) -> str:
        return ""  # written already

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._stream, "errors", None)

    @property
    def buffer(self) -> Any:  # `sys.stdout.buffer.write(b"...")`: the stream's bytes, in order with its text
        self._stream.flush()
        raw = getattr(self._stream, "buffer", None)
        return _InheritedBytes(raw) if raw is not None else _TextBytes(self._stream)


class _InheritedBytes(io.RawIOBase):
    """The shell's own stream's bytes, as `_Inherited` hands them on: closing them
    (`sys.stdout.buffer.close()`) ends the command's use, not the stream under them."""

    def __init__(self, raw: Any) -> None:
        super().__init__()
        self._raw = raw

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        written: int = self._raw.write(data)
        return written

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        self._raw.flush()


class _TextBytes(io.RawIOBase):
    """Bytes written to a stream that has only text (a caller's io.StringIO): each byte that is
    not UTF-8 kept as its escape, as the shell's own output is (runtime/commands.py `_emit`)."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._stream.write(chunk.decode("utf-8", "surrogateescape"))
        return len(chunk)


@contextmanager
def _as_process(ctx: CommandContext, argv: list[str], path0: str | None) -> Iterator[tuple[Any, Any]]:
    """The interpreter's process state set for one `python` command, and put back."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    saved_main = sys.modules.get("__main__")
    saved_environ = dict(os.environ)
    saved_cwd = os.getcwd()
    out: io.TextIOBase
    err: io.TextIOBase
    if INHERITS_STREAMS.get():
        out, err = _Inherited(sys.stdout), _Inherited(sys.stderr)
    else:
        out, err = _Captured(), _Captured()
    # A process starts with no event loop running: the shell's loop and task are set aside, so
    # `asyncio.run` works in the program and a plain `runtime.tools` call waits for its answer.
    outer = asyncio.events._get_running_loop()
    task = asyncio.current_task(outer) if outer is not None else None
    if task is not None:
        asyncio.tasks._leave_task(outer, task)
    asyncio.events._set_running_loop(None)
    try:
        os.chdir(ctx.cwd)
        os.environ.clear()
        os.environ.update(exported_env(ctx.env))
        sys.argv = argv
        if path0 is not None:
            sys.path.insert(0, path0)
        sys.stdin = _Input(ctx.stdin)
        sys.stdout, sys.stderr = out, err
        yield out, err
    finally:
        for stream in (out, err):  # what the code wrote, out before the shell's next words
            try:
                stream.flush()
            except (OSError, ValueError):
                pass  # the code closed the stream under it
        asyncio.events._set_running_loop(outer)
        if task is not None:
            asyncio.tasks._enter_task(outer, task)
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        else:
            sys.modules.pop("__main__", None)
        os.environ.clear()
        os.environ.update(saved_environ)
        try:
            os.chdir(saved_cwd)
        except OSError:
            pass  # the code removed the folder it was started in


def _exit_status(code: object, err: IO[str]) -> int:
    """sys.exit's argument as a process's exit status."""
    if code is None:
        return 0
    if isinstance(code, bool) or not isinstance(code, int):
        print(code, file=err)
        return 1
    return code & 0xFF


def _print_traceback(exc: BaseException, err: IO[str]) -> None:
    """The traceback a process would print: frames of this runner and of runpy left out."""
    tb = exc.__traceback__
    skip = (_print_traceback.__code__.co_filename, runpy.run_path.__code__.co_filename)
    while tb is not None and tb.tb_frame.f_code.co_filename in skip:
        tb = tb.tb_next
    err.write("".join(traceback.format_exception(type(exc), exc, tb)))


def _raised_by_runpy(exc: BaseException) -> bool:
    """Whether runpy itself raised `exc` (the module was not found), not the module's code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename == runpy.run_module.__code__.co_filename


def _fresh_main(filename: str) -> types.ModuleType:
    main = types.ModuleType("__main__")
    main.__file__ = filename
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    return main


def _run_source(source: str, filename: str) -> None:
    code = compile(source, filename, "exec", dont_inherit=True)
    main = _fresh_main(filename)
    if filename.startswith("<"):
        del main.__file__
    exec(code, main.__dict__)


def run_python(kind: str, target: str, argv: list[str], ctx: CommandContext) -> ExecResult:
    """Run one `python` command line, already parsed."""
    path0: str | None
    if kind == "file":
        path0 = os.path.dirname(os.path.join(ctx.cwd, target)) or ctx.cwd
    else:
        path0 = ctx.cwd  # -c, -m and stdin put the current folder first, as CPython does
    status = 0
    with _as_process(ctx, argv, path0) as (out, err):
        try:
            if kind == "c":
                _run_source(target, "<string>")
            elif kind == "stdin":
                _run_source(ctx.stdin, "<stdin>")
            elif kind == "m" and target == "pip":
                python_module_pip(argv[1:])
            elif kind == "m":
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                path = os.path.join(ctx.cwd, target)
                if not os.path.exists(path):
                    err.write(f"python: can't open file {path!r}: [Errno 2] No such file or directory\n")
                    status = 2
                else:
                    runpy.run_path(path, run_name="__main__")
        except SystemExit as stop:
            status = _exit_status(stop.code, err)
        except ImportError as exc:
            if kind == "m" and str(exc).startswith("No module named") and _raised_by_runpy(exc):
                err.write(f"python: No module named {target}\n")
            else:
                _print_traceback(exc, err)
            status = 1
        except Exception as exc:  # the code's own error: a process prints it and exits 1
            _print_traceback(exc, err)
            status = 1
        # BaseExceptions other than SystemExit (the host's stop, KeyboardInterrupt) pass on.
    return ExecResult(stdout=out.getvalue(), stderr=err.getvalue(), exit_code=status)


def _version() -> str:
    v = sys.version_info
    return f"Python {v.major}.{v.minor}.{v.micro}\n"


class PythonCommand:
    """`python` / `python3`: this interpreter, in-process."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def execute(self, args: list[str], ctx: CommandContext) -> ExecResult:
        try:
            kind, target, argv = _parse(args)
        except _Exit as problem:
            return ExecResult(stderr=str(problem), exit_code=problem.status)
        if kind == "version":
            return ExecResult(stdout=_version())
        if kind == "help":
            return ExecResult(stdout=USAGE)
        return run_python(kind, target, argv, ctx)


def run_python_script(path: str, args: list[str], ctx: CommandContext) -> ExecResult:
    """A file with a Python shebang run by its path (`./tool.py a b`)."""
    return run_python("file", path, [path, *args], ctx)


def is_python_shebang(first_line: str) -> bool:
    """`#!/usr/bin/env python3`, `#!/usr/bin/python`, `#!/usr/bin/env -S python3 -u`..."""
    if not first_line.startswith("#!"):
        return False
    words = first_line[2:].split()
    return any(os.path.basename(w).startswith("python") for w in words[:3])


# -- pip -------------------------------------------------------------------------


def _distributions() -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions by canonical name (the first on sys.path wins, as for pip)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_canonical(name), dist)
    return found


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _requirement_names(dist: importlib.metadata.Distribution) -> set[str]:
    """The canonical names a distribution requires, its extras' left out (as pip show)."""
    names = set()
    for requirement in dist.requires or []:
        found = _NAME.match(requirement)
        if found and "extra ==" not in requirement and 'extra=="' not in requirement:
            names.add(_canonical(found.group()))
    return names


def _pip_list(args: list[str]) -> ExecResult:
    dists = sorted(_distributions().values(), key=lambda d: _canonical(d.metadata["Name"]))
    if "--format=freeze" in args or "freeze" in args[:1]:
        return ExecResult(stdout="".join(f"{d.metadata['Name']}=={d.version}\n" for d in dists))
    if "--format=json" in args:
        import json

        return ExecResult(stdout=json.dumps([{"name": d.metadata["Name"], "version": d.version} for d in dists]) + "\n")
    width = max([len("Package"), *(len(d.metadata["Name"]) for d in dists)])
    vwidth = max([len("Version"), *(len(d.version) for d in dists)])
    lines = [f"{'Package':<{width}} {'Version':<{vwidth}}", f"{'-' * width} {'-' * vwidth}"]
    lines += [f"{d.metadata['Name']:<{width}} {d.version:<{vwidth}}".rstrip() for d in dists]
    return ExecResult(stdout="\n".join(lines) + "\n")


def _pip_show(names: list[str]) -> ExecResult:
    if not names:
        return ExecResult(stderr="ERROR: Please provide a package name or names.\n", exit_code=1)
    dists = _distributions()
    blocks: list[str] = []
    missing: list[str] = []
    for name in names:
        dist = dists.get(_canonical(name))
        if dist is None:
            missing.append(name)
            continue
        meta = dist.metadata
        requires = sorted(_requirement_names(dist))
        required_by = sorted(other.metadata["Name"] for other in dists.values()
                             if _canonical(meta["Name"]) in _requirement_names(other))
        location = ""
        files = dist.files
        if files:
            location = str(files[0].locate()).rsplit("/" + str(files[0]), 1)[0]
        fields = [
            ("Name", meta["Name"]), ("Version", dist.version), ("Summary", meta.get("Summary", "")),
            ("Home-page", meta.get("Home-page", "")), ("Author", meta.get("Author", "")),
            ("Author-email", meta.get("Author-email", "")),
            ("License", meta.get("License-Expression") or meta.get("License", "")),
            ("Location", location), ("Requires", ", ".join(requires)), ("Required-by", ", ".join(required_by)),
        ]
        blocks.append("".join(f"{k}: {v or ''}\n" for k, v in fields))
    out = "---\n".join(blocks)
    err = "".join(f"WARNING: Package(s) not found: {name}\n" for name in missing)
    return ExecResult(stdout=out, stderr=err, exit_code=1 if missing and not blocks else 0)


def pip_report(sub: str, rest: list[str]) -> ExecResult:
    """`pip list`, `pip freeze` and `pip show` (runtime/_shellpip.py has the rest of pip)."""
    rest = [a for a in rest if a not in ("-q", "--quiet", "-v", "--verbose", "--no-color", "--disable-pip-version-check")]
    if sub == "list":
        return _pip_list(rest)
    if sub == "freeze":
        return _pip_list(["freeze"])
    return _pip_show([a for a in rest if not a.startswith("-")])


def python_module_pip(argv: list[str]) -> Any:
    """`python -m pip ...`: runpy would look for a pip package the sandbox does not ship."""
    from runtime import _shellpip

    return _shellpip.python_module_pip(argv)
