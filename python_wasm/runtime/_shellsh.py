"""The shell as agent frameworks drive it: `sh`/`bash` themselves, `trap`, `&` and `wait`.

- `sh`/`bash` (and `dash`): `-c SCRIPT [NAME ARGS]`, `FILE ARGS`, `-s ARGS` or no argument
  (the script from stdin), with bash's option letters clustered or apart (`-lc`, `-ec`,
  `-euo pipefail -c`; `-e -u -x -f -C -o NAME` honoured, `-l -i -s -r -p`... accepted). The
  script is parsed whole (just-bash's own `bash` joined its lines with "; ", which broke
  every definition or loop spread over lines) and run in a shell of its own: the caller's
  exported variables and cwd, its own functions, options and traps, `exit` ending only it.
  A script run by its path (`./install.sh`, a `#!/bin/sh` or `#!/usr/bin/env bash` line or
  none) is the same.
- `trap ACTION SIG...`, `trap -p`, `trap -l`, `trap - SIG`: EXIT runs as the shell (the
  command line, a `sh -c` or a `( ... )`) ends, ERR after a failing command, as bash's,
  outside functions and substitutions. There are no signals in the sandbox: INT, TERM, HUP
  and the others are accepted and kept (`trap -p` shows them) and never run.
- `&`: a run has no processes, so a background command runs to its end where it stands;
  `$!` is its job's pid, `wait` (all, `PID`, `%N`, `-n`) gives its status, `jobs` lists
  nothing (every job has ended), `kill` of one is `No such process` (exit 1).

runtime/commands.py wires these into its interpreter (run_script, execute_statement).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.interpreter import InterpreterState, ShellOptions, VariableStore
from just_bash.types import ExecResult
# isort: on

SHELLS = ("sh", "bash", "dash")
# Where programs live on a Linux box: `/bin/ls` and `/usr/bin/env` name the shell's own commands.
BIN_DIRS = frozenset({"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin"})
FIRST_JOB_PID = 1000
# `sh` inside `sh`: each level is a new interpreter on the same Python stack, so a script
# that runs itself must stop at a bound of its own (bash's would fork until the box's limit).
MAX_SHELL_DEPTH = 24
nesting = [0]  # the levels running now (commands.py's _run_shell)

# `-o NAME` / `set -o NAME`: the ShellOptions field it sets (None: accepted, no effect here).
_OPTION_NAMES: dict[str, str | None] = {
    "errexit": "errexit", "nounset": "nounset", "xtrace": "xtrace", "pipefail": "pipefail",
    "noglob": "noglob", "noclobber": "noclobber", "verbose": "verbose", "allexport": "allexport",
    "posix": None, "emacs": None, "vi": None, "interactive-comments": None, "hashall": None,
    "braceexpand": None, "monitor": None, "notify": None, "noexec": None, "errtrace": None,
    "functrace": None, "history": None, "histexpand": None, "ignoreeof": None, "keyword": None,
    "physical": None, "privileged": None, "onecmd": None, "nolog": None,
}
_LETTERS = {"e": "errexit", "u": "nounset", "x": "xtrace", "f": "noglob", "C": "noclobber", "v": "verbose",
            "a": "allexport"}
# Letters bash takes that change nothing in a shell without a terminal or processes.
_ACCEPTED = set("ilsrpbhkmnBEHPT")
_LONG_ACCEPTED = {"--norc", "--noprofile", "--login", "--posix", "--noediting", "--restricted", "--verbose",
                  "--debugger", "--dump-strings", "--pretty-print"}

SIGNALS = ["HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2", "PIPE",
           "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG", "XCPU", "XFSZ",
           "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS"]
_PSEUDO = ("EXIT", "ERR", "DEBUG", "RETURN")


class Invocation:
    def __init__(self) -> None:
        self.script: str | None = None  # the -c text
        self.file: str | None = None
        self.name = ""
        self.args: list[str] = []
        self.options: dict[str, bool] = {}
        self.from_stdin = False


def parse_invocation(name: str, args: list[str]) -> Invocation | ExecResult:
    """bash's command line: options (clustered or not) up to the first other word."""
    inv = Invocation()
    command_mode = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or arg == "-":
            i += 1
            break
        if arg.startswith("--"):
            if arg in ("--rcfile", "--init-file"):
                i += 2
                continue
            if arg in _LONG_ACCEPTED:
                i += 1
                continue
            if arg in ("--version", "--help"):
                return ExecResult(stdout=f"{name} (the sandbox's shell: just-bash 0.2.1, bash syntax)\n")
            return ExecResult(stderr=f"{name}: {arg}: invalid option\n", exit_code=2)
        if len(arg) > 1 and arg[0] in "-+":
            on = arg[0] == "-"
            for letter in arg[1:]:
                if letter == "c":
                    command_mode = True
                elif letter == "o":
                    i += 1
                    if i >= len(args):
                        return ExecResult(stderr=f"{name}: -o: option requires an argument\n", exit_code=2)
                    if args[i] not in _OPTION_NAMES:
                        return ExecResult(stderr=f"{name}: {args[i]}: invalid option name\n", exit_code=2)
                    field = _OPTION_NAMES[args[i]]
                    if field:
                        inv.options[field] = on
                elif letter in _LETTERS:
                    inv.options[_LETTERS[letter]] = on
                elif letter == "s":
                    inv.from_stdin = True
                elif letter in _ACCEPTED:
                    pass
                else:
                    return ExecResult(stderr=f"{name}: -{letter}: invalid option\n", exit_code=2)
            i += 1
            continue
        break
    rest = args[i:]
    if command_mode:
        if not rest:
            return ExecResult(stderr=f"{name}: -c: option requires an argument\n", exit_code=2)
        inv.script, inv.name, inv.args = rest[0], (rest[1] if len(rest) > 1 else name), rest[2:]
    elif rest and not inv.from_stdin:
        inv.file, inv.name, inv.args = rest[0], rest[0], rest[1:]
    else:
        inv.from_stdin, inv.name, inv.args = True, name, rest
    return inv


def shell_state(env: Any, cwd: str, previous_dir: str, name: str, args: list[str], options: dict[str, bool],
                start_time: float, exported: Callable[[Any], dict[str, str]]) -> InterpreterState:
    """A new shell's state: the caller's exported variables, its own $0 $1..., no functions."""
    store = VariableStore(exported(env))
    for key in list(store):
        store.set_attribute(key, "x")
    store["0"] = name
    for n, arg in enumerate(args, 1):
        store[str(n)] = arg
    store["#"] = str(len(args))
    store["?"] = "0"
    store["OPTIND"] = "1"
    store["PWD"] = cwd
    state = InterpreterState(env=store, cwd=cwd, previous_dir=previous_dir, start_time=start_time,
                             options=ShellOptions(**options))
    state.last_background_pid = ""  # type: ignore[assignment]  # `$!` is empty before any `&`
    return state


async def read_script(fs: Any, cwd: str, name: str, path: str) -> str | ExecResult:
    full = fs.resolve_path(cwd, path)
    if os.path.isdir(full):
        return ExecResult(stderr=f"{name}: {path}: Is a directory\n", exit_code=126)
    try:
        text: str = await fs.read_file(full)
    except OSError:
        return ExecResult(stderr=f"{name}: {path}: No such file or directory\n", exit_code=127)
    if "\0" in text[:4096]:
        return ExecResult(stderr=f"{name}: {path}: cannot execute binary file\n", exit_code=126)
    return text


class ShellCommand:
    """`sh`, `bash`, `dash`: a script run whole in a shell of its own (`run_in` below)."""

    def __init__(self, name: str, run_in: Callable[..., Any]) -> None:
        self.name = name
        self._run_in = run_in  # (ctx, script, name, args, options, stdin) -> ExecResult

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        inv = parse_invocation(self.name, args)
        if isinstance(inv, ExecResult):
            return inv
        stdin = ctx.stdin
        if inv.script is not None:
            script = inv.script
        elif inv.file is not None:
            text = await read_script(ctx.fs, ctx.cwd, self.name, inv.file)
            if isinstance(text, ExecResult):
                return text
            script = text
        else:
            script, stdin = stdin, ""
        result: ExecResult = await self._run_in(ctx, script, inv.name, inv.args, inv.options, stdin)
        return result


def shebang(first_line: str) -> list[str] | None:
    """`#!/bin/sh -e` -> ["sh", "-e"]; `#!/usr/bin/env bash` -> ["bash"]; None without one."""
    if not first_line.startswith("#!"):
        return None
    words = first_line[2:].strip().split()
    if not words:
        return []
    program = posixpath.basename(words[0])
    rest = words[1:]
    if program == "env":
        rest = [w for w in rest if w != "-S"]
        if not rest:
            return []
        program, rest = posixpath.basename(rest[0]), rest[1:]
    return [program, *rest]


def program_name(path: str, commands: dict[str, Any]) -> str | None:
    """`/usr/bin/grep` -> `grep` when there is no such file and the shell has the command."""
    folder, base = posixpath.split(posixpath.normpath(path))
    if folder in BIN_DIRS and base in commands:
        return base
    return None


# -- trap ---------------------------------------------------------------------------------

def traps(state: Any) -> dict[str, str]:
    found: dict[str, str] | None = getattr(state, "sandbox_traps", None)
    if found is None:
        found = {}
        state.sandbox_traps = found
    return found


def _signal(spec: str) -> str | None:
    if spec.isdigit():
        number = int(spec)
        if number == 0:
            return "EXIT"
        return SIGNALS[number - 1] if 0 < number <= len(SIGNALS) else None
    upper = spec.upper()
    if upper.startswith("SIG") and upper[3:] in SIGNALS:
        upper = upper[3:]
    return upper if upper in SIGNALS or upper in _PSEUDO else None


def _shown(sig: str) -> str:
    return sig if sig in _PSEUDO else "SIG" + sig


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


async def handle_trap(ctx: Any, args: list[str]) -> ExecResult:
    table = traps(ctx.state)
    if args and args[0] == "--":
        args = args[1:]
    if not args or args[0] == "-p":
        wanted = [_signal(a) for a in args[1:]] if args else []
        order = [s for s in (*_PSEUDO, *SIGNALS) if s in table and (not wanted or s in wanted)]
        return ExecResult(stdout="".join(f"trap -- {_quoted(table[s])} {_shown(s)}\n" for s in order))
    if args[0] == "-l":
        return ExecResult(stdout="".join(f"{n:2d}) SIG{s}\n" for n, s in enumerate(SIGNALS, 1)))
    if args[0].startswith("-") and args[0] != "-":
        return ExecResult(stderr=f"bash: trap: {args[0]}: invalid option\n"
                                 "trap: usage: trap [-lp] [[arg] signal_spec ...]\n", exit_code=2)
    if len(args) == 1 and _signal(args[0]) is not None:
        action, specs = "-", args  # `trap SIG`: reset
    else:
        action, specs = args[0], args[1:]
    if not specs:
        return ExecResult(stderr="trap: usage: trap [-lp] [[arg] signal_spec ...]\n", exit_code=2)
    errors = ""
    for spec in specs:
        sig = _signal(spec)
        if sig is None:
            errors += f"bash: trap: {spec}: invalid signal specification\n"
        elif action == "-":
            table.pop(sig, None)
        else:
            table[sig] = action
    return ExecResult(stderr=errors, exit_code=1 if errors else 0)


# -- background jobs --------------------------------------------------------------------

def jobs(state: Any) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] | None = getattr(state, "sandbox_jobs", None)
    if found is None:
        found = []
        state.sandbox_jobs = found
    return found


def add_job(state: Any, status: int) -> int:
    table = jobs(state)
    pid = FIRST_JOB_PID + len(table) + 1
    table.append((pid, status))
    state.last_background_pid = pid
    return pid


def _job(table: list[tuple[int, int]], spec: str) -> tuple[int, int] | None:
    if spec.startswith("%"):
        key = spec[1:]
        if key in ("", "%", "+"):
            return table[-1] if table else None
        if key == "-":
            return table[-2] if len(table) > 1 else None
        if key.isdigit() and 0 < int(key) <= len(table):
            return table[int(key) - 1]
        return None
    if spec.isdigit():
        return next((job for job in table if job[0] == int(spec)), None)
    return None


async def handle_wait(ctx: Any, args: list[str]) -> ExecResult:
    table = jobs(ctx.state)
    waited = getattr(ctx.state, "sandbox_waited", 0)
    specs = [a for a in args if not a.startswith("-") or a == "-"]
    if "-n" in args:
        if waited >= len(table):
            return ExecResult(exit_code=127)
        ctx.state.sandbox_waited = waited + 1
        return ExecResult(exit_code=table[waited][1])
    if not specs:
        ctx.state.sandbox_waited = len(table)
        return ExecResult()
    status, errors = 0, ""
    for spec in specs:
        job = _job(table, spec)
        if job is not None:
            status = job[1]
        elif spec.startswith("%"):
            errors += f"bash: wait: {spec}: no such job\n"
            status = 127
        elif spec.isdigit():
            errors += f"bash: wait: pid {spec} is not a child of this shell\n"
            status = 127
        else:
            errors += f"bash: wait: `{spec}': not a pid or valid job spec\n"
            status = 2
    return ExecResult(stderr=errors, exit_code=status)


async def handle_jobs(ctx: Any, args: list[str]) -> ExecResult:
    return ExecResult()  # every background command has already run to its end


async def handle_kill(ctx: Any, args: list[str]) -> ExecResult:
    if args and args[0] in ("-l", "-L"):
        return ExecResult(stdout=" ".join(SIGNALS) + "\n")
    targets: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-s", "-n"):
            i += 2
            continue
        if arg.startswith("-") and len(arg) > 1 and not targets:
            i += 1
            continue
        targets.append(arg)
        i += 1
    if not targets:
        return ExecResult(stderr="kill: usage: kill [-s sigspec | -n signum | -sigspec] pid | jobspec ... or "
                                 "kill -l [sigspec]\n", exit_code=2)
    errors = ""
    for target in targets:
        if target.startswith("%"):
            errors += f"bash: kill: {target}: no such job\n"
        elif target.lstrip("-").isdigit():
            errors += f"bash: kill: ({target}) - No such process\n"
        else:
            errors += (f"bash: kill: {target}: arguments must be process or job IDs\n")
    return ExecResult(stderr=errors, exit_code=1)


def _patch_last_background_pid() -> None:
    """just-bash reads `$!` as `${!...}` (an indirection of nothing) and gives "": the
    expansion functions are wrapped here, in its module, to give the last job's pid."""
    from just_bash.interpreter import expansion

    if getattr(expansion, "sandbox_patched", False):
        return
    plain, segments = expansion.expand_parameter, expansion.expand_parameter_segments_async

    def expand_parameter(ctx: Any, part: Any, in_double_quotes: bool = False) -> str:
        if part.parameter == "!" and part.operation is None:
            return str(ctx.state.last_background_pid)
        value: str = plain(ctx, part, in_double_quotes)
        return value

    async def expand_parameter_segments_async(ctx: Any, part: Any, in_double_quotes: bool = False) -> Any:
        if part.parameter == "!" and part.operation is None:
            return [expansion.ExpandedSegment(text=str(ctx.state.last_background_pid), quoted=in_double_quotes)]
        return await segments(ctx, part, in_double_quotes)

    expansion.expand_parameter = expand_parameter
    expansion.expand_parameter_segments_async = expand_parameter_segments_async
    expansion.sandbox_patched = True


_patch_last_background_pid()


# -- where a program is: env, which, command -v, type -------------------------------------

PROGRAM_DIR = "/usr/bin"  # where `which ls`, `command -v ls` and `type ls` say the shell's commands are


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def program_path(name: str, commands: dict[str, Any], cwd: str) -> str | None:
    """Where a program named `name` is, as a user would see it: `/usr/bin/NAME` for the
    shell's commands, the path itself for a file or a `/bin/ls`; None if there is none."""
    if "/" in name:
        full = name if name.startswith("/") else posixpath.join(cwd, name)
        if os.path.isfile(full) or (not os.path.lexists(full) and program_name(full, commands)):
            return name
        return None
    return f"{PROGRAM_DIR}/{name}" if name in commands else None


class EnvCommand:
    """`env [-i] [-u NAME] [NAME=VALUE]... [COMMAND ARGS]`: the library's, whose command line
    it rebuilt with too little quoting (`env python3 -c 'print(1)'` ran `print(1)` as shell)."""

    name = "env"

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in ("-u", "--unset"):
                i += 2
                continue
            if arg == "--":
                i += 1
                break
            if arg.startswith("-") or ("=" in arg and not arg.startswith("=")):
                i += 1
                continue
            break
        command = args[i:]
        if not command:
            result: ExecResult = await self.inner.execute(args, ctx)
            return result
        settings = args[:i]
        marker = "__sandbox_env_command__"
        script = " ".join(_quote(word) for word in command)

        async def run(_line: str, options: dict[str, Any]) -> Any:
            return await ctx.exec(script, options)

        import dataclasses

        inner_ctx = dataclasses.replace(ctx, exec=run)
        result = await self.inner.execute([*settings, marker], inner_ctx)
        return result


class WhichCommand:
    name = "which"

    def __init__(self, commands: dict[str, Any]) -> None:
        self.commands = commands

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        names = [a for a in args if not a.startswith("-")]
        found = [program_path(n, self.commands, ctx.cwd) for n in names]
        out = "".join(f"{path}\n" for path in found if path)
        return ExecResult(stdout=out, exit_code=0 if names and all(found) else 1)


def wrap_lookups(builtins: dict[str, Any], commands: dict[str, Any]) -> None:
    """`command -v NAME`, `type NAME`: the shell's commands are at /usr/bin (the library
    said `sh`, `sh is sh`), `/bin/ls` is a program; functions, builtins, aliases as before."""
    original_command, original_type = builtins["command"], builtins["type"]

    def ours(ctx: Any, name: str) -> bool:
        return name not in ctx.state.functions and name not in builtins and \
            program_path(name, commands, ctx.state.cwd) is not None

    async def handle_command(ctx: Any, args: list[str], stdin: str = "") -> ExecResult:
        if len(args) >= 2 and args[0] in ("-v", "-V"):
            out, missing = "", 0
            for name in args[1:]:
                if ours(ctx, name):
                    path = program_path(name, commands, ctx.state.cwd)
                    out += f"{path}\n" if args[0] == "-v" else f"{name} is {path}\n"
                    continue
                result = await original_command(ctx, [args[0], name])
                out += result.stdout
                missing = missing or result.exit_code
            return ExecResult(stdout=out, exit_code=missing)
        result: ExecResult = await _call(original_command, ctx, args, stdin)
        return result

    async def handle_type(ctx: Any, args: list[str], stdin: str = "") -> ExecResult:
        flags = [a for a in args if a.startswith("-")]
        names = [a for a in args if not a.startswith("-")]
        out, err, status = "", "", 0
        for name in names:
            if ours(ctx, name):
                path = program_path(name, commands, ctx.state.cwd)
                if "-t" in flags:
                    out += "file\n"
                elif "-p" in flags or "-P" in flags:
                    out += f"{path}\n"
                else:
                    out += f"{name} is {path}\n"
                continue
            result = await _call(original_type, ctx, [*flags, name], stdin)
            out, err = out + result.stdout, err + result.stderr
            status = status or result.exit_code
        if not names:
            return await _call(original_type, ctx, args, stdin)  # type: ignore[no-any-return]
        return ExecResult(stdout=out, stderr=err, exit_code=status)

    builtins["command"], builtins["type"] = handle_command, handle_type


async def _call(handler: Any, ctx: Any, args: list[str], stdin: str) -> Any:
    import inspect

    if len(inspect.signature(handler).parameters) >= 3:
        return await handler(ctx, args, stdin)
    return await handler(ctx, args)
