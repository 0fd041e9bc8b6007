"""Command lines in the sandbox: a bash shell over the run's own files.

    from runtime import commands
    status = commands.run("ls -la | grep '.csv' && wc -l data/*.csv")
    status = commands.run(["grep", "-rn", "TODO", "."], cwd="/workspace/src")

WASI runs no processes, so the shell runs in this interpreter: bash syntax and
the common commands come from the just-bash library (a pure-Python port of
Vercel's just-bash, Apache-2.0, pinned and built into both images), over the
run's real filesystem (runtime/_shellfs.py). `python`/`python3` run on this
interpreter and `pip` reports its packages (runtime/_shellpy.py). Each call is
a fresh shell (`cd`, variables and functions last for that call), as
`bash -c` would be; files it writes are the run's files. docs/commands.md lists
the commands and what differs from bash.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from runtime import _shelljb  # noqa: F401  (first: loads just-bash without its network module)
from just_bash.commands import create_command_registry  # noqa: E402
from just_bash.interpreter import Interpreter, InterpreterState, ShellOptions, VariableStore  # noqa: E402
from just_bash.interpreter.errors import ErrexitError, ExecutionLimitError, ExitError  # noqa: E402
from just_bash.parser import parse  # noqa: E402
from just_bash.parser.parser import ParseException  # noqa: E402
from just_bash.types import Command, ExecResult, ExecutionLimits  # noqa: E402

from runtime import _shellfs, _shellpy  # noqa: E402

__all__ = ["run"]

# just-bash's defaults (100 function levels, 100,000 commands, 10,000 loop iterations) are
# for a host with no other bound; in the sandbox the run's own time, CPU and memory limits
# are the bounds, so loops and counts are allowed what a script over a real folder needs.
# Function depth stays low: each level is several Python frames, and a fork bomb
# (`:(){ :|:& };:`) is unbounded recursion, which must end in the shell's error, not in
# the interpreter's stack.
LIMITS = ExecutionLimits(
    max_call_depth=100,
    max_command_count=10_000_000,
    max_loop_iterations=10_000_000,
    max_awk_iterations=10_000_000,
    max_sed_iterations=10_000_000,
)
# What a missing command's one-line hint says: the shell has no processes to run.
_HINTS = {
    "curl": "the shell has no network: fetch URLs from Python with runtime.http (the host's egress)",
    "wget": "the shell has no network: fetch URLs from Python with runtime.http (the host's egress)",
    "yes": "there is no `yes`: generate lines with `seq`, `printf` or python -c",
    "apt": "nothing can be installed in the sandbox; the operator adds Python packages (`wasmrun packages add`)",
    "apt-get": "nothing can be installed in the sandbox; the operator adds Python packages (`wasmrun packages add`)",
    "sudo": "there is no sudo: commands run as the sandbox's only user",
    "pip3.11": "use `pip` (list, freeze, show)",
    "node": "only Python runs in the sandbox: use `python`",
    "npm": "only Python runs in the sandbox: use `python`",
    "git": "there is no git in the sandbox",
}
_GENERAL_HINT = (
    "the sandbox runs no programs: only the shell's own commands (`help` lists them), "
    "`python` and `pip`"
)
_SHELL_DEFAULTS = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "SHELL": "/bin/bash",
    "USER": "user",
    "SHLVL": "1",
    "BASH_VERSION": "5.0.0(1)-release",
}


def _registry() -> dict[str, Command]:
    commands: dict[str, Command] = create_command_registry(include_network=False)
    for name in ("python", "python3"):
        commands[name] = _shellpy.PythonCommand(name)
    for name in ("pip", "pip3"):
        commands[name] = _shellpy.PipCommand(name)
    return commands


def _load_all(commands: dict[str, Command]) -> None:
    """Each command's module imported now: just-bash loads one on its first use, which
    would cost a run its import (and, on the data image, its compile from source).
    Imported with this module, in the image, they are free for every run."""
    from just_bash.commands import registry

    for name, command in commands.items():
        definition = getattr(command, "_def", None)
        if definition is None or name in registry._cache:
            continue
        loading = definition.load()
        try:
            loading.send(None)  # the loaders import and return; they never wait
        except StopIteration as done:
            registry._cache[name] = done.value
        else:
            loading.close()


_COMMANDS = _registry()
_load_all(_COMMANDS)
_FS = _shellfs.RealFs()


def _emit(stream: Any, text: str) -> None:
    """Text the shell produced, onto one of this process's streams. Bytes that are not
    UTF-8 (a binary file cat'ed) reach it as U+FFFD, as on a UTF-8 terminal."""
    if not text:
        return
    try:
        stream.write(text)
    except UnicodeEncodeError:
        stream.write(text.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))


class _Shell(Interpreter):
    """just-bash's interpreter, with what the sandbox adds: the output of each top-level
    command written as it ends, scripts with a Python shebang run by `python`, and a
    hint after `command not found`."""

    def __init__(self, *args: Any, top: frozenset[int] = frozenset(), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._top = top  # id() of the statements whose output is written when they end

    async def execute_statement(self, node: Any) -> ExecResult:
        result: ExecResult = await super().execute_statement(node)
        if id(node) in self._top and self._state.call_depth == 0:
            _emit(sys.stdout, result.stdout)
            _emit(sys.stderr, result.stderr)
            result = ExecResult(stdout="", stderr="", exit_code=result.exit_code, env=result.env)
        return result

    async def _exec_fn(self, script: str, env: dict[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        """`bash -c`, `xargs`, `env CMD`, `timeout`...: as just-bash's own (interpreter.py
        `_exec_fn`), with a sub-shell of this class so the sandbox's additions hold there too."""
        if not (env or cwd):
            return await super()._exec_fn(script, env, cwd)
        new_env = self._state.env.copy() if isinstance(self._state.env, VariableStore) else VariableStore(self._state.env)
        if env:
            new_env.update(env)
        options = ShellOptions(**vars(self._state.options))
        state = InterpreterState(
            env=new_env,
            cwd=cwd or self._state.cwd,
            previous_dir=self._state.previous_dir,
            functions=dict(self._state.functions),
            start_time=self._state.start_time,
            options=options,
            fd_table=self._state.fd_table.clone(),
        )
        sub = _Shell(fs=self._fs, commands=self._commands, limits=self._limits, state=state, fetch=self._fetch)
        try:
            return await sub.execute_script(parse(script))
        except (ExitError, ErrexitError) as e:
            return ExecResult(stdout=e.stdout, stderr=e.stderr, exit_code=e.exit_code)

    async def _try_execute_vfs_script(self, cmd_name: str, args: list[str], stdin: str) -> ExecResult:
        path = self._fs.resolve_path(self._state.cwd, cmd_name) if "/" in cmd_name else None
        if path is not None and os.path.isfile(path):
            first = _first_line(path)
            from just_bash.types import CommandContext

            ctx = CommandContext(fs=self._fs, cwd=self._state.cwd, env=self._state.env, stdin=stdin,
                                 limits=self._limits)
            if _shellpy.is_python_shebang(first):
                return _shellpy.run_python_script(path, args, ctx)
            # WASI keeps no permission bits, so a file is run by its path without an x bit
            # (a chmod +x in an earlier run could not be known); a shell script is its text.
            _shellfs._modes.setdefault(path, 0o755)
        result: ExecResult = await super()._try_execute_vfs_script(cmd_name, args, stdin)
        if result.exit_code == 127 and result.stderr.endswith("command not found\n"):
            hint = _HINTS.get(cmd_name, _GENERAL_HINT)
            result = ExecResult(stdout=result.stdout, stderr=f"{result.stderr}hint: {hint}\n", exit_code=127)
        return result


def _first_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.readline(256).decode("utf-8", "replace")
    except OSError:
        return ""


def _quote(word: str) -> str:
    """One argv item as one bash word, with nothing expanded."""
    return "'" + word.replace("'", "'\\''") + "'"


def _script(command: str | Sequence[str]) -> str:
    if isinstance(command, str):
        script = command
    elif isinstance(command, (bytes, bytearray)):
        raise TypeError("command must be a str (a bash command line) or a sequence of str (argv), not bytes")
    elif isinstance(command, Sequence):
        words = list(command)
        if not words:
            raise ValueError("command: an empty argv list")
        for word in words:
            if not isinstance(word, str):
                raise TypeError(f"command: every argv item must be a str, not {type(word).__name__}")
        script = " ".join(_quote(w) for w in words)
    else:
        raise TypeError(f"command must be a str or a sequence of str, not {type(command).__name__}")
    if "\0" in script:
        raise ValueError("command: a NUL character cannot be part of a command line")
    return script


def _checked_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping of str to str, not {type(env).__name__}")
    out: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("env must map str to str")
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ValueError(f"env: invalid variable name or value: {key!r}")
        out[key] = value
    return out


def _checked_stdin(stdin: str | bytes | None) -> str:
    if stdin is None:
        return ""
    if isinstance(stdin, (bytes, bytearray)):
        return bytes(stdin).decode("utf-8", _shellfs.ENCODING_ERRORS)
    if isinstance(stdin, str):
        return stdin
    raise TypeError(f"stdin must be str or bytes, not {type(stdin).__name__}")


def _checked_cwd(cwd: str | None) -> str:
    if cwd is None:
        return os.getcwd()
    if not isinstance(cwd, str):
        raise TypeError(f"cwd must be a str, not {type(cwd).__name__}")
    if "\0" in cwd:
        raise ValueError("cwd: a NUL character cannot be part of a path")
    return _shellfs.normalize(os.path.join(os.getcwd(), cwd))


def _environment(extra: dict[str, str], cwd: str) -> VariableStore:
    env = VariableStore({**_SHELL_DEFAULTS, **os.environ, **extra, "PWD": cwd})
    for name in env:
        env.set_attribute(name, "x")  # all of it is the process's environment: exported
    env["?"] = "0"
    env["OPTIND"] = "1"
    return env


async def _execute(shell: _Shell, ast: Any) -> int:
    try:
        result: ExecResult = await shell.execute_script(ast)
    except ExitError as stop:
        result = ExecResult(stdout=stop.stdout, stderr=stop.stderr, exit_code=stop.exit_code)
    except ExecutionLimitError as limit:
        result = ExecResult(stdout=limit.stdout, stderr=f"{limit.stderr}bash: {limit}\n", exit_code=1)
    _emit(sys.stdout, result.stdout)
    _emit(sys.stderr, result.stderr)
    return result.exit_code


def _drive(coro: Any) -> int:
    """Run the shell's coroutine to its end on an event loop of its own (the sandbox's
    loop: runtime/_compat.py), even when called from code already inside a loop."""
    outer = asyncio.events._get_running_loop()
    loop = asyncio.new_event_loop()
    asyncio.events._set_running_loop(None)
    try:
        return int(loop.run_until_complete(coro))
    finally:
        loop.close()
        asyncio.events._set_running_loop(outer)


def run(
    command: str | Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | bytes | None = None,
) -> int:
    """Run a command line (a string: bash syntax) or an argv list (each item one word, no
    expansion) over the run's real files; the command's stdout goes to sys.stdout and its
    stderr to sys.stderr (as each top-level command ends); returns the exit code (0-255).
    cwd defaults to os.getcwd() (/workspace in a plain run, /home/user in an E2B session);
    env is added to os.environ for the command. A failing command is an exit code, never
    an exception; wrong argument types raise TypeError/ValueError."""
    script = _script(command)
    extra = _checked_env(env)
    text_in = _checked_stdin(stdin)
    folder = _checked_cwd(cwd)
    if not os.path.isdir(folder):
        _emit(sys.stderr, f"bash: cd: {folder}: No such file or directory\n")
        return 1
    try:
        ast = parse(script)
    except ParseException as problem:
        _emit(sys.stderr, f"bash: {problem}\n")
        return 2
    except RecursionError:
        _emit(sys.stderr, "bash: the command line is nested too deeply to parse\n")
        return 2
    state = InterpreterState(env=_environment(extra, folder), cwd=folder, previous_dir="", start_time=time.time())
    if text_in:
        state.group_stdin = text_in  # the first command's stdin (just-bash's group stdin)
    shell = _Shell(fs=_FS, commands=_COMMANDS, limits=LIMITS, state=state,
                   top=frozenset(id(s) for s in ast.statements))
    try:
        status = _drive(_execute(shell, ast))
    except RecursionError:
        _emit(sys.stderr, "bash: maximum nesting depth exceeded\n")
        return 2
    except MemoryError:
        _emit(sys.stderr, "bash: out of memory (the run's memory limit)\n")
        return 1
    except Exception as error:  # a fault in the shell itself: an exit status, as a crashed bash's
        _emit(sys.stderr, f"bash: internal error: {type(error).__name__}: {error}\n")
        return 1
    return status % 256
