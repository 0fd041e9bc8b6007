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

import dataclasses
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb
from just_bash.ast.types import SingleQuotedPart, WordNode
from just_bash.commands import create_command_registry
from just_bash.interpreter import Interpreter, InterpreterState, ShellOptions, VariableStore
from just_bash.interpreter.builtins import BUILTINS
from just_bash.interpreter.errors import (BreakError, ContinueError, ErrexitError, ExecutionLimitError, ExitError,
                                          InterpreterError)
from just_bash.interpreter.expansion import expand_word_with_glob
from just_bash.parser import parse
from just_bash.parser.parser import ParseException
from just_bash.types import Command, ExecResult, ExecutionLimits

from runtime import (_shellawk, _shellbytes, _shellfind, _shellfs, _shellgrep, _shellpip, _shellpy, _shellsed,
                     _shellseq, _shellsh, _shellsort, _shellwc)

# isort: on

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
# The interpreter's recursion limit while a command line runs. just-bash is a tree of
# coroutines: one bash function level is about 23 Python frames (its pipeline, command,
# expansion and body awaits), so the guest's 1,000 stopped a recursive function ~40
# levels deep. This many give LIMITS.max_call_depth its levels and stay within the
# guest's C stack (measured: tests/sandbox/test_commands_guest.py, both images).
RECURSION_LIMIT = 4000
# Past this many levels of `$(...)` the library's parser runs out of recursion and, as it
# catches every Exception there, reads the rest as text: refused first, with its reason.
MAX_SUBSTITUTION_DEPTH = 64
# What a missing command's one-line hint says: the shell has no processes to run.
_HINTS = {
    "curl": "the shell has no network: fetch URLs from Python with runtime.http (the host's egress)",
    "wget": "the shell has no network: fetch URLs from Python with runtime.http (the host's egress)",
    "yes": "there is no `yes`: generate lines with `seq`, `printf` or python -c",
    "apt": "system packages cannot be installed in the sandbox; pure-Python packages can: `pip install NAME`",
    "apt-get": "system packages cannot be installed in the sandbox; pure-Python packages can: `pip install NAME`",
    "sudo": "there is no sudo: commands run as the sandbox's only user",
    "pip3.11": "use `pip` (install, list, freeze, show)",
    "conda": "there is no conda: install pure-Python packages with `pip install NAME`",
    "mamba": "there is no mamba: install pure-Python packages with `pip install NAME`",
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


class _Guarded:
    """A command whose own fault (an OSError its code did not expect, from a name too long
    for the filesystem, a link out of the sandbox...) is its exit status 1 and a message,
    as a crashed process's would be, instead of the end of the whole command line. The
    interpreter's own signals (exit, return, limits) pass on."""

    def __init__(self, inner: Command) -> None:
        self.inner = inner
        self.name = inner.name

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        attached = _ATTACHED_VALUES.get(self.name)
        if attached:
            args = _split_attached(args, attached)
        if self.name == "tar" and args and args[0][:1].isalpha() and set(args[0]) <= _TAR_LETTERS:
            args = ["-" + args[0], *args[1:]]  # `tar czf a.tgz d`: the old form, options without a dash
        if self.name == "diff":
            # the library's diff writes the unified format whatever it is asked: -u asks for it
            args = [a for a in args if a not in ("-u", "--unified", "-U3", "--unified=3")]
        if self.name in ("env", "printenv"):
            # just-bash shows them every shell variable ($?, PIPESTATUS_0, unexported
            # ones); a process's environment is the exported variables.
            ctx = dataclasses.replace(ctx, env=_shellpy.exported_env(ctx.env))
        try:
            result: ExecResult = await self.inner.execute(args, ctx)
        except InterpreterError:
            raise
        except OSError as error:
            return ExecResult(stderr=f"{self.name}: {error}\n", exit_code=1)
        except (RecursionError, MemoryError):
            raise
        except Exception as error:
            return ExecResult(stderr=f"{self.name}: {type(error).__name__}: {error}\n", exit_code=1)
        return result


# Options whose value just-bash's parser takes only as the next word (`-I {}`), where
# agents write it attached (`xargs -I{} ...`, `xargs -n1`): split before the call.
_ATTACHED_VALUES = {"xargs": "nIdPLs"}
_TAR_LETTERS = frozenset("cxtrzjJvfpkCOmoa")


def _split_attached(args: list[str], letters: str) -> list[str]:
    out: list[str] = []
    for i, arg in enumerate(args):
        if not arg.startswith("-") or arg == "-" or arg == "--":
            return out + args[i:]  # the command xargs runs, and its own options, as given
        if len(arg) > 2 and arg[1] in letters:
            out += [arg[:2], arg[2:]]
        else:
            out.append(arg)
    return out


def _registry() -> dict[str, Command]:
    commands: dict[str, Command] = create_command_registry(include_network=False)
    for name in ("python", "python3"):
        commands[name] = _shellpy.PythonCommand(name)
    for name in ("pip", "pip3"):
        commands[name] = _shellpip.PipCommand(name)
    commands["uv"] = _shellpip.UvCommand()
    commands["awk"] = _shellawk.SandboxAwk()
    commands["grep"] = _shellgrep.GrepCommand()
    commands["egrep"] = _shellgrep.GrepCommand("egrep", "E")
    commands["fgrep"] = _shellgrep.GrepCommand("fgrep", "F")
    commands["sort"] = _shellsort.SortCommand()
    commands["find"] = _shellfind.FindCommand()
    commands["wc"] = _shellwc.WcCommand()
    commands["seq"] = _shellseq.SeqCommand()
    commands["sed"] = _shellsed.SandboxSed()
    for name in _shellsh.SHELLS:
        commands[name] = _shellsh.ShellCommand(name, lambda *a: _run_shell(*a))  # defined below
    commands.update(_shellbytes.commands(commands))
    commands["env"] = _shellsh.EnvCommand(commands["env"])
    commands["which"] = _shellsh.WhichCommand(commands)
    _shellsh.wrap_lookups(BUILTINS, commands)
    return {name: _Guarded(command) for name, command in commands.items()}


# The sandbox's builtins (runtime/_shellsh.py): `trap` (the library has none), `&`'s jobs.
BUILTINS.update(trap=_shellsh.handle_trap, wait=_shellsh.handle_wait, jobs=_shellsh.handle_jobs,
                kill=_shellsh.handle_kill)
_COMPOUND = frozenset({"If", "For", "CStyleFor", "While", "Until", "Case", "Group"})


def _load_all(commands: dict[str, Command]) -> None:
    """Each command's module imported now: just-bash loads one on its first use, which
    would cost a run its import (and, on the data image, its compile from source).
    Imported with this module, in the image, they are free for every run."""
    from just_bash.commands import registry

    for name, command in commands.items():
        while hasattr(command, "inner"):  # the sandbox's wrappers (_Guarded, runtime/_shellbytes.py)
            command = command.inner
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
    """Text the shell produced, onto one of this process's streams: its bytes as a process
    would write them (a binary file cat'ed is its bytes; runtime/_shellbytes.py) when the
    stream has bytes under it, else as text (an io.StringIO keeps the escaped bytes)."""
    for start in range(0, len(text), _shellpy.PIECE):  # a piece at a time: encoded output never held twice whole
        _emit_piece(stream, text[start:start + _shellpy.PIECE])


def _emit_piece(stream: Any, text: str) -> None:
    raw = getattr(stream, "buffer", None)
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte (python's own output)
        data = text.encode("utf-8", "replace")
    if raw is not None:
        stream.flush()
        raw.write(data)
        raw.flush()
        return
    try:
        stream.write(text)
    except UnicodeEncodeError:
        stream.write(data.decode("utf-8", "replace"))


def _written(result: ExecResult) -> ExecResult:
    """`result`'s output written to this process's streams: what is left is its status."""
    if not (result.stdout or result.stderr):
        return result
    _emit(sys.stdout, result.stdout)
    _emit(sys.stderr, result.stderr)
    return ExecResult(stdout="", stderr="", exit_code=result.exit_code, env=result.env)


# Redirections that only feed a command's input; any other sends some of its output elsewhere.
_INPUT_REDIRECTIONS = frozenset({"<", "<<", "<<-", "<<<", "<&"})


def _redirects_output(node: Any) -> bool:
    return any(r.operator not in _INPUT_REDIRECTIONS for r in getattr(node, "redirections", None) or ())


class _Shell(Interpreter):
    """just-bash's interpreter, with what the sandbox adds: output written as it is made
    wherever it goes to the shell's own streams (below), scripts with a Python shebang
    run by `python`, and a hint after `command not found`.

    just-bash hands every command's output up the tree as a string, so a command line's
    output would appear when it ends and be held whole until then. Where bash's output
    would go straight to the terminal (`direct`: not into a pipe, a redirection or a
    `$(...)`), each pipeline's output is written as that pipeline ends, and `python`
    (runtime/_shellpy.py) and the shells it starts write to the streams themselves while
    they run: a long script's progress is seen as it prints, and its output is bounded by
    the run's output limit as it is written, not held in memory first."""

    def __init__(self, *args: Any, direct: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._direct = direct  # whether output made now goes to this process's own streams
        self._direct_statement: Any = None  # the statement in the direct position now (its pipelines write)
        self._pipelines: list[Any] = []  # the pipelines running now, innermost last
        # The pipeline running now and the stderr of its commands but the last (below).
        self._pipe: tuple[Any, list[str]] | None = None
        self._depth = 0  # execute_script levels: 1 is the shell's own script, more a `$(...)`
        self._in_trap = 0
        self._last_pipeline: Any = None  # the pipeline that ran last (ERR: was it the statement's last?)

    async def execute_script(self, node: Any) -> ExecResult:
        self._depth += 1
        outer = self._direct
        if self._depth > 1:  # a `$(...)` or a trap: its output is a value, not the shell's
            self._direct = False
        try:
            result: ExecResult = await super().execute_script(node)
        finally:
            self._depth -= 1
            self._direct = outer
        return result

    async def run_script(self, ast: Any) -> ExecResult:
        """The shell's whole script, then its EXIT trap (runtime/_shellsh.py)."""
        try:
            result = await self.execute_script(ast)
        except (ExitError, ErrexitError) as stop:
            result = ExecResult(stdout=stop.stdout, stderr=stop.stderr, exit_code=stop.exit_code)
        return await self.exit_trap(result)

    async def exit_trap(self, result: ExecResult) -> ExecResult:
        handler = _shellsh.traps(self._state).pop("EXIT", None)
        if not handler:
            return result
        code = result.exit_code
        try:
            extra = await self._run_trap(handler, code)
        except (ExitError, ErrexitError) as stop:
            extra = ExecResult(stdout=stop.stdout, stderr=stop.stderr)
            code = stop.exit_code
        return ExecResult(stdout=result.stdout + extra.stdout, stderr=result.stderr + extra.stderr, exit_code=code)

    async def _run_trap(self, handler: str, status: int) -> ExecResult:
        self._in_trap += 1
        self._state.env["?"] = str(status)
        self._state.last_exit_code = status
        try:
            ast = parse(handler)
        except ParseException as problem:
            return ExecResult(stderr=f"bash: trap: {problem}\n", exit_code=2)
        try:
            result: ExecResult = await self.execute_script(ast)
        except (ExitError, ErrexitError, ExecutionLimitError):
            raise
        except (InterpreterError, ValueError, ArithmeticError) as error:  # the trap's own error, not the shell's end
            stdout = getattr(error, "stdout", "")
            result = ExecResult(stdout=stdout if isinstance(stdout, str) else "", stderr=f"bash: {error}\n",
                                exit_code=1)
        finally:
            self._in_trap -= 1
            self._state.env["?"] = str(status)
            self._state.last_exit_code = status
        return result

    async def _err_trap(self, node: Any, code: int) -> ExecResult | None:
        """bash's ERR trap: after a failing command, not in a condition, a function (no -E),
        a substitution, a `!` or a short-circuited `&&`, and once (not again for the loop,
        group or `if` around it)."""
        if code == 0 or self._depth != 1 or self._in_trap or self._state.call_depth or self._state.in_condition:
            return None
        handler = _shellsh.traps(self._state).get("ERR")
        last = node.pipelines[-1] if node.pipelines else None
        if not handler or last is None or last.negated or self._last_pipeline is not last:
            return None
        if not last.commands or last.commands[-1].type in _COMPOUND:
            return None
        return await self._run_trap(handler, code)

    async def execute_pipeline(self, node: Any) -> ExecResult:
        """just-bash keeps only the last command's stderr of a pipeline (interpreter.py
        `execute_pipeline`): `cat missing | wc -l` would lose cat's error. The others'
        are collected (execute_command) and put first, as bash shows them."""
        statement = self._direct_statement
        direct = statement is not None and any(p is node for p in statement.pipelines)
        self._pipelines.append(node)
        try:
            result = await self._pipeline(node)
        finally:
            self._pipelines.pop()
        if direct:
            return _written(result)
        return result

    async def _pipeline(self, node: Any) -> ExecResult:
        if len(node.commands) < 2:
            single: ExecResult = await super().execute_pipeline(node)
            self._last_pipeline = node
            return single
        outer, self._pipe = self._pipe, (node, [])
        try:
            result: ExecResult = await super().execute_pipeline(node)
            lost = "".join(self._pipe[1])
        finally:
            self._pipe = outer
        self._last_pipeline = node
        if not lost:
            return result
        return ExecResult(stdout=result.stdout, stderr=lost + result.stderr, exit_code=result.exit_code, env=result.env)

    async def execute_command(self, node: Any, stdin: str) -> ExecResult:
        outer = self._direct
        # Not the shell's streams: a command piped into the next one, or one that redirects its output.
        # (A command that is no pipeline's, such as a function's body, is where its caller is.)
        piped = bool(self._pipelines) and any(c is node for c in self._pipelines[-1].commands[:-1])
        self._direct = outer and not piped and not _redirects_output(node)
        inherits = _shellpy.INHERITS_STREAMS.set(self._direct and node.type == "SimpleCommand")
        try:
            result: ExecResult = await super().execute_command(node, stdin)
        finally:
            _shellpy.INHERITS_STREAMS.reset(inherits)
            self._direct = outer
        pipe = self._pipe
        if pipe is not None and result.stderr:
            commands = pipe[0].commands
            for i, command in enumerate(commands[:-1]):
                merged = bool(pipe[0].pipe_amp and i < len(pipe[0].pipe_amp) and pipe[0].pipe_amp[i])
                if command is node and not merged:  # `|&` hands stderr to the next command
                    pipe[1].append(result.stderr)
                    break
        return result

    async def execute_statement(self, node: Any) -> ExecResult:
        direct = self._direct
        outer, self._direct_statement = self._direct_statement, (node if direct and not node.background else None)
        try:
            result = await self._statement(node)
        finally:
            self._direct_statement = outer
        return _written(result) if direct else result

    async def _statement(self, node: Any) -> ExecResult:
        if node.background:
            # No processes: the job runs to its end here; `$!`, `wait` and `jobs` know it.
            try:
                done: ExecResult = await super().execute_statement(node)
            except (ExitError, ErrexitError) as stop:
                done = ExecResult(stdout=stop.stdout, stderr=stop.stderr, exit_code=stop.exit_code)
            _shellsh.add_job(self._state, done.exit_code)
            self._state.last_exit_code = 0
            self._state.env["?"] = "0"
            result = ExecResult(stdout=done.stdout, stderr=done.stderr, exit_code=0)
        else:
            try:
                result = await super().execute_statement(node)
            except ErrexitError as stop:
                extra = await self._err_trap(node, stop.exit_code)
                if extra is not None:
                    stop.stdout += extra.stdout
                    stop.stderr += extra.stderr
                raise
            extra = await self._err_trap(node, result.exit_code)
            if extra is not None:
                result = ExecResult(stdout=result.stdout + extra.stdout, stderr=result.stderr + extra.stderr,
                                    exit_code=result.exit_code, env=result.env)
        return result

    async def _exec_fn(self, script: str, env: dict[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        """`bash -c`, `xargs`, `env CMD`, `timeout`...: as just-bash's own (interpreter.py
        `_exec_fn`), with a sub-shell of this class so the sandbox's additions hold there too."""
        if not (env or cwd):
            return await super()._exec_fn(script, env, cwd)
        new_env = self._state.env.copy() if isinstance(self._state.env, VariableStore) else VariableStore(self._state.env)
        if env:
            new_env.update(env)
            for name in env:  # what `env NAME=V cmd` passes is the command's environment
                new_env.set_attribute(name, "x")
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

    async def _execute_subshell(self, node: Any, stdin: str) -> ExecResult:
        """`( ... )`: as just-bash's own (interpreter.py `_execute_subshell`), in a shell of
        this class (the sandbox's additions hold there too), with its own traps: its EXIT
        trap runs as it ends."""
        if node.redirections:
            stdin = await self._process_input_redirections(node.redirections, stdin)
        env = self._state.env.copy() if isinstance(self._state.env, VariableStore) else VariableStore(self._state.env)
        state = InterpreterState(
            env=env, cwd=self._state.cwd, previous_dir=self._state.previous_dir,
            functions=dict(self._state.functions), start_time=self._state.start_time,
            options=ShellOptions(**vars(self._state.options)), fd_table=self._state.fd_table.clone(),
            parent_has_loop_context=self._state.loop_depth > 0 or self._state.parent_has_loop_context,
        )
        state.last_background_pid = self._state.last_background_pid
        if stdin:
            state.group_stdin = stdin
        sub = _Shell(fs=self._fs, commands=self._commands, limits=self._limits, state=state, fetch=self._fetch,
                     direct=self._direct)
        sub._depth = 1
        stdout = stderr = ""
        exit_code = 0
        try:
            for statement in node.body:
                result = await sub.execute_statement(statement)
                stdout += result.stdout
                stderr += result.stderr
                exit_code = result.exit_code
                state.last_exit_code = exit_code
                state.env["?"] = str(exit_code)
        except (ExitError, ErrexitError) as stop:  # exit (or set -e) ends the subshell only
            stdout, stderr, exit_code = stdout + stop.stdout, stderr + stop.stderr, stop.exit_code
        except (BreakError, ContinueError) as stop:  # cannot cross the subshell: exit 0, as bash
            stdout, stderr, exit_code = stdout + stop.stdout, stderr + stop.stderr, 0
        done = await sub.exit_trap(ExecResult(stdout=stdout, stderr=stderr, exit_code=exit_code))
        if node.redirections:
            done = await self._process_output_redirections(node.redirections, done)
        return done

    def command_context(self, stdin: str) -> Any:
        """The context a command of the registry is called with (as interpreter.py builds it)."""
        from just_bash.types import CommandContext

        return CommandContext(
            fs=self._fs, cwd=self._state.cwd, env=self._state.env, stdin=stdin, limits=self._limits,
            exec=lambda script, opts: self._exec_fn(script, opts.get("env"), opts["cwd"]),
            get_registered_commands=lambda: list(self._commands.keys()), fetch=self._fetch,
        )

    async def _call_function(self, name: str, args: list[Any], stdin: str, alias_args: list[str] | None = None) -> ExecResult:
        """just-bash clears $1, $2... before it expands the call's words (interpreter.py
        `_call_function`), so inside a function `f "$1"` passed an empty word and a
        recursive function never ended. The words are expanded here first, with the
        caller's parameters, and handed on quoted (nothing is expanded twice)."""
        words: list[str] = []
        for arg in args:
            expanded = await expand_word_with_glob(self._ctx, arg)
            words.extend(expanded["values"])
        quoted = [WordNode(parts=(SingleQuotedPart(value=word),)) for word in words]
        result: ExecResult = await super()._call_function(name, quoted, stdin, alias_args)
        return result

    async def _try_execute_vfs_script(self, cmd_name: str, args: list[str], stdin: str) -> ExecResult:
        path = self._fs.resolve_path(self._state.cwd, cmd_name) if "/" in cmd_name else None
        if path is not None and os.path.isfile(path):
            # WASI keeps no permission bits, so a file is run by its path without an x bit
            # (a chmod +x in an earlier run could not be known).
            first = _first_line(path)
            ctx = self.command_context(stdin)
            if _shellpy.is_python_shebang(first):
                return _shellpy.run_python_script(path, args, ctx)
            words = _shellsh.shebang(first) or []
            if not words or words[0] in _shellsh.SHELLS:  # a shell script: run whole, in a shell of its own
                shell = words[0] if words else "bash"
                return await self._commands[shell].execute([*words[1:], cmd_name, *args], ctx)
            if words[0] in self._commands:  # `#!/usr/bin/awk -f`, `#!/usr/bin/env jq -f`...
                return await self._commands[words[0]].execute([*words[1:], cmd_name, *args], ctx)
            return ExecResult(stderr=f"bash: {cmd_name}: {first[2:].strip()}: bad interpreter: No such file or "
                                     f"directory\n", exit_code=126)
        if path is not None and not os.path.lexists(path):
            program = _shellsh.program_name(path, self._commands)
            if program is not None:  # `/bin/sh`, `/usr/bin/env`, `/usr/local/bin/python`: the shell's own
                return await self._commands[program].execute(args, self.command_context(stdin))
        result: ExecResult = await super()._try_execute_vfs_script(cmd_name, args, stdin)
        if result.exit_code == 127 and result.stderr.endswith("command not found\n"):
            hint = _HINTS.get(cmd_name, _GENERAL_HINT)
            result = ExecResult(stdout=result.stdout, stderr=f"{result.stderr}hint: {hint}\n", exit_code=127)
        return result


async def _run_shell(ctx: Any, script: str, name: str, args: list[str], options: dict[str, bool],
                     stdin: str) -> ExecResult:
    """`sh -c SCRIPT`, `bash FILE`, `./x.sh`: the script whole, in a new shell (runtime/_shellsh.py)."""
    depth = _substitution_depth(script)
    if depth > MAX_SUBSTITUTION_DEPTH:
        return ExecResult(stderr=f"{name}: command substitutions nested {depth} deep; the sandbox's shell allows at "
                                 f"most {MAX_SUBSTITUTION_DEPTH}\n", exit_code=2)
    try:
        ast = parse(script)
    except ParseException as problem:
        return ExecResult(stderr=f"{name}: {problem}\n", exit_code=2)
    if _shellsh.nesting[0] >= _shellsh.MAX_SHELL_DEPTH:  # `sh ./self.sh` calling itself: an error, not a crash
        return ExecResult(stderr=f"{name}: shells nested {_shellsh.MAX_SHELL_DEPTH} deep; the sandbox's shell allows "
                                 f"no more\n", exit_code=2)
    state = _shellsh.shell_state(ctx.env, ctx.cwd, "", name, args, options, time.time(), _shellpy.exported_env)
    if stdin:
        state.group_stdin = stdin
    # Started where its output goes to the shell's streams (`bash job.sh` on its own line), it writes there too.
    shell = _Shell(fs=_FS, commands=_COMMANDS, limits=LIMITS, state=state, direct=_shellpy.INHERITS_STREAMS.get())
    _shellsh.nesting[0] += 1
    try:
        return await shell.run_script(ast)
    finally:
        _shellsh.nesting[0] -= 1


def _substitution_depth(script: str) -> int:
    """How deeply `$(...)` and backquotes nest in `script`, counted lexically (quotes
    not considered: an over-count only for a script that quotes hundreds of `$(`)."""
    depth = deepest = 0
    parens: list[bool] = []  # per open parenthesis: does it open a substitution?
    backquoted = False
    i, n = 0, len(script)
    while i < n:
        c = script[i]
        if c == "\\":
            i += 2
            continue
        if c == "$" and script.startswith("(", i + 1) and not script.startswith("((", i + 1):
            parens.append(True)
            depth += 1
            i += 2
        elif c == "(":
            parens.append(False)
            i += 1
        elif c == ")":
            if parens and parens.pop():
                depth -= 1
            i += 1
        elif c == "`":
            backquoted = not backquoted
            depth += 1 if backquoted else -1
            i += 1
        else:
            i += 1
        deepest = max(deepest, depth)
    return deepest


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
        result: ExecResult = await shell.run_script(ast)
    except ExitError as stop:
        result = ExecResult(stdout=stop.stdout, stderr=stop.stderr, exit_code=stop.exit_code)
    except ExecutionLimitError as limit:
        result = ExecResult(stdout=limit.stdout, stderr=f"{limit.stderr}bash: {limit}\n", exit_code=1)
    _emit(sys.stdout, result.stdout)
    _emit(sys.stderr, result.stderr)
    return result.exit_code




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
    depth = _substitution_depth(script)
    if depth > MAX_SUBSTITUTION_DEPTH:
        _emit(sys.stderr, f"bash: command substitutions nested {depth} deep; the sandbox's shell allows at most "
                          f"{MAX_SUBSTITUTION_DEPTH}\n")
        return 2
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, RECURSION_LIMIT))
    try:
        return _parse_and_run(script, folder, extra, text_in)
    finally:
        sys.setrecursionlimit(limit)


def _parse_and_run(script: str, folder: str, extra: dict[str, str], text_in: str) -> int:
    try:
        ast = parse(script)
    except ParseException as problem:
        _emit(sys.stderr, f"bash: {problem}\n")
        return 2
    except RecursionError:
        _emit(sys.stderr, "bash: the command line is nested too deeply to parse\n")
        return 2
    state = InterpreterState(env=_environment(extra, folder), cwd=folder, previous_dir="", start_time=time.time())
    state.last_background_pid = ""  # type: ignore[assignment]  # `$!` is empty before any `&`
    if text_in:
        state.group_stdin = text_in  # the first command's stdin (just-bash's group stdin)
    shell = _Shell(fs=_FS, commands=_COMMANDS, limits=LIMITS, state=state, direct=True)
    try:
        status = int(_shelljb.drive(_execute(shell, ast)))
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
