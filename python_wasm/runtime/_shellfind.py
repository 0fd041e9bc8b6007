"""`find` for the sandbox's shell, written to GNU find's behaviour (replaces just-bash's).

just-bash's find (commands/find/find.py) took one action for the whole expression (so
`-name x -print -o -prune` and `-print0` after a test were lost), had no `-prune`,
`-mmin`, `-printf`, `-quit` or `-exec ... +`, handed `-exec` the absolute path with its
words joined unquoted, and rounded `-size` as no find does. Here the expression is
GNU's: tests and actions are one expression of `!`/`-not`, `-a`, `-o`, `,` and
parentheses, with `-print` added when it has no action; `-size N[ckMG]` rounds up to
the unit; `-exec` gets the path as find shows it. Entries of a folder are visited in
name order (GNU: the directory's own order, which no two filesystems share).
"""

from __future__ import annotations

import fnmatch
import math
import re
import time
from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.types import ExecResult
# isort: on

_TESTS_WITH_VALUE = {"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
                     "-type", "-xtype", "-size", "-mtime", "-mmin", "-atime", "-amin", "-ctime", "-cmin", "-newer",
                     "-perm", "-user", "-group", "-uid", "-gid", "-links", "-lname", "-ilname", "-samefile",
                     "-inum", "-fstype", "-printf", "-fprint", "-used"}
_TESTS = {"-empty", "-true", "-false", "-readable", "-writable", "-executable", "-nouser", "-nogroup"}
_ACTIONS = {"-print", "-print0", "-delete", "-prune", "-quit", "-ls"}
_OPTIONS_WITH_VALUE = {"-maxdepth", "-mindepth"}
_OPTIONS = {"-depth", "-xdev", "-mount", "-noleaf", "-follow", "-ignore_readdir_race", "-regextype", "-nowarn",
            "-warn", "-daystart"}
_SIZE_UNITS = {"c": 1, "w": 2, "b": 512, "k": 1024, "M": 1024**2, "G": 1024**3}


class _Fail(Exception):
    pass


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.has_action = False
        self.options: dict[str, Any] = {"maxdepth": None, "mindepth": 0, "depth": False}

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def parse(self) -> Any:
        if self.peek() is None:
            return ("true",)
        node = self.comma()
        if self.peek() is not None:
            raise _Fail(f"paths must precede expression: ‘{self.peek()}’" if self.peek() != ")"
                        else "invalid expression; you have too many ')'")
        return node

    def comma(self) -> Any:
        node = self.or_()
        while self.peek() == ",":
            self.pos += 1
            node = ("comma", node, self.or_())
        return node

    def or_(self) -> Any:
        node = self.and_()
        while self.peek() in ("-o", "-or"):
            self.pos += 1
            node = ("or", node, self.and_())
        return node

    def and_(self) -> Any:
        node = self.not_()
        while True:
            token = self.peek()
            if token in ("-a", "-and"):
                self.pos += 1
                node = ("and", node, self.not_())
            elif token is not None and token not in ("-o", "-or", ")", ","):
                node = ("and", node, self.not_())
            else:
                return node

    def not_(self) -> Any:
        if self.peek() in ("!", "-not"):
            self.pos += 1
            return ("not", self.not_())
        return self.primary()

    def value(self, name: str) -> str:
        if self.pos >= len(self.tokens):
            raise _Fail(f"missing argument to ‘{name}’")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def primary(self) -> Any:
        token = self.peek()
        if token is None:
            raise _Fail("invalid expression")
        self.pos += 1
        if token == "(":
            node = self.comma()
            if self.peek() != ")":
                raise _Fail("invalid expression; I was expecting to find a ')' somewhere but did not see one.")
            self.pos += 1
            return node
        if token in _OPTIONS_WITH_VALUE:
            text = self.value(token)
            if not text.isdigit():
                raise _Fail(f"Expected a positive decimal integer argument to {token}, but got ‘{text}’")
            self.options[token[1:]] = int(text)
            return ("true",)
        if token in _OPTIONS:
            if token == "-depth":
                self.options["depth"] = True
            if token == "-regextype":
                self.value(token)
            return ("true",)
        if token in ("-exec", "-execdir", "-ok", "-okdir"):
            words: list[str] = []
            while True:
                if self.pos >= len(self.tokens):
                    raise _Fail(f"missing argument to ‘{token}’")
                word = self.tokens[self.pos]
                self.pos += 1
                if word == ";" or (word == "+" and words and words[-1] == "{}"):
                    break
                words.append(word)
            self.has_action = True
            return ("exec", token, words, word == "+", [])
        if token in _ACTIONS:
            if token != "-prune":
                self.has_action = True
            if token == "-delete":
                self.options["depth"] = True
            return (token[1:],)
        if token in _TESTS:
            return (token[1:],)
        if token in _TESTS_WITH_VALUE:
            value = self.value(token)
            if token in ("-printf", "-fprint"):
                self.has_action = True
            if token == "-type" and any(c not in "fdlpscD," for c in value):
                raise _Fail(f"Unknown argument to -type: {value}")
            return (token[1:], value)
        raise _Fail(f"unknown predicate ‘{token}’")


class FindCommand:
    name = "find"

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        i = 0
        while i < len(args) and args[i] in ("-H", "-L", "-P"):
            i += 1
        paths: list[str] = []
        while i < len(args) and not (args[i].startswith("-") and len(args[i]) > 1) and args[i] not in ("!", "(", ")", ","):
            paths.append(args[i])
            i += 1
        parser = _Parser(args[i:])
        try:
            expr = parser.parse()
        except _Fail as problem:
            return ExecResult(stderr=f"find: {problem}\n", exit_code=1)
        if not parser.has_action:
            expr = ("and", expr, ("print",))
        self.ctx = ctx
        self.out: list[str] = []
        self.err: list[str] = []
        self.status = 0
        self.options = parser.options
        self.now = time.time()
        self.quit = False
        self.batches: list[Any] = []
        for start in paths or ["."]:
            if self.quit:
                break
            real = ctx.fs.resolve_path(ctx.cwd, start)
            try:
                st = await ctx.fs.lstat(real)
            except OSError:
                self.err.append(f"find: ‘{start}’: No such file or directory\n")
                self.status = 1
                continue
            await self._visit(expr, real, start, st, 0)
        for node in self.batches:
            if node[4]:
                await self._run(node, node[4])
        return ExecResult(stdout="".join(self.out), stderr="".join(self.err), exit_code=self.status)

    async def _visit(self, expr: Any, real: str, shown: str, st: Any, depth: int) -> None:
        maxdepth, mindepth = self.options["maxdepth"], self.options["mindepth"]
        self._pruned = False
        if not self.options["depth"] and depth >= mindepth:
            await self._eval(expr, real, shown, st, depth)
        pruned = self._pruned
        if st.is_directory and not pruned and not self.quit and (maxdepth is None or depth < maxdepth):
            try:
                names = sorted(await self.ctx.fs.readdir(real))
            except OSError:
                self.err.append(f"find: ‘{shown}’: Permission denied\n")
                self.status = 1
                names = []
            for name in names:
                if self.quit:
                    return
                child_real = real.rstrip("/") + "/" + name
                child_shown = shown + name if shown.endswith("/") else f"{shown}/{name}"
                try:
                    child = await self.ctx.fs.lstat(child_real)
                except OSError:
                    continue
                await self._visit(expr, child_real, child_shown, child, depth + 1)
        if self.options["depth"] and depth >= mindepth and not self.quit:
            await self._eval(expr, real, shown, st, depth)

    async def _eval(self, node: Any, real: str, shown: str, st: Any, depth: int) -> bool:
        kind = node[0]
        if kind == "and":
            return await self._eval(node[1], real, shown, st, depth) and await self._eval(node[2], real, shown, st,
                                                                                             depth)
        if kind == "or":
            return await self._eval(node[1], real, shown, st, depth) or await self._eval(node[2], real, shown, st,
                                                                                            depth)
        if kind == "comma":
            await self._eval(node[1], real, shown, st, depth)
            return await self._eval(node[2], real, shown, st, depth)
        if kind == "not":
            return not await self._eval(node[1], real, shown, st, depth)
        if kind == "true":
            return True
        if kind == "false":
            return False
        if kind == "print":
            self.out.append(shown + "\n")
            return True
        if kind == "print0":
            self.out.append(shown + "\0")
            return True
        if kind == "fprint":
            return True
        if kind == "printf":
            self.out.append(self._printf(node[1], real, shown, st, depth))
            return True
        if kind == "ls":
            self.out.append(f"{st.size} {shown}\n")
            return True
        if kind == "prune":
            self._pruned = True
            return True
        if kind == "quit":
            self.quit = True
            return True
        if kind == "delete":
            try:
                await self.ctx.fs.rm(real, recursive=False)
            except OSError as error:
                self.err.append(f"find: cannot delete ‘{shown}’: {error}\n")
                self.status = 1
                return False
            return True
        if kind == "exec":
            if node[3]:
                if node not in self.batches:
                    self.batches.append(node)
                node[4].append(shown)
                return True
            return await self._run(node, [shown])
        base = shown.rstrip("/").rsplit("/", 1)[-1] or "/"
        value = node[1] if len(node) > 1 else None
        if kind in ("name", "iname"):
            flag = kind == "iname"
            return fnmatch.fnmatchcase(base.lower() if flag else base, value.lower() if flag else value)
        if kind in ("path", "ipath", "wholename", "iwholename"):
            flag = kind.startswith("i")
            return fnmatch.fnmatchcase(shown.lower() if flag else shown, value.lower() if flag else value)
        if kind in ("regex", "iregex"):
            return re.fullmatch(value, shown, re.IGNORECASE if kind == "iregex" else 0) is not None
        if kind in ("type", "xtype"):
            mine = "l" if st.is_symbolic_link else ("d" if st.is_directory else ("f" if st.is_file else "p"))
            return mine in value.split(",") or mine in value
        if kind == "size":
            m = re.fullmatch(r"([+-]?)(\d+)([cwbkMG]?)", value)
            if not m:
                self.err.append(f"find: invalid -size argument ‘{value}’\n")
                self.status = 1
                self.quit = True
                return False
            unit = _SIZE_UNITS[m.group(3) or "b"]
            size = math.ceil(st.size / unit) if unit > 1 else st.size
            return _compare(size, m.group(1), int(m.group(2)))
        if kind in ("mtime", "atime", "ctime", "mmin", "amin", "cmin"):
            m = re.fullmatch(r"([+-]?)(\d+)", value)
            if not m:
                return False
            unit = 60 if kind.endswith("min") else 86400
            age = (self.now - (st.mtime or 0)) / unit
            amount = math.ceil(age) if unit == 60 else math.floor(age)
            return _compare(amount, m.group(1), int(m.group(2)))
        if kind == "newer":
            try:
                ref = await self.ctx.fs.stat(self.ctx.fs.resolve_path(self.ctx.cwd, value))
            except OSError:
                self.err.append(f"find: ‘{value}’: No such file or directory\n")
                self.status = 1
                self.quit = True
                return False
            return (st.mtime or 0) > (ref.mtime or 0)
        if kind == "empty":
            if st.is_directory:
                try:
                    return not await self.ctx.fs.readdir(real)
                except OSError:
                    return False
            return st.is_file and st.size == 0
        if kind in ("readable", "writable"):
            return True
        if kind == "executable":
            return bool(st.mode & 0o111)
        if kind == "perm":
            mode = st.mode & 0o7777
            m = re.fullmatch(r"([-/]?)([0-7]+)", value)
            if not m:
                return False
            want = int(m.group(2), 8)
            if m.group(1) == "-":
                return mode & want == want
            if m.group(1) == "/":
                return bool(mode & want) or want == 0
            return mode == want
        if kind == "links":
            m = re.fullmatch(r"([+-]?)(\d+)", value)
            return bool(m) and _compare(getattr(st, "nlink", 1) or 1, m.group(1), int(m.group(2)))
        return False  # -user, -group and the like: WASI has no owners

    async def _run(self, node: Any, names: list[str]) -> bool:
        words = []
        for word in node[2]:
            if word == "{}" and node[3]:
                words.extend(names)
            else:
                words.append(word.replace("{}", names[0]))
        if not words:
            return True
        result = await self.ctx.exec(" ".join(_quote(w) for w in words), {"cwd": self.ctx.cwd})
        self.out.append(result.stdout)
        self.err.append(result.stderr)
        if node[3] and result.exit_code:
            self.status = 1
        return result.exit_code == 0

    def _printf(self, fmt: str, real: str, shown: str, st: Any, depth: int) -> str:
        out: list[str] = []
        i = 0
        escapes = {"n": "\n", "t": "\t", "\\": "\\", "0": "\0", "a": "\a", "r": "\r"}
        while i < len(fmt):
            c = fmt[i]
            if c == "\\" and i + 1 < len(fmt):
                out.append(escapes.get(fmt[i + 1], "\\" + fmt[i + 1]))
                i += 2
                continue
            if c == "%" and i + 1 < len(fmt):
                m = re.match(r"%([-0-9.]*)([a-zA-Z%])", fmt[i:])
                if m:
                    width, d = m.group(1), m.group(2)
                    base = shown.rstrip("/").rsplit("/", 1)[-1]
                    head = shown.rsplit("/", 1)[0] if "/" in shown else "."
                    start = shown.split("/", 1)
                    values = {"p": shown, "f": base, "h": head, "s": str(st.size), "d": str(depth),
                              "P": start[1] if len(start) > 1 and depth else "",
                              "m": f"{st.mode & 0o7777:o}", "y": "d" if st.is_directory else "f", "%": "%",
                              "t": time.ctime(st.mtime or 0), "T": str(st.mtime or 0)}
                    text = values.get(d, "")
                    out.append(f"%{width}s" % text if width else text)
                    i += len(m.group(0))
                    continue
            out.append(c)
            i += 1
        return "".join(out)


def _compare(actual: int, sign: str, wanted: int) -> bool:
    if sign == "+":
        return actual > wanted
    if sign == "-":
        return actual < wanted
    return actual == wanted
