"""The guest's main loop, in two halves.

`init()` runs once, at build time, before the interpreter's memory is
snapshotted: everything it imports is free for every later run.
`run()` runs once per fresh instance: it reads the request from the host,
calls the entrypoint and hands back the response.

The request (a dict here) and the reply's prefixes are wasmrun/abi.py's
GuestRequest and REPLY_*; tests/sandbox/test_abi_drift.py checks this file against them.

The per-run path is kept short on purpose: every object it touches costs the
run a copy-on-write page fault, so it has no import statements (modules are
bound at init) and reuses JSON coders built at init.
"""

from __future__ import annotations

import _json
import _sitebuiltins
import ast
import asyncio
import builtins
import codecs
import importlib
import importlib.util
import json
import linecache
import os
import re
import sys
import traceback
import types

import _wasmrun
from runtime import _compat, _contract, _display, _figures, _hints, _seeds, _skills, _stdio, _values

# Commonly used modules, imported before the snapshot so runs get them free.
HOT_MODULES = (
    "base64", "bisect", "calendar", "collections", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "enum", "fnmatch", "fractions", "functools",
    "hashlib", "heapq", "html", "io", "itertools", "json", "linecache", "math",
    "operator", "os", "pathlib", "pprint", "random", "re", "shlex", "statistics",
    "string", "struct", "textwrap", "time", "traceback", "types", "typing",
    "unicodedata", "urllib.parse", "uuid", "zoneinfo",
    "runtime", "runtime._contract", "runtime._values", "runtime.blobs", "runtime.log", "runtime.http", "urllib.request",
    "runtime.tools",  # code mode: a run that calls the client's tools imports it first (3.5 ms from the zip)
    # Many packages ask for their own version at import (operator-added ones under /packages).
    "importlib.metadata", "zipfile",
    # The shell (runtime.commands: just-bash and its commands, ~0.6 s to import from bytecode).
    "runtime.commands",
)
# Codecs that text-reading code names (a CSV's BOM, Latin-1 and Windows
# exports): looked up at init, so a run's first decode finds them in the
# codec cache instead of importing them from the stdlib zip (about 4 ms a run).
HOT_CODECS = ("utf-8", "utf-8-sig", "latin-1", "ascii", "utf-16", "cp1252")
DEFAULT_FUNCTION = "main"
WORKSPACE = "/workspace"
# Every run's environment before what it was granted: its home is its writable folder,
# so Path.home() and expanduser("~/...") work as natively (WASI has no passwd database).
BASE_ENV = {"HOME": WORKSPACE}
# Where each run starts (`start_in`).
_start_folder = WORKSPACE
RUN_MODULE = "run_code"
RUN_FILENAME = "<run_code>"
# The code's name in tracebacks: in a session each run is a cell of its own
# (`<cell 3>`), so a function an earlier run defined shows that run's lines.
_run_filename = RUN_FILENAME
_cells = 0

# The C scanner and encoder themselves, skipping json's Python layers. The
# request is the host's own compact JSON; the output encoder's circular-
# reference markers empty themselves after each successful call.
def _not_serialisable(value: object) -> object:
    """The C encoder's hook: numpy arrays and scalars of numbers as Python numbers and
    lists (`np.int64(3)` is no int); anything else is TypeError, and `_serialise`
    then walks the value with `_values` (pandas objects, dates, NaN, no JSON form)."""
    kind = type(value)
    try:
        if kind.__module__.split(".", 1)[0] == "numpy" and getattr(getattr(value, "dtype", None), "kind", "O") in "biuf":
            return value.tolist()
    except Exception:  # a type that only says it is numpy's, or whose __module__ raises: _values' to walk
        pass
    raise TypeError(f"Object of type {kind.__name__} is not JSON serializable")


_scan_request = _json.make_scanner(json.JSONDecoder())
# Compact separators: the host passes these bytes on as they are (checked, never
# re-encoded), so what the guest writes is what the client gets.
_encode_chunks = _json.make_encoder(
    {}, _not_serialisable, _json.encode_basestring, None, ":", ",", False, False, False
)
_encode_error = json.JSONEncoder().encode

# Sources without a file, registered with linecache only when a traceback
# needs them (keeping the common path from touching linecache at all).
_SOURCES: dict[str, str] = {}


def init() -> None:
    _stdio.install()
    # CPython's WASI build lowers the recursion limit to 600 for WASI's small
    # default stacks; the guest has a native-sized C stack (8 MiB, see
    # build.LINK_FLAGS) and wasm stack (engine.py), so the native 1000 holds,
    # and with it the compiler's limits (3x this) on deeply nested code.
    sys.setrecursionlimit(1000)
    # `site` is not imported (isolated start-up), but users call exit()/quit().
    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    builtins.help = _sitebuiltins._Helper()  # `site` gives it natively; models call help(obj)
    os.environ.update(BASE_ENV)  # in the image: a run pays nothing for it
    # Before http.client and urllib.request import: they define HTTPS classes only when ssl imports.
    _compat.install_ssl()
    for name in HOT_MODULES:
        importlib.import_module(name)
    for name in HOT_CODECS:
        codecs.lookup(name)
    _compat.install()
    _compat.install_asyncio()
    _skills.install()
    _display.install()
    importlib.import_module("runtime.http").install_urllib()
    _seeds.init()  # after numpy's import (the data image's prelude imports it first)
    _to_workspace()  # where the image is made with it mounted (the data image's): runs start there


class _Failure(Exception):
    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_
        self.message = message


def _harness_frame(module: str) -> bool:
    return module == __name__ or module.startswith("asyncio.")


def _format_exception(exc: BaseException) -> str:
    for filename, source in _SOURCES.items():
        lines = source.splitlines(True)
        # As linecache reads a file: its last line ends with a newline. Code sent without
        # one (most is) otherwise got its carets one column right on 3.11 (`1 / 0` as the
        # last line: ` ~~^~~`).
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        linecache.cache[filename] = (len(source), None, lines, filename)
    tb = exc.__traceback__
    # Drop our own frames (and asyncio.run's, for async code): users should
    # see their code, not the harness.
    while tb is not None and _harness_frame(tb.tb_frame.f_globals.get("__name__") or ""):
        tb = tb.tb_next
    _drop_stop_handler(tb)
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def _drop_stop_handler(tb) -> None:
    """On the data image a stop request is raised by a signal handler of ours
    (runtime/_door.py, the `_wasmrun` module there): the last frame, not the user's."""
    if tb is None:
        return
    while tb.tb_next is not None and tb.tb_next.tb_next is not None:
        tb = tb.tb_next
    if tb.tb_next is not None and tb.tb_next.tb_frame.f_globals.get("__name__") == "_wasmrun":
        tb.tb_next = None


# CPython 3.15's traceback (the data image runs without `site`) adds advice to every
# ModuleNotFoundError (site-packages, a virtual environment) that does not apply in
# the sandbox, where the hint below says what does; it is left out.
_NO_SITE_ADVICE = ". Site initialization is disabled"


def _describe(exc: BaseException) -> str:
    """The guest's traceback as Python prints it, plus a hint line when there is one."""
    text = _format_exception(exc)
    if isinstance(exc, ModuleNotFoundError) and _NO_SITE_ADVICE in text:
        head, _, advice = text.partition(_NO_SITE_ADVICE)
        text = head + advice.partition("\n")[1] + advice.partition("\n")[2]
    hint = _hints.hint(exc)
    return f"{text}\n{hint}" if hint else text


def _prepare(request: dict) -> None:
    # The snapshot's environment holds only HOME; touching os.environ costs a run
    # dozens of page faults, so only do it when there is something to set.
    env = request.get("env")
    if env:
        os.environ.update(env)
    # The snapshot baked in one random state; every run gets its own from the
    # host (_seeds.py). A session's runs keep theirs (a seed the code set holds),
    # except its first run and a fork's first run (`reseed`).
    if request.get("reseed", True):
        _seeds.fresh(request.get("session", False))
    _skills.FINDER.mount(request.get("skills") or {})
    _forget_metadata_files()
    installed = sys.modules.get("runtime.packages")  # an earlier run of the session installed some
    if installed is not None and installed._moved:
        installed._settle()
    for folder in request.get("sys_path") or ():
        if folder not in sys.path:  # a session's runs share sys.path
            sys.path.append(folder)
    _to_workspace()


# importlib.metadata's path objects an earlier run made: kept, never freed (see below).
_stale_metadata_paths: list[object] = []


def _forget_metadata_files() -> None:
    """importlib.metadata caches a path object per sys.path entry (FastPath), and one for a
    zip (the standard library's, a data image's) holds the zip's open file. A run starts from
    a memory image whose file descriptors are not open in this instance: a cached zip would
    read a closed or another file (EBADF in `pip list`, `importlib.metadata.version`). The
    cache is emptied at each run's start; its old objects are kept referenced, since freeing
    them would close a descriptor that is not theirs."""
    metadata = sys.modules.get("importlib.metadata")
    fast_path = getattr(metadata, "FastPath", None)
    clear = getattr(getattr(fast_path, "__new__", None), "cache_clear", None)
    if clear is None or not fast_path.__new__.cache_info().currsize:
        return
    for root in {entry for entry in sys.path if isinstance(entry, str)}:
        cached = fast_path(root)
        if "joinpath" in vars(cached):  # set when it opened the entry as a zip
            _stale_metadata_paths.append(cached)
    clear()


def start_in(folder: str) -> None:
    """This session's runs start in `folder` from now on, not in /workspace: an E2B
    sandbox's in /home/user (the same folder, mounted twice) or its context's folder
    under it (wasmrun/e2b calls it once per session; a fork keeps it)."""
    global _start_folder
    os.chdir(folder)  # raises as chdir does when there is no such folder
    _start_folder = os.getcwd()


def _to_workspace() -> None:
    """The run starts in /workspace (or where `start_in` said). The interpreter keeps its
    working directory as a path (WASI has none), and moving there checks the path with
    the host (a WASI call, 40-70 us): skipped when it is there already, as every run of
    an image made with /workspace mounted is (`init` moves there; a session's code may
    have moved on). A start folder since removed: /workspace."""
    try:
        if os.getcwd() != _start_folder:
            _compat.real_chdir(_start_folder)  # resolved already: no need of os.chdir's realpath
    except OSError:
        try:
            _compat.real_chdir(WORKSPACE)
        except OSError:
            pass


_TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_CO_COROUTINE = 0x80  # inspect.CO_COROUTINE: the code awaits at top level
_CO_VARARGS = 0x04  # inspect.CO_VARARGS


def _exec_code(source: str, namespace: dict) -> tuple[bool, object, object]:
    """Run the code as a script; (True, value, statement) when its last statement
    is an expression (its value, as a notebook cell shows it), else (False, None,
    statement): the last statement's syntax tree, for `_contract`'s warnings.
    `await` at top level works too (the script then runs under asyncio.run)."""
    tree = _compile(source, "exec", ast.PyCF_ONLY_AST | _TOP_LEVEL_AWAIT)
    final = tree.body[-1] if tree.body else None
    last = None
    if isinstance(final, ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    _run_code(_compile(tree, "exec", _TOP_LEVEL_AWAIT), namespace)
    if last is None:
        return False, None, final
    return True, _run_code(_compile(last, "eval", _TOP_LEVEL_AWAIT), namespace), final


def _exec_module(source: str, namespace: dict) -> None:
    """Run code that defines its entrypoint: compiled straight from source
    (the syntax tree round trip of `_exec_code` costs a run about 2 ms)."""
    _run_code(_compile(source, "exec", _TOP_LEVEL_AWAIT), namespace)


# A top-level `def main` / `async def main`: the code follows the main(args)
# contract, and only main's return value matters.
_DEFINES_MAIN = re.compile(r"^(?:async[ \t]+)?def[ \t]+main\b", re.MULTILINE)


_Coroutine = types.CoroutineType


def _compile(source, mode: str, flags: int):
    try:
        return compile(source, _run_filename, mode, flags, dont_inherit=True)
    except MemoryError:
        # CPython's parser reports its own stack overflow as MemoryError; it
        # says nothing about the run's memory limit.
        raise _Failure(
            "SyntaxError", "the code is nested too deeply for Python's parser; flatten the expression"
        ) from None


def _run_code(code, namespace: dict):
    if code.co_flags & _CO_COROUTINE:
        return asyncio.run(eval(code, namespace))
    return eval(code, namespace)


def _call_entrypoint(request: dict, warnings: list[str]):
    """The run's output: the entrypoint's return value (awaited if it is a
    coroutine), or, for code without the default `main`, the script's value.
    Traps that leave the output null without an error add to `warnings`
    (checked only when the output is null: a run with a value pays nothing)."""
    name = request["function"]
    if request["kind"] == "code":
        source = request["code"]
        # A session's runs share one module, as a notebook's cells share globals.
        session = request.get("session", False)
        module = sys.modules.get(RUN_MODULE) if session else None
        if module is None:
            module = types.ModuleType(RUN_MODULE)
            module.__file__ = RUN_FILENAME
            sys.modules[RUN_MODULE] = module
        if session:
            global _run_filename, _cells
            _cells += 1
            _run_filename = f"<cell {_cells}>"
        _SOURCES[_run_filename] = source
        if name != DEFAULT_FUNCTION or _DEFINES_MAIN.search(source):
            _exec_module(source, module.__dict__)
            fn = getattr(module, name, None)
        else:
            has_value, value, last = _exec_code(source, module.__dict__)
            # In a session a `main` from an earlier run is not this script's entrypoint.
            fn = None if session else getattr(module, name, None)
            if fn is None:  # a plain script
                if has_value:  # shown as a notebook shows a cell's value
                    _display.result(value)
                if value is None:
                    _contract.plain_script_null(module.__dict__, source, last, warnings)
                if request.get("args"):
                    warnings.append(_contract.ARGS_UNUSED)
                return value
    else:
        module = importlib.import_module("skills." + request["skill"])
        fn = getattr(module, name, None)
    if not callable(fn):
        where = "the code" if request["kind"] == "code" else f"skill {request['skill']!r}"
        message = f"{where} defines no function {name!r}"
        raise _Failure("EntrypointNotFound", message + _contract.candidates(vars(module), name))
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_argcount == 0 and not code.co_flags & _CO_VARARGS:
        value = fn()  # def main(): a script's own habit; it has no use for args
        if request.get("args"):
            warnings.append(_contract.no_parameter(name))
    else:
        value = fn(request.get("args") or {})
    if type(value) is _Coroutine:  # async def main(args)
        value = asyncio.run(value)
    if value is None and request["kind"] == "code":
        warnings.append(_contract.returned_none(name))
    return value


def _serialise(value, warnings: list[str] | None = None) -> bytes:
    """The return value as UTF-8 JSON, or InvalidOutput saying why it has none.
    Plain JSON takes the C encoder alone; a value it refuses (a NaN, a pandas object,
    a date, an object with no JSON form) is walked into plain JSON by `_values`,
    whose warnings (where NaN became null, what became text) join `warnings`."""
    try:
        return "".join(_encode_chunks(value, 0)).encode("utf-8")
    except (ValueError, TypeError, RecursionError):
        pass
    if warnings is not None:
        try:
            value, found = _values.plain(value)
        except _values.TooDeep:
            raise _Failure("InvalidOutput", "the return value is not JSON-serialisable: it is nested too deeply"
                           " (or holds itself)") from None
        warnings.extend(found)
    try:
        return "".join(_encode_chunks(value, 0)).encode("utf-8")
    except UnicodeEncodeError:
        why = "it contains a string that is not valid Unicode (a lone surrogate)"
    except RecursionError:
        why = "it is nested too deeply"
    except ValueError as exc:  # NaN/Infinity, an int too long to write out
        why = str(exc)
        if "float" in why:
            why = "NaN and Infinity have no JSON form (" + why + ")"
    except TypeError as exc:  # a type JSON has no form for; a key that is not a str
        why = str(exc)
    raise _Failure("InvalidOutput", "the return value is not JSON-serialisable: " + why)


def _text(value: object) -> str:
    # Exception text may hold lone surrogates, which have no UTF-8 (nor JSON) form.
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def _failed(type_: str, message: str) -> bytes:
    return b"F" + _encode_error({"type": _text(type_), "message": _text(message)}).encode("utf-8")


def _compile_skills(request: dict) -> list[str]:
    """Compile (never run) the mounted skills' modules into the bytecode cache.

    A file that cannot be read or compiled (a syntax error, a dangling
    symlink) is skipped: a run importing it reports the error itself."""
    compiled = []
    folders = [f"/skills/{name}" for name in request.get("skills") or {}]
    while folders:  # a loop, not os.walk's recursion: a skill's tree may be deep
        try:
            with os.scandir(folders.pop()) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            elif entry.name.endswith(".py") and _is_regular_file(entry):
                try:
                    _compile_one(entry.path)
                except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
                    continue
                compiled.append(entry.path)
    return compiled


def _is_regular_file(entry: os.DirEntry) -> bool:
    """Never open a FIFO or device (it could block); a link that leads
    nowhere (or out of the mount: PermissionError) is no file either."""
    try:
        return entry.is_file()
    except OSError:
        return False


def _compile_one(path: str) -> None:
    """What py_compile.compile does, except that only missing cache folders
    are created: a skill's own folder in the cache is its mount point, which
    exists and cannot be created (py_compile's os.makedirs fails on it, so
    modules at a skill's root were never compiled)."""
    import importlib._bootstrap_external as bootstrap

    cfile = importlib.util.cache_from_source(path)
    with open(path, "rb") as f:
        source = f.read()
    st = os.stat(path)
    code = compile(source, path, "exec", dont_inherit=True)
    data = bootstrap._code_to_timestamp_pyc(code, st.st_mtime, st.st_size)
    missing = []  # created top-down in a loop (os.makedirs recurses: trees may be deep)
    folder = os.path.dirname(cfile)
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for folder in reversed(missing):
        try:
            os.mkdir(folder)
        except FileExistsError:
            pass
    with open(cfile, "wb") as f:
        f.write(data)


def _execute(request: dict) -> bytes:
    """The response: b"C" + the output's JSON, or b"F" + {"type", "message"} as JSON;
    b"W" + warnings' JSON + b"\n" before the b"C" when the run contract was likely misread."""
    try:
        if request["kind"] == "compile":
            return b"C" + _serialise(_compile_skills(request))
        _prepare(request)
        warnings: list[str] = []
        value = _call_entrypoint(request, warnings)
        output = _serialise(value, warnings)
        warnings.extend(_display.end_run())
        if warnings:  # b"W" + a JSON list of strings + "\n" (compact JSON has no raw newline)
            return b"W" + _serialise([_text(w) for w in warnings]) + b"\nC" + output
        return b"C" + output
    except _Failure as f:
        return _failed(f.type, f.message)
    except SystemExit as exc:
        return _failed("SystemExit", f"the code called exit({exc.code!r})")
    except BaseException as exc:  # the user's own exception, whatever it is
        # Its own class name, whatever it is: the host alone decides its own
        # error types (a MemoryError here is the guest's, see sandbox/errors.py).
        return _failed(type(exc).__name__, _describe(exc))
    finally:
        _display.end_run()  # a session's next run counts its displays afresh
        if request.get("session"):  # its memory is kept: no file it holds may outlive the run
            _figures.release_fonts()


def run() -> None:
    try:
        request, _ = _scan_request(_wasmrun.request().decode("utf-8"), 0)
        response = _execute(request)
    except BaseException as exc:  # never trap: the host gets a reply whatever failed here
        try:
            response = _failed("GuestCrashed", "the guest runtime failed: " + _text(type(exc).__name__))
        except BaseException:
            response = b'F{"type":"GuestCrashed","message":"the guest runtime failed"}'
    try:  # text layers write through; this only matters if the user replaced them
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    # What is left in the output buffer the host reads from memory itself.
    _wasmrun.respond(response)
