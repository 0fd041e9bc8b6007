"""`grep` for the sandbox's shell, written to GNU grep's behaviour (replaces just-bash's).

just-bash's grep (commands/grep/grep.py) differs from GNU grep in ways agents' command
lines run into: `grep -r PAT dir` printed absolute paths and `grep -r PAT /abs/dir` no
names at all; `grep -r PAT` with no folder searched stdin; `-o` printed one match a line;
a missing file was exit 1; no `-s`, `-f`, `--exclude-dir`, `--color`, `-Z`; POSIX bracket
classes (`[[:digit:]]`) were not understood. This one keeps GNU's forms: names as
given on the command line (`dir/f`, `./f`, `/abs/f`; none under `grep -r` without a
folder), exit 2 on an error, every match under `-o`, `--` between context groups.
Files under a folder are visited in name order (GNU visits them in the directory's own
order, which no two filesystems share).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.types import ExecResult
# isort: on

_CLASSES = {
    "alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z",
    "space": " \\t\\n\\r\\f\\v", "blank": " \\t", "punct": "!-/:-@\\[-`{-~", "xdigit": "0-9A-Fa-f",
    "word": "a-zA-Z0-9_", "cntrl": "\\x00-\\x1f\\x7f", "print": " -~", "graph": "!-~",
}


def _bracket(pattern: str, i: int) -> tuple[str, int]:
    """The POSIX bracket expression starting at pattern[i] == '[' as a Python one, and
    the index after it; `[` alone (no closing bracket) is a literal."""
    j = i + 1
    out = "["
    if j < len(pattern) and pattern[j] == "^":
        out += "^"
        j += 1
    first = True
    while j < len(pattern):
        c = pattern[j]
        if c == "]" and not first:
            return out + "]", j + 1
        first = False
        if c == "[" and j + 1 < len(pattern) and pattern[j + 1] in ":=.":
            kind = pattern[j + 1]
            end = pattern.find(kind + "]", j + 2)
            if end < 0:
                out += "\\["
                j += 1
                continue
            name = pattern[j + 2:end]
            if kind == ":":
                out += _CLASSES.get(name, "")
            else:
                out += re.escape(name)
            j = end + 2
            continue
        if c in "\\[":
            out += "\\" + c
        elif c == "]":
            out += "\\]"
        else:
            out += c
        j += 1
    return "\\[", i + 1


def translate(pattern: str, extended: bool) -> str:
    """A POSIX basic (grep) or extended (grep -E) regular expression as a Python one."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "[":
            text, i = _bracket(pattern, i)
            out.append(text)
            continue
        if c == "\\" and i + 1 < n:
            d = pattern[i + 1]
            i += 2
            if d in "<>":
                out.append(r"\b")
            elif not extended and d in "|+?(){}":
                out.append(d)
            elif d.isdigit() or d in "wWsSbB`'":
                out.append({"`": r"\A", "'": r"\Z"}.get(d, "\\" + d))
            else:
                out.append(re.escape(d))
            continue
        if not extended and c in "|+?(){}":
            out.append("\\" + c)
        elif c == "*" and (not out or out[-1] in ("^", "(", "|")):
            out.append(r"\*")  # a leading `*` is a literal
        elif extended and c == "{" and not re.match(r"\{\d*(,\d*)?\}", pattern[i:]):
            out.append(r"\{")
        else:
            out.append(c)
        i += 1
    return "".join(out)


class _Usage(Exception):
    pass


_LONG_FLAGS = {
    "--ignore-case": "i", "--invert-match": "v", "--count": "c", "--files-with-matches": "l",
    "--files-without-match": "L", "--line-number": "n", "--with-filename": "H", "--no-filename": "h",
    "--only-matching": "o", "--quiet": "q", "--silent": "q", "--recursive": "r", "--dereference-recursive": "R",
    "--extended-regexp": "E", "--fixed-strings": "F", "--basic-regexp": "G", "--perl-regexp": "P",
    "--word-regexp": "w", "--line-regexp": "x", "--no-messages": "s", "--text": "a", "--null": "Z",
    "--byte-offset": "b", "--initial-tab": "T", "--null-data": "z",
}
_LONG_VALUES = {
    "--after-context": "A", "--before-context": "B", "--context": "C", "--max-count": "m", "--regexp": "e",
    "--file": "f", "--include": "include", "--exclude": "exclude", "--exclude-dir": "exclude-dir",
    "--color": "color", "--colour": "color", "--label": "label", "--binary-files": "binary-files",
    "--devices": "devices", "--directories": "directories",
}
_OPTIONAL_VALUE = {"--color", "--colour"}
_SHORT_FLAGS = set("ivclLnHhoqrREFGPwxsaZbTzUI")
_SHORT_VALUES = set("ABCmef")


class GrepCommand:
    name = "grep"

    def __init__(self, name: str = "grep", mode: str = "") -> None:
        self.name = name
        self._mode = mode  # "E" for egrep, "F" for fgrep

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        try:
            return await self._run(args, ctx)
        except _Usage as problem:
            said = f"grep: {problem}\n" if str(problem) else ""
            return ExecResult(stderr=f"{said}Usage: grep [OPTION]... PATTERNS [FILE]...\n"
                                     "Try 'grep --help' for more information.\n", exit_code=2)

    def _parse(self, args: list[str]) -> tuple[set[str], dict[str, list[str]], list[str]]:
        flags: set[str] = set(self._mode)
        values: dict[str, list[str]] = {}
        operands: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            if arg == "--":
                operands.extend(args[i:])
                break
            if arg.startswith("--"):
                name, eq, value = arg.partition("=")
                matches = [o for o in (*_LONG_FLAGS, *_LONG_VALUES) if o.startswith(name)]
                if name in _LONG_FLAGS or name in _LONG_VALUES:
                    matches = [name]
                if len(matches) != 1:
                    raise _Usage(f"unrecognized option '{arg}'")
                name = matches[0]
                if name in _LONG_FLAGS:
                    flags.add(_LONG_FLAGS[name])
                    continue
                if not eq and name not in _OPTIONAL_VALUE:
                    if i >= len(args):
                        raise _Usage(f"option '{name}' requires an argument")
                    value = args[i]
                    i += 1
                values.setdefault(_LONG_VALUES[name], []).append(value)
                continue
            if arg.startswith("-") and arg != "-":
                j = 1
                while j < len(arg):
                    c = arg[j]
                    if c in _SHORT_FLAGS:
                        flags.add(c)
                        j += 1
                    elif c in _SHORT_VALUES:
                        value = arg[j + 1:]
                        if not value:
                            if i >= len(args):
                                raise _Usage(f"option requires an argument -- '{c}'")
                            value = args[i]
                            i += 1
                        values.setdefault(c, []).append(value)
                        break
                    elif c.isdigit():  # -5: -C 5
                        digits = re.match(r"\d+", arg[j:]).group(0)  # type: ignore[union-attr]
                        values.setdefault("C", []).append(digits)
                        j += len(digits)
                    else:
                        raise _Usage(f"invalid option -- '{c}'")
                continue
            operands.append(arg)
        return flags, values, operands

    async def _run(self, args: list[str], ctx: Any) -> ExecResult:
        flags, values, operands = self._parse(args)
        patterns: list[str] = []
        for p in values.get("e", []):
            patterns.extend(p.split("\n"))
        for name in values.get("f", []):
            try:
                text = ctx.stdin if name == "-" else await ctx.fs.read_file(ctx.fs.resolve_path(ctx.cwd, name))
            except OSError:
                return ExecResult(stderr=f"grep: {name}: No such file or directory\n", exit_code=2)
            patterns.extend(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"))
        if "e" not in values and "f" not in values:
            if not operands:
                raise _Usage("")
            patterns = operands.pop(0).split("\n")
        regex = self._compile(patterns, flags)
        if isinstance(regex, ExecResult):
            return regex

        def number(key: str) -> int | None:
            if key not in values:
                return None
            text = values[key][-1]
            if not re.fullmatch(r"-?\d+", text):
                label = {"m": "max count", "A": "context length", "B": "context length", "C": "context length"}[key]
                raise _Usage(f"invalid {label} argument")
            return int(text)

        context = number("C") or 0
        after = number("A")
        before = number("B")
        after = context if after is None else after
        before = context if before is None else before
        max_count = number("m")
        recursive = bool(flags & {"r", "R"})
        no_operands = not operands
        if no_operands:
            operands = ["."] if recursive else ["-"]
        self._out: list[str] = []
        self._err: list[str] = []
        self._status = 1
        self._error = False
        self._flags = flags
        self._values = values
        self._printed_group = False
        # (display name, path to read or None for stdin), in order
        files: list[tuple[str, str | None]] = []
        several = len(operands) > 1
        for operand in operands:
            if operand == "-":
                files.append((values.get("label", ["(standard input)"])[-1], None))
                continue
            path = ctx.fs.resolve_path(ctx.cwd, operand)
            if recursive and await _is_dir(ctx, path):
                several = True
                shown = "" if no_operands else operand.rstrip("/") or "/"
                await self._walk(ctx, path, shown, files)
                continue
            if not self._wanted(operand, values, command_line=True):
                continue
            files.append((operand, path))
        if "H" in flags:
            with_name = True
        elif "h" in flags:
            with_name = False
        else:
            with_name = several
        for shown, path in files:
            if path is None:
                text = ctx.stdin
            else:
                try:
                    if await _is_dir(ctx, path):
                        if values.get("directories", ["read"])[-1] != "skip":
                            self._problem(f"grep: {shown}: Is a directory\n")
                            if "c" in flags:  # GNU counts what it read of it: nothing
                                self._out.append(f"{shown}:0\n" if with_name else "0\n")
                        continue
                    text = await ctx.fs.read_file(path)
                except OSError as error:
                    reason = "No such file or directory" if isinstance(error, FileNotFoundError) else (
                        "Permission denied" if isinstance(error, PermissionError) else str(error))
                    self._problem(f"grep: {shown}: {reason}\n")
                    continue
            quit_now = self._search(text, shown, regex, with_name, before, after, max_count)
            if quit_now:
                break
        status = 2 if self._error and not ("q" in flags and self._status == 0) else self._status
        return ExecResult(stdout="".join(self._out), stderr="".join(self._err), exit_code=status)

    def _problem(self, message: str) -> None:
        self._error = True
        if "s" not in self._flags:
            self._err.append(message)

    def _wanted(self, path: str, values: dict[str, list[str]], command_line: bool = False) -> bool:
        base = posixpath.basename(path.rstrip("/"))
        includes = values.get("include", [])
        excludes = values.get("exclude", [])
        if any(fnmatch.fnmatchcase(base, g) or (command_line and fnmatch.fnmatchcase(path, g)) for g in excludes):
            return False
        return not includes or any(fnmatch.fnmatchcase(base, g) for g in includes)

    async def _walk(self, ctx: Any, path: str, shown: str, files: list[tuple[str, str | None]]) -> None:
        try:
            entries = await ctx.fs.readdir_with_file_types(path)
        except OSError:
            self._problem(f"grep: {shown or '.'}: Permission denied\n")
            return
        for entry in sorted(entries, key=lambda e: e.name):
            child = f"{path.rstrip('/')}/{entry.name}"
            name = f"{shown}/{entry.name}" if shown else entry.name
            if shown == "/":
                name = "/" + entry.name
            if entry.is_symbolic_link and "R" not in self._flags:
                continue
            if entry.is_directory or (entry.is_symbolic_link and await _is_dir(ctx, child)):
                if any(fnmatch.fnmatchcase(entry.name, g) for g in self._values.get("exclude-dir", [])):
                    continue
                await self._walk(ctx, child, name, files)
            elif self._wanted(name, self._values):
                files.append((name, child))

    def _compile(self, patterns: list[str], flags: set[str]) -> Any:
        parts = []
        for p in patterns:
            if "F" in flags:
                parts.append(re.escape(p))
            elif "P" in flags:
                parts.append(p)
            else:
                parts.append(translate(p, "E" in flags))
        if "x" in flags:
            parts = [f"(?:{p})\\Z" for p in parts]
        elif "w" in flags:
            parts = [f"(?<![A-Za-z0-9_])(?:{p})(?![A-Za-z0-9_])" for p in parts]
        try:
            return re.compile("|".join(f"(?:{p})" for p in parts), re.IGNORECASE if "i" in flags else 0)
        except re.error as error:
            return ExecResult(stderr=f"grep: {error}\n", exit_code=2)

    def _search(self, text: str, shown: str, regex: Any, with_name: bool, before: int, after: int,
                max_count: int | None) -> bool:
        flags = self._flags
        sep_char = "\0" if "z" in flags else "\n"
        lines = text.split(sep_char)
        if lines and lines[-1] == "":
            lines.pop()
        invert = "v" in flags
        full = "x" in flags
        binary = "\0" in text and "a" not in flags and "z" not in flags
        matched: list[int] = []
        for number, line in enumerate(lines):
            if max_count is not None and len(matched) >= max_count:
                break
            hit = (regex.match(line) if full else regex.search(line)) is not None
            if hit != invert:
                matched.append(number)
        if matched:
            self._status = 0
            if "q" in flags:
                return True
        name_end = "\0" if "Z" in flags else ":"
        if "c" in flags:
            self._out.append(f"{shown}{name_end}{len(matched)}\n" if with_name else f"{len(matched)}\n")
            return False
        if "l" in flags or "L" in flags:
            if bool(matched) == ("l" in flags):
                self._out.append(shown + ("\0" if "Z" in flags else "\n"))
            return False
        if "q" in flags or not matched:
            return False
        if binary:
            self._out_binary(shown)
            return False
        chosen = set(matched)
        shown_lines: list[int] = []
        if before or after:
            wanted: set[int] = set()
            for n in matched:
                wanted.update(range(max(0, n - before), min(len(lines), n + after + 1)))
            shown_lines = sorted(wanted)
        else:
            shown_lines = matched
        previous = None
        for n in shown_lines:
            if (before or after) and ((previous is not None and n > previous + 1) or
                                      (previous is None and self._printed_group)):
                self._out.append("--\n")
            previous = n
            is_match = n in chosen
            mark = ":" if is_match else "-"
            prefix = ""
            if with_name:
                prefix += shown + ("\0" if "Z" in flags else mark)
            if "n" in flags:
                prefix += f"{n + 1}{mark}"
            line = lines[n]
            if "o" in flags:
                if not is_match or invert:
                    continue
                for m in regex.finditer(line):
                    if m.group(0):
                        self._out.append(f"{prefix}{m.group(0)}{sep_char}")
            else:
                self._out.append(f"{prefix}{line}{sep_char}")
        self._printed_group = True
        return False

    def _out_binary(self, shown: str) -> None:
        self._err.append(f"grep: {shown}: binary file matches\n")


async def _is_dir(ctx: Any, path: str) -> bool:
    try:
        return bool(await ctx.fs.is_directory(path))
    except OSError:
        return False
