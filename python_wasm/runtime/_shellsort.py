"""`sort` for the sandbox's shell, written to GNU sort's behaviour (replaces just-bash's).

just-bash's sort (commands/sort/sort.py) applied `-n`/`-r` given beside `-k` to nothing
(`sort -t, -k2 -nr` sorted the field as text), had no last-resort comparison (lines with
equal keys came out in input order instead of by the whole line), sorted lines that are
not numbers after the numbers under `-n` (GNU: they are 0), took `-k2` for the field
alone (GNU: from field 2 to the end of the line) and had no `-g`, `-R`, `-z`, `-C`. This
one follows GNU coreutils' sort.c: key fields found as it finds them (blanks belong to
the field after them unless `-b`), options global or per key (a key without any takes
the global ones), `-s` and `-u` drop the last resort, text compared by code point (the
C.UTF-8 locale's order).
"""

from __future__ import annotations

import math
import random
import re
from decimal import Decimal
from functools import cmp_to_key
from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.types import ExecResult
# isort: on

_BLANKS = " \t"
_ORDERING = "bdfgiMhnRrV"
_MONTHS = {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())}
_UNITS = "KMGTPEZYRQ"
_NUMBER = re.compile(r"[ \t]*(-?)(\d*)(\.\d*)?")
_GENERAL = re.compile(r"[ \t\n\v\f\r]*([-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf(?:inity)?|nan))", re.I)


class _Fail(Exception):
    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


class Key:
    def __init__(self, sword: int = 0, schar: int = 0, eword: int | None = None, echar: int = 0) -> None:
        self.sword, self.schar, self.eword, self.echar = sword, schar, eword, echar
        self.opts = ""
        self.skip_start = self.skip_end = False

    def set_opts(self, opts: str, start: bool | None = None) -> None:
        for c in opts:
            if c == "b":
                if start is None or start:
                    self.skip_start = True
                if start is None or not start:
                    self.skip_end = True
            elif c not in self.opts:
                self.opts += c


def _parse_key(spec: str) -> Key:
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?([" + _ORDERING + r"]*)(?:,(\d+)(?:\.(\d+))?([" + _ORDERING + r"]*))?", spec)
    if not m:
        raise _Fail(f"sort: invalid key specification '{spec}'")  # close to GNU's several wordings
    sword = int(m.group(1))
    if sword == 0:
        raise _Fail(f"sort: field number is zero: invalid field specification '{spec}'")
    schar = int(m.group(2)) if m.group(2) else 1
    if schar == 0:
        raise _Fail(f"sort: character offset is zero: invalid field specification '{spec}'")
    key = Key(sword - 1, schar - 1)
    key.set_opts(m.group(3), start=True)
    if m.group(4) is not None:
        eword = int(m.group(4))
        if eword == 0:
            raise _Fail(f"sort: field number is zero: invalid field specification '{spec}'")
        key.eword = eword - 1
        key.echar = int(m.group(5)) if m.group(5) else 0
        key.set_opts(m.group(6), start=False)
    return key


def _begin(line: str, key: Key, tab: str | None) -> int:
    ptr, lim = 0, len(line)
    for _ in range(key.sword):
        if ptr >= lim:
            break
        if tab is not None:
            while ptr < lim and line[ptr] != tab:
                ptr += 1
            if ptr < lim:
                ptr += 1
        else:
            while ptr < lim and line[ptr] in _BLANKS:
                ptr += 1
            while ptr < lim and line[ptr] not in _BLANKS:
                ptr += 1
    if key.skip_start:
        while ptr < lim and line[ptr] in _BLANKS:
            ptr += 1
    return min(lim, ptr + key.schar)


def _limit(line: str, key: Key, tab: str | None) -> int:
    lim = len(line)
    if key.eword is None:
        return lim
    eword, echar = key.eword, key.echar
    if echar == 0:
        eword += 1
    ptr = 0
    while ptr < lim and eword:
        eword -= 1
        if tab is not None:
            while ptr < lim and line[ptr] != tab:
                ptr += 1
            if ptr < lim and (eword or echar):
                ptr += 1
        else:
            while ptr < lim and line[ptr] in _BLANKS:
                ptr += 1
            while ptr < lim and line[ptr] not in _BLANKS:
                ptr += 1
    if echar:
        if key.skip_end:
            while ptr < lim and line[ptr] in _BLANKS:
                ptr += 1
        ptr = min(lim, ptr + echar)
    return ptr


def _numeric(text: str) -> Decimal:
    m = _NUMBER.match(text)
    if not m or not (m.group(2) or (m.group(3) and len(m.group(3)) > 1)):
        return Decimal(0)
    return Decimal((m.group(1) or "") + (m.group(2) or "0") + (m.group(3) or "").rstrip(".") or "0")


def _general(text: str) -> tuple[int, float]:
    m = _GENERAL.match(text)
    if not m:
        return (0, 0.0)
    value = float(m.group(1))
    return (1, 0.0) if math.isnan(value) else (2, value)


def _human(text: str) -> tuple[int, Decimal]:
    m = re.match(r"[ \t]*(-?)(\d*(?:\.\d*)?)([kKMGTPEZYRQ]?)", text)
    if not m or not re.search(r"\d", m.group(2)):
        return (0, Decimal(0))
    value = Decimal(m.group(1) + (m.group(2).rstrip(".") or "0"))
    order = _UNITS.index(m.group(3).upper()) + 1 if m.group(3) else 0
    sign = -1 if value < 0 else (1 if value > 0 else 0)
    return (sign * order, value)


def _order(c: str) -> int:
    if c.isdigit():
        return 0
    if c.isalpha():
        return ord(c)
    if c == "~":
        return -1
    return ord(c) + 256


def _verrevcmp(a: str, b: str) -> int:
    """gnulib's filevercmp.c verrevcmp (`sort -V`)."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _version_cmp(a: str, b: str) -> int:
    if a == b:
        return 0
    for special in ("", ".", ".."):
        if a == special:
            return -1
        if b == special:
            return 1
    if a.startswith(".") != b.startswith("."):
        return -1 if a.startswith(".") else 1

    def suffix_free(s: str) -> str:
        m = re.search(r"(?:\.[A-Za-z~][A-Za-z0-9~]*)*$", s)
        return s[:m.start()] if m else s

    diff = _verrevcmp(suffix_free(a), suffix_free(b))
    return diff or _verrevcmp(a, b) or (-1 if a < b else 1)


def _value(text: str, opts: str, salt: int) -> Any:
    if "n" in opts:
        return _numeric(text)
    if "g" in opts:
        return _general(text)
    if "h" in opts:
        return _human(text)
    if "M" in opts:
        return _MONTHS.get(text.lstrip(_BLANKS + "\n\v\f\r")[:3].upper(), 0)
    if "R" in opts:
        return hash((salt, text))
    if "d" in opts:
        text = "".join(c for c in text if c.isalnum() or c in _BLANKS)
    elif "i" in opts:
        text = "".join(c for c in text if c.isprintable())
    if "f" in opts:
        text = text.upper()
    return text


def _cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


class SortCommand:
    name = "sort"

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        try:
            return await self._run(args, ctx)
        except _Fail as problem:
            return ExecResult(stderr=f"{problem}\n", exit_code=problem.status)

    def _parse(self, args: list[str]) -> tuple[str, list[Key], dict[str, Any], list[str]]:
        glob = ""
        keys: list[Key] = []
        settings: dict[str, Any] = {"tab": None, "output": None, "check": None, "unique": False,
                                    "stable": False, "zero": False}
        files: list[str] = []
        longs = {"--numeric-sort": "n", "--general-numeric-sort": "g", "--human-numeric-sort": "h",
                 "--month-sort": "M", "--version-sort": "V", "--random-sort": "R", "--reverse": "r",
                 "--ignore-case": "f", "--dictionary-order": "d", "--ignore-nonprinting": "i",
                 "--ignore-leading-blanks": "b", "--unique": "u", "--stable": "s", "--zero-terminated": "z",
                 "--merge": "m", "--check": "c"}
        i = 0

        def value(option: str, rest: str) -> str:
            nonlocal i
            if rest:
                return rest
            if i >= len(args):
                raise _Fail(f"sort: option requires an argument -- '{option}'\n"
                            "Try 'sort --help' for more information.")
            i += 1
            return args[i - 1]

        def apply(c: str) -> None:
            nonlocal glob
            if c in _ORDERING:
                glob += c
            elif c == "u":
                settings["unique"] = True
            elif c == "s":
                settings["stable"] = True
            elif c == "z":
                settings["zero"] = True
            elif c == "c":
                settings["check"] = "c"
            elif c == "C":
                settings["check"] = "C"

        def set_tab(tab: str) -> None:
            if tab == "\\0":
                tab = "\0"
            if not tab:
                raise _Fail("sort: empty tab")
            if len(tab) > 1:
                raise _Fail(f"sort: multi-character tab '{tab}'")
            settings["tab"] = tab

        while i < len(args):
            arg = args[i]
            i += 1
            if arg == "--":
                files.extend(args[i:])
                break
            if arg.startswith("--"):
                name, eq, val = arg.partition("=")
                if name in longs:
                    if name == "--check" and val in ("quiet", "silent"):
                        apply("C")
                    else:
                        apply(longs[name])
                elif name in ("--key", "--field-separator", "--output", "--buffer-size", "--temporary-directory",
                              "--parallel", "--batch-size", "--sort", "--random-source", "--compress-program",
                              "--files0-from"):
                    if not eq:
                        val = value(name, "")
                    if name == "--key":
                        keys.append(_parse_key(val))
                    elif name == "--field-separator":
                        set_tab(val)
                    elif name == "--output":
                        settings["output"] = val
                    elif name == "--sort":
                        apply({"general-numeric": "g", "human-numeric": "h", "month": "M", "numeric": "n",
                               "random": "R", "version": "V"}.get(val, ""))
                elif name == "--debug":
                    pass
                else:
                    raise _Fail(f"sort: unrecognized option '{arg}'\nTry 'sort --help' for more information.")
                continue
            if arg.startswith("-") and arg != "-":
                j = 1
                while j < len(arg):
                    c = arg[j]
                    j += 1
                    if c in _ORDERING or c in "uszcCm":
                        apply(c)
                    elif c in "ktoST":
                        val = value(c, arg[j:])
                        if c == "k":
                            keys.append(_parse_key(val))
                        elif c == "t":
                            set_tab(val)
                        elif c == "o":
                            settings["output"] = val
                        break
                    else:
                        raise _Fail(f"sort: invalid option -- '{c}'\nTry 'sort --help' for more information.")
                continue
            files.append(arg)
        return glob, keys, settings, files

    async def _run(self, args: list[str], ctx: Any) -> ExecResult:
        glob, keys, settings, files = self._parse(args)
        for key in keys:
            if not key.opts and not key.skip_start and not key.skip_end:
                key.set_opts(glob)
        whole = not keys
        if whole:
            key = Key()
            key.set_opts(glob)
            keys = [key]
        reverse = "r" in glob
        tab = settings["tab"]
        end = "\0" if settings["zero"] else "\n"
        lines: list[str] = []
        for name in files or ["-"]:
            if name == "-":
                text = ctx.stdin
            else:
                try:
                    text = await ctx.fs.read_file(ctx.fs.resolve_path(ctx.cwd, name))
                except IsADirectoryError:
                    raise _Fail(f"sort: read failed: {name}: Is a directory") from None
                except OSError as error:
                    reason = "No such file or directory" if isinstance(error, FileNotFoundError) else str(error)
                    raise _Fail(f"sort: cannot read: {name}: {reason}") from None
            parts = text.split(end)
            if parts and parts[-1] == "":
                parts.pop()
            lines.extend(parts)
        salt = random.getrandbits(64)
        plain = all(k.opts in ("", "r") and not (k.skip_start or k.skip_end) for k in keys)

        def values(line: str) -> list[Any]:
            out = []
            for k in keys:
                if whole:
                    text = line.lstrip(_BLANKS) if k.skip_start else line
                else:
                    begin, limit = _begin(line, k, tab), _limit(line, k, tab)
                    text = line[begin:limit] if begin < limit else ""
                out.append(_value(text, k.opts, salt))
            return out

        prepared = [(values(line), line) for line in lines] if not (plain and whole) else None
        last_resort = not (settings["stable"] or settings["unique"])

        def compare_keys(a: tuple[list[Any], str], b: tuple[list[Any], str]) -> int:
            for k, x, y in zip(keys, a[0], b[0], strict=True):
                diff = _version_cmp(x, y) if "V" in k.opts else _cmp(x, y)
                if diff:
                    return -diff if "r" in k.opts else diff
            return 0

        def compare(a: tuple[list[Any], str], b: tuple[list[Any], str]) -> int:
            diff = compare_keys(a, b)
            if diff or not last_resort:
                return diff
            diff = _cmp(a[1], b[1])
            return -diff if reverse else diff

        if settings["check"]:
            items = prepared if prepared is not None else [([line], line) for line in lines]
            for n in range(1, len(items)):
                diff = compare(items[n - 1], items[n])
                if diff > 0 or (diff == 0 and settings["unique"]):
                    if settings["check"] == "c":
                        where = files[0] if files else "-"
                        return ExecResult(stderr=f"sort: {where}:{n + 1}: disorder: {items[n][1]}\n", exit_code=1)
                    return ExecResult(exit_code=1)
            return ExecResult()
        if prepared is None:  # the whole line as text, maybe reversed: Python's own order
            ordered = sorted(lines, reverse=reverse)
            if settings["unique"]:
                ordered = [line for n, line in enumerate(ordered) if n == 0 or line != ordered[n - 1]]
        else:
            items = sorted(prepared, key=cmp_to_key(compare))
            if settings["unique"]:
                items = [it for n, it in enumerate(items) if n == 0 or compare_keys(items[n - 1], it) != 0]
            ordered = [line for _, line in items]
        output = "".join(line + end for line in ordered)
        if settings["output"]:
            target = settings["output"]
            try:
                await ctx.fs.write_file(ctx.fs.resolve_path(ctx.cwd, target), output)
            except OSError as error:
                return ExecResult(stderr=f"sort: open failed: {target}: {error}\n", exit_code=2)
            return ExecResult()
        return ExecResult(stdout=output)


__all__ = ["SortCommand"]
