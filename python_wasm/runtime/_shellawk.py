"""`awk` for the sandbox's shell: a POSIX awk written to gawk/mawk's behaviour (replaces just-bash's).

just-bash's awk matched no expression pattern (`$2 > 5`, `!seen[$0]++`, ranges), used
`$1` as the literal key of `count[$1]++`, filled nothing with split(), printed numbers
Python's way (`6.0`) and kept the backslash of `-v OFS='\\t'`. This one parses the
whole POSIX grammar (runtime/_shellawkparse.py) and compiles the program to Python
source once, so a record costs a few Python calls: patterns and ranges, BEGIN/END,
associative arrays with SUBSEP keys, user functions (arrays by reference), getline in
its forms, printf with C's formats, numeric strings compared as POSIX says, output
through OFMT/CONVFMT, `print > file`, `| "cmd"`, `"cmd" | getline` and system() run
through the sandbox's own shell.

Differences kept: `for (k in a)` visits keys in the order they were made (gawk's and
mawk's orders are their hash tables'; pipe to sort for a defined one); strings are
characters, not bytes (length("é") is 1, as gawk in a UTF-8 locale).
"""

from __future__ import annotations

import math
import random
import re
import time
from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb
from just_bash.types import ExecResult
from runtime import _shellgrep
from runtime._shellawkparse import AwkSyntaxError, parse, unescape
# isort: on

# Output past this many characters ends the program (an endless print loop would
# otherwise fill the run's memory before its time limit).
MAX_OUTPUT = 256 * 1024 * 1024
_INF = float("inf")


class AwkError(Exception):
    """A run-time error: `awk: <message>`, exit 2."""


class _Next(Exception):
    pass


class _NextFile(Exception):
    pass


class _Exit(Exception):
    def __init__(self, code: int | None) -> None:
        super().__init__(code)
        self.code = code


class SN(str):
    """A string from input (fields, getline, split(), -v, ARGV, ENVIRON): compared as a
    number when it looks like one (POSIX's numeric string)."""

    __slots__ = ()


class _Uninit(SN):
    """The value of what was never assigned: "" and 0 at once."""

    __slots__ = ()


UNINIT = _Uninit("")

_NUM_PREFIX = re.compile(r"[ \t\n\r\f\v]*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
_NUMERIC = re.compile(r"[ \t\n\r\f\v]*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[ \t\n\r\f\v]*\Z")
_SPECIAL_FLOAT = re.compile(r"[ \t\n\r\f\v]*[-+]?(?:inf|nan)", re.I)


def num(v: Any) -> float:
    """awk's numeric value of `v` (its leading number; 0 when none)."""
    if type(v) is float:
        return v
    try:
        f = float(v)
    except ValueError:
        m = _NUM_PREFIX.match(v)
        return float(m.group(1)) if m else 0.0
    if f - f == 0.0 and "_" not in v:  # finite: not "inf"/"nan" text, no Python digit separators
        return f
    if _SPECIAL_FLOAT.match(v) and v.strip()[:1] in "+-":  # gawk: "+inf", "-nan" are numbers
        return f
    m = _NUM_PREFIX.match(v)
    return float(m.group(1)) if m else 0.0


def looks_numeric(v: str) -> bool:
    if type(v) is _Uninit:
        return True
    try:
        f = float(v)
    except ValueError:
        return False
    if f - f == 0.0 and "_" not in v:
        return True
    return bool(_NUMERIC.match(v))


class Awk:
    """One run of a program: its variables, record, files and output."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.out: list[str] = []
        self.err: list[str] = []
        self.size = 0
        self.rec: str = SN("")
        self.fields: list[str] | None = []
        self.nf = 0
        self.split_fs = " "
        self.g: dict[str, Any] = {}
        self.files: dict[str, list[Any]] = {}  # name -> [kind, chunks, written]
        self.readers: dict[str, Any] = {}
        self.regexes: dict[str, Any] = {}
        self.formats: dict[str, list[Any]] = {}
        self.main_input: Any = None
        self.arg_index = 1
        self.had_file = False
        self.source = ""
        self.seed = 0.0
        self.rng = random.Random(0)
        self.prev_seed = 0.0

    # -- conversions ----------------------------------------------------------------
    def tostr(self, v: Any) -> str:
        if type(v) is not float:
            return v
        if v == int(v) if v - v == 0.0 else False:
            return str(int(v))
        return self.fmtnum(self.g["V_CONVFMT"], v)

    def outstr(self, v: Any) -> str:
        if type(v) is not float:
            return v
        if v == int(v) if v - v == 0.0 else False:
            return str(int(v))
        return self.fmtnum(self.g["V_OFMT"], v)

    def fmtnum(self, fmt: Any, v: float) -> str:
        if v != v:
            return "-nan" if math.copysign(1, v) < 0 else "nan"
        if v in (_INF, -_INF):
            return "inf" if v > 0 else "-inf"
        return self.sprintf(self.tostr(fmt) if type(fmt) is float else fmt, [v])

    def key(self, v: Any) -> str:
        if type(v) is not float:
            return v
        if v == int(v) if v - v == 0.0 else False:
            return str(int(v))
        return self.fmtnum(self.g["V_CONVFMT"], v)

    # -- regular expressions ----------------------------------------------------------
    def regex(self, pattern: Any) -> Any:
        if type(pattern) is float:
            pattern = self.tostr(pattern)
        rx = self.regexes.get(pattern)
        if rx is None:
            rx = self.regexes[pattern] = compile_regex(pattern)
        return rx

    # -- the record -----------------------------------------------------------------
    def set_record(self, text: str) -> None:
        self.rec = text if type(text) is SN else SN(text)
        self.fields = None
        self.split_fs = self.g["V_FS"]

    def split_record(self) -> list[str]:
        fields = self.split_text(self.rec, self.split_fs, paragraph=self.g["V_RS"] == "")
        self.fields = fields
        self.nf = len(fields)
        return fields

    def split_text(self, text: str, fs: Any, paragraph: bool = False) -> list[str]:
        if type(fs) is float:
            fs = self.tostr(fs)
        if fs == " ":
            return list(map(SN, _BLANKS.findall(text)))
        if text == "":
            return []
        if fs == "":  # each character a field (gawk, mawk)
            return [SN(c) for c in text]
        if paragraph and fs != "\n":
            return [SN(f) for part in text.split("\n") for f in self.split_text(part, fs)] if "\n" in text else \
                self.split_text(text, fs)
        if len(fs) == 1 and fs != "\\":
            if fs == "\t" or not fs.isalnum():
                return list(map(SN, text.split(fs)))
        if fs == "\\":
            return [SN(f) for f in text.split("\\")]
        return [SN(f) for f in self.regex(fs).split(text)] if self.regex(fs).groups == 0 else \
            [SN(f) for f in _split_groups(self.regex(fs), text)]

    def field(self, i: Any) -> str:
        if type(i) is not int:
            i = self.index(i)
        if i == 0:
            return self.rec
        fields = self.fields
        if fields is None:
            fields = self.split_record()
        if i <= self.nf:
            return fields[i - 1]
        return UNINIT

    def index(self, i: Any) -> int:
        f = num(i)
        if f < 0 or f != f:
            raise AwkError(f"trying to access out of range field {self.tostr(f)}")
        if f > 10_000_000:
            raise AwkError(f"field index {self.tostr(f)} too large")
        return int(f)

    def set_field(self, i: Any, v: Any) -> Any:
        if type(i) is not int:
            i = self.index(i)
        if i == 0:
            self.set_record(self.tostr(v))
            return v
        fields = self.fields
        if fields is None:
            fields = self.split_record()
        while len(fields) < i:
            fields.append(UNINIT)
        fields[i - 1] = v
        self.nf = len(fields)
        self.rebuild()
        return v

    def rebuild(self) -> None:
        ofs = self.tostr(self.g["V_OFS"])
        fields = self.fields or []
        self.rec = SN(ofs.join([self.outstr(f) if type(f) is float else f for f in fields[:self.nf]]))

    def get_nf(self) -> float:
        if self.fields is None:
            self.split_record()
        return float(self.nf)

    def set_nf(self, v: Any) -> Any:
        n = self.index(v)
        fields = self.fields
        if fields is None:
            fields = self.split_record()
        while len(fields) < n:
            fields.append(UNINIT)
        del fields[n:]
        self.nf = n
        self.rebuild()
        return v

    # -- output ---------------------------------------------------------------------
    def write(self, text: str) -> None:
        self.size += len(text)
        if self.size > MAX_OUTPUT:
            raise AwkError(f"output larger than {MAX_OUTPUT // (1024 * 1024)} MiB")
        self.out.append(text)

    def write_to(self, kind: str, target: Any, text: str) -> None:
        name = self.tostr(target)
        if kind != "|" and name in ("/dev/stdout", "-"):
            self.write(text)
            return
        if kind != "|" and name == "/dev/stderr":
            self.err.append(text)
            return
        entry = self.files.get(name)
        if entry is None:
            if len(self.files) >= 1000:
                raise AwkError("too many open files")
            entry = self.files[name] = [kind, [], False]
            if kind == ">":  # truncated when opened, even if nothing is written
                self.flush_file(name, entry)
        entry[1].append(text)
        self.size += len(text)
        if self.size > MAX_OUTPUT:
            raise AwkError(f"output larger than {MAX_OUTPUT // (1024 * 1024)} MiB")
        if kind != "|" and len(entry[1]) > 4096:
            self.flush_file(name, entry)

    def flush_file(self, name: str, entry: list[Any]) -> None:
        kind, chunks, written = entry
        if kind == "|":
            return
        text = "".join(chunks)
        entry[1] = []
        path = self.ctx.fs.resolve_path(self.ctx.cwd, name)
        try:
            if kind == ">" and not written:
                _run_sync(self.ctx.fs.write_file(path, text))
            else:
                _run_sync(self.ctx.fs.append_file(path, text))
        except OSError as error:
            raise AwkError(f"can't redirect to {name} ({_reason(error)})") from None
        entry[2] = True

    def close(self, target: Any) -> float:
        name = self.tostr(target)
        status = -1.0
        entry = self.files.pop(name, None)
        if entry is not None:
            if entry[0] == "|":
                status = float(self.run_command(name, "".join(entry[1])))
            else:
                self.flush_file(name, entry)
                status = 0.0
        reader = self.readers.pop(name, None)
        if reader is not None:
            status = float(reader.status) if reader.status is not None else 0.0
        return status

    def close_all(self) -> None:
        for name in list(self.files):
            self.close(name)

    def fflush(self, target: Any = None) -> float:
        if target is None:
            return 0.0
        name = self.tostr(target)
        entry = self.files.get(name)
        if entry is not None and entry[0] != "|":
            self.flush_file(name, entry)
        return 0.0

    # -- commands -------------------------------------------------------------------
    def run_command(self, command: str, stdin: str | None = None) -> int:
        """`command` through the sandbox's shell; its output joins awk's, in order."""
        if self.ctx.exec is None:
            raise AwkError(f"cannot run commands here: {command}")
        script = command
        temp = None
        if stdin is not None:
            temp = f"/tmp/.awk-pipe-{random.getrandbits(64):016x}"
            try:
                _run_sync(self.ctx.fs.write_file(temp, stdin))
            except OSError as error:
                raise AwkError(f"cannot open pipe `{command}' ({_reason(error)})") from None
            script = f"{{ {command}\n}} < {temp}"
        try:
            result = _shelljb.drive(self.ctx.exec(script, {"cwd": self.ctx.cwd}))
        finally:
            if temp is not None:
                try:
                    _run_sync(self.ctx.fs.rm(temp, force=True))
                except OSError:
                    pass
        if result.stdout:
            self.write(result.stdout)
        if result.stderr:
            self.err.append(result.stderr)
        return int(result.exit_code)

    def system(self, command: Any) -> float:
        return float(self.run_command(self.tostr(command)))

    # -- input ----------------------------------------------------------------------
    def next_main(self) -> str | None:
        """The next record of the main input (operands, `var=value` ones applied), or None."""
        while True:
            if self.main_input is None:
                if not self.open_next_operand():
                    return None
            rec = self.main_input.read(self.g["V_RS"])
            if rec is not None:
                return rec
            self.main_input = None

    def open_next_operand(self) -> bool:
        """The next file operand opened as the main input (`var=value` ones assigned on the
        way); stdin when there was none. False when all are read."""
        g = self.g
        while True:
            if self.arg_index < 0:
                return False
            if self.arg_index >= int(num(g["V_ARGC"])):
                self.arg_index = -1
                if self.had_file:
                    return False
                self.had_file = True
                self.main_input = Reader(self.ctx.stdin)
                g["V_FNR"] = 0.0
                return True
            arg = self.tostr(g["V_ARGV"].get(str(self.arg_index), ""))
            self.arg_index += 1
            if arg == "":
                continue
            m = _ASSIGNMENT.match(arg)
            if m:
                self.assign_operand(m.group(1), arg[m.end():])
                continue
            self.had_file = True
            g["V_FILENAME"] = SN(arg)
            g["V_FNR"] = 0.0
            if arg in ("-", "/dev/stdin"):
                self.main_input = Reader(self.ctx.stdin)
            else:
                self.main_input = Reader(self.read_file(arg))
            return True

    def assign_operand(self, name: str, value: str) -> None:
        key = "V_" + name
        if name in _SPECIAL_NAMES or key not in self.g or isinstance(self.g[key], dict):
            if isinstance(self.g.get(key), dict):
                raise AwkError(f"can't assign to {name}; it's an array name.")
        self.g[key] = SN(unescape(value))
        if name == "NF":
            self.set_nf(self.g[key])

    def read_file(self, name: str) -> str:
        try:
            return _run_sync(self.ctx.fs.read_file(self.ctx.fs.resolve_path(self.ctx.cwd, name)))
        except IsADirectoryError:
            raise AwkError(f"cannot open \"{name}\" (Is a directory)") from None
        except OSError as error:
            raise AwkError(f"cannot open \"{name}\" ({_reason(error)})") from None

    def getline_main(self) -> float:
        rec = self.next_main()
        if rec is None:
            return 0.0
        self.count_record()
        self.set_record(rec)
        return 1.0

    def getline_main_var(self) -> tuple[float, Any]:
        rec = self.next_main()
        if rec is None:
            return 0.0, None
        self.count_record()
        return 1.0, SN(rec)

    def count_record(self) -> None:
        g = self.g
        g["V_NR"] = num(g["V_NR"]) + 1.0
        g["V_FNR"] = num(g["V_FNR"]) + 1.0

    def reader_for(self, kind: str, source: Any) -> Any:
        name = self.tostr(source)
        reader = self.readers.get(name)
        if reader is None:
            if kind == "file":
                if name in ("-", "/dev/stdin"):
                    reader = Reader(self.ctx.stdin)
                else:
                    try:
                        text = _run_sync(self.ctx.fs.read_file(self.ctx.fs.resolve_path(self.ctx.cwd, name)))
                    except OSError:
                        return None
                    reader = Reader(text)
            else:
                entry = self.files.get(name)
                if entry is not None and entry[0] == "|":
                    self.close(name)
                if self.ctx.exec is None:
                    raise AwkError(f"cannot run commands here: {name}")
                result = _shelljb.drive(self.ctx.exec(name, {"cwd": self.ctx.cwd}))
                if result.stderr:
                    self.err.append(result.stderr)
                reader = Reader(result.stdout)
                reader.status = result.exit_code
            self.readers[name] = reader
        return reader

    def getline_from(self, kind: str, source: Any) -> float:
        reader = self.reader_for(kind, source)
        if reader is None:
            return -1.0
        rec = reader.read(self.g["V_RS"])
        if rec is None:
            return 0.0
        if kind == "cmd":
            self.g["V_NR"] = num(self.g["V_NR"]) + 1.0
        self.set_record(rec)
        return 1.0

    def getline_from_var(self, kind: str, source: Any) -> tuple[float, Any]:
        reader = self.reader_for(kind, source)
        if reader is None:
            return -1.0, None
        rec = reader.read(self.g["V_RS"])
        if rec is None:
            return 0.0, None
        if kind == "cmd":
            self.g["V_NR"] = num(self.g["V_NR"]) + 1.0
        return 1.0, SN(rec)

    # -- printf ---------------------------------------------------------------------
    def sprintf(self, fmt: Any, args: list[Any]) -> str:
        fmt = self.tostr(fmt)
        parts = self.formats.get(fmt)
        if parts is None:
            parts = self.formats[fmt] = _parse_format(fmt)
        out: list[str] = []
        ai = 0
        for part in parts:
            if type(part) is str:
                out.append(part)
                continue
            flags, width, prec, conv = part
            if width == "*":
                if ai >= len(args):
                    raise AwkError("not enough arguments to satisfy format string")
                w = int(num(args[ai]))
                ai += 1
                if w < 0:
                    flags += "-"
                    w = -w
                width = str(w)
            if prec == "*":
                if ai >= len(args):
                    raise AwkError("not enough arguments to satisfy format string")
                p = int(num(args[ai]))
                ai += 1
                prec = str(p) if p >= 0 else None
            if ai >= len(args):
                raise AwkError(f"not enough arguments to satisfy format string\n\t`{fmt}'")
            arg = args[ai]
            ai += 1
            spec = "%" + flags + (width or "") + ("." + prec if prec is not None else "")
            out.append(self.format_one(spec, flags, width, prec, conv, arg))
        return "".join(out)

    def format_one(self, spec: str, flags: str, width: str | None, prec: str | None, conv: str, arg: Any) -> str:
        if conv == "s":
            return (spec + "s") % self.tostr(arg)
        if conv == "c":
            if type(arg) is float:
                n = int(arg) if arg - arg == 0.0 else 0
                text = chr(n) if 0 <= n < 0x110000 else ""
            else:
                text = arg[:1]
            return ("%" + flags.replace("0", "") + (width or "") + "s") % text
        v = num(arg)
        if conv in "diouxX":
            if v - v != 0.0:  # inf, nan: printed as %f would
                return ("%" + flags.replace("0", "") + (width or "") + "s") % self.fmtnum("%f", v)
            n = int(v)
            if conv in "ouxX" and n < 0:
                n += 1 << 64
            return (spec + ("d" if conv in "iu" else conv)) % n
        if conv in "eEfFgGaA":
            if conv in "aA":
                text = float.hex(v)
                return ("%" + flags.replace("0", "") + (width or "") + "s") % (text.upper() if conv == "A" else text)
            return (spec + conv) % v
        return spec + conv

    # -- built-ins ------------------------------------------------------------------
    def substr(self, s: Any, m: Any, n: Any = None) -> str:
        s = self.tostr(s)
        length = len(s)
        start = _round(num(m))
        if n is None:
            end = _INF
        else:
            count = num(n)
            if count != count:
                return ""
            end = start + (_round(count) if count - count == 0.0 else count)
            if n is not None and count - count == 0.0:
                end = _round(num(m)) + _round(count)
        if start != start:
            return ""
        begin = max(start, 1)
        stop = min(end, length + 1)
        if stop <= begin:
            return ""
        return s[int(begin) - 1:int(stop) - 1]

    def split(self, s: Any, arr: dict[str, Any], sep: Any = None, seps: Any = None) -> float:
        text = self.tostr(s)
        arr.clear()
        if sep is None:
            sep = self.g["V_FS"]
        if isinstance(sep, re.Pattern):
            parts = [SN(p) for p in sep.split(text)] if text else []
        else:
            parts = self.split_text(text, sep)
        for i, p in enumerate(parts, 1):
            arr[str(i)] = p
        return float(len(parts))

    def sub(self, rx: Any, repl: Any, target: Any, count: int) -> tuple[float, Any]:
        if not isinstance(rx, re.Pattern):
            rx = self.regex(rx)
        text = self.tostr(target)
        repl = self.tostr(repl)
        pieces = _replacement(repl)
        out: list[str] = []
        pos = 0
        n = 0
        last_end = -1
        for m in rx.finditer(text):
            s, e = m.span()
            if s == e and s == last_end:
                continue  # an empty match right after a match: none in awk
            out.append(text[pos:s])
            matched = m.group()
            out.append("".join(matched if p is None else p for p in pieces))
            pos = e
            last_end = e
            n += 1
            if n >= count:
                break
        if n == 0:
            return 0.0, target
        out.append(text[pos:])
        return float(n), "".join(out)

    def match(self, s: Any, rx: Any, arr: dict[str, Any] | None = None) -> float:
        if not isinstance(rx, re.Pattern):
            rx = self.regex(rx)
        m = rx.search(self.tostr(s))
        if arr is not None:
            arr.clear()
        if m is None:
            self.g["V_RSTART"], self.g["V_RLENGTH"] = 0.0, -1.0
            return 0.0
        start = float(m.start() + 1)
        self.g["V_RSTART"], self.g["V_RLENGTH"] = start, float(m.end() - m.start())
        if arr is not None:
            subsep = self.tostr(self.g["V_SUBSEP"])
            for i in range(rx.groups + 1):
                if m.group(i) is not None:
                    arr[str(i)] = SN(m.group(i))
                    arr[f"{i}{subsep}start"] = float(m.start(i) + 1)
                    arr[f"{i}{subsep}length"] = float(m.end(i) - m.start(i))
        return start

    def srand(self, seed: Any = None) -> float:
        previous = self.seed
        self.seed = float(int(time.time())) if seed is None else num(seed)
        self.rng.seed(self.seed)
        return previous

    def rand(self) -> float:
        return self.rng.random()

    def length(self, v: Any) -> float:
        if isinstance(v, dict):
            return float(len(v))
        return float(len(self.tostr(v)))


class Reader:
    """Records of one input's text, split by RS as it is when each is read."""

    __slots__ = ("text", "pos", "status")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.status: int | None = None

    def read(self, rs: Any) -> str | None:
        text, pos = self.text, self.pos
        n = len(text)
        if rs == "\n":
            if pos >= n:
                return None
            i = text.find("\n", pos)
            if i < 0:
                self.pos = n
                return text[pos:]
            self.pos = i + 1
            return text[pos:i]
        if type(rs) is float:
            rs = str(int(rs)) if rs == int(rs) else str(rs)
        if rs == "":  # paragraph mode: blank lines separate records
            while pos < n and text[pos] == "\n":
                pos += 1
            if pos >= n:
                self.pos = n
                return None
            m = _PARAGRAPH_END.search(text, pos)
            if m is None:
                self.pos = n
                return text[pos:].rstrip("\n")
            self.pos = m.end()
            return text[pos:m.start()]
        if pos >= n:
            return None
        if len(rs) == 1:
            i = text.find(rs, pos)
            if i < 0:
                self.pos = n
                rec = text[pos:]
                return rec[:-1] if rs != "\n" and rec.endswith("\n") and False else rec
            self.pos = i + 1
            return text[pos:i]
        m = compile_regex(rs).search(text, pos)
        while m is not None and m.end() == m.start():
            m = compile_regex(rs).search(text, m.end() + 1) if m.end() < n else None
        if m is None:
            self.pos = n
            return text[pos:]
        self.pos = m.end()
        return text[pos:m.start()]


_PARAGRAPH_END = re.compile(r"\n\n+")
_BLANKS = re.compile(r"[^ \t\n]+")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_FORMAT = re.compile(r"%([-+ #0']*)(\*|\d+)?(?:\.(\*|\d*))?(hh|h|ll|l|L|q|j|z|t)?([a-zA-Z%])?")
_SPECIAL_NAMES = frozenset({"NR", "NF", "FNR", "FS", "OFS", "ORS", "RS", "FILENAME", "SUBSEP", "RSTART",
                            "RLENGTH", "CONVFMT", "OFMT", "ENVIRON", "ARGC", "ARGV"})


def _round(x: float) -> float:
    if x - x != 0.0:
        return x
    return float(math.floor(x + 0.5)) if x >= 0 else -float(math.floor(-x + 0.5))


def _split_groups(rx: Any, text: str) -> list[str]:
    out, pos = [], 0
    for m in rx.finditer(text):
        if m.end() == m.start():
            continue
        out.append(text[pos:m.start()])
        pos = m.end()
    out.append(text[pos:])
    return out


def _parse_format(fmt: str) -> list[Any]:
    parts: list[Any] = []
    pos = 0
    literal: list[str] = []
    while True:
        i = fmt.find("%", pos)
        if i < 0:
            literal.append(fmt[pos:])
            break
        literal.append(fmt[pos:i])
        m = _FORMAT.match(fmt, i)
        assert m is not None
        conv = m.group(5)
        if conv == "%" and m.end() == i + 2:
            literal.append("%")
        elif conv is None or conv not in "diouxXeEfFgGaAcs":
            literal.append(fmt[i:m.end()] if conv is not None else fmt[i:])
            if conv is None:
                break
        else:
            parts.append("".join(literal))
            literal = []
            prec = m.group(3)
            parts.append((m.group(1).replace("'", ""), m.group(2), prec if prec is None else (prec or "0"), conv))
        pos = m.end()
    parts.append("".join(literal))
    return [p for p in parts if p != ""]


def _replacement(repl: str) -> list[str | None]:
    """sub()/gsub()'s replacement as pieces: text, or None for the matched text (`&`)."""
    if "\\" not in repl and "&" not in repl:
        return [repl]
    pieces: list[str | None] = []
    buf: list[str] = []
    i, n = 0, len(repl)
    while i < n:
        c = repl[i]
        if c == "\\" and i + 1 < n and repl[i + 1] == "&":
            buf.append("&")
            i += 2
        elif c == "\\" and repl[i + 1:i + 3] == "\\&":
            buf.append("\\")
            pieces.append("".join(buf))
            buf = []
            pieces.append(None)
            i += 3
        elif c == "\\" and i + 1 < n and repl[i + 1] == "\\":
            buf.append("\\")
            i += 2
        elif c == "&":
            pieces.append("".join(buf))
            buf = []
            pieces.append(None)
            i += 1
        else:
            buf.append(c)
            i += 1
    pieces.append("".join(buf))
    return [p for p in pieces if p != ""]


_REGEX_CACHE: dict[str, Any] = {}


def compile_regex(pattern: str) -> Any:
    """An awk (POSIX extended) regular expression as a compiled Python one."""
    rx = _REGEX_CACHE.get(pattern)
    if rx is not None:
        return rx
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "[":
            text, i = _shellgrep._bracket(pattern, i)
            out.append(text)
            continue
        if c == "\\" and i + 1 < n:
            d = pattern[i + 1]
            i += 2
            if d in "nrtfvab":
                out.append({"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "a": "\a", "b": "\b"}[d]
                           .replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r").replace("\f", "\\f")
                           .replace("\v", "\\v").replace("\a", "\\a").replace("\b", "\\x08"))
            elif d in "<>":
                out.append(r"\b")
            elif d == "y":
                out.append(r"\b")
            elif d in "sSwWB":
                out.append("\\" + d)
            elif d == "`":
                out.append(r"\A")
            elif d == "'":
                out.append(r"\Z")
            elif d in "01234567":
                j = i - 1
                k = j
                while k < n and k < j + 3 and pattern[k] in "01234567":
                    k += 1
                out.append(re.escape(chr(int(pattern[j:k], 8))))
                i = k
            else:
                out.append(re.escape(d))
            continue
        if c == "$":
            out.append(r"\Z")
        elif c == "(" and pattern[i + 1:i + 2] == "?":
            out.append(r"(\?")
            i += 1
        elif c == "(" and pattern[i + 1:i + 2] == ")":
            out.append("(?:)")
            i += 1
        elif c in "*+?" and (not out or out[-1] in ("^", "(", "|")):
            out.append("\\" + c)  # a leading repetition is a literal
        elif c in "*+?" and out and out[-1] in ("*", "+", "?", "}"):
            out.append("")  # `a**`: a repeated repetition is the same one
        elif c == "{" and not re.match(r"\{\d+(,\d*)?\}", pattern[i:]):
            out.append(r"\{")
        elif c == "}":
            out.append("}" if any(o.startswith("{") for o in out[-1:]) or re.search(r"\{\d+(,\d*)?$", "".join(out))
                       else r"\}")
        else:
            out.append(c)
        i += 1
    source = "".join(out)
    try:
        rx = re.compile(source, re.DOTALL)
    except (re.error, OverflowError, RecursionError) as error:
        raise AwkError(f"regular expression compile failed ({error}): /{pattern[:80]}/") from None
    if len(_REGEX_CACHE) > 500:
        _REGEX_CACHE.clear()
    _REGEX_CACHE[pattern] = rx
    return rx


def _reason(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return "No such file or directory"
    if isinstance(error, IsADirectoryError):
        return "Is a directory"
    if isinstance(error, PermissionError):
        return "Permission denied"
    return error.strerror or str(error)


def _run_sync(coro: Any) -> Any:
    """A filesystem coroutine's result, from code that is not async (the sandbox's
    filesystem calls never wait: runtime/_shellfs.py)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AwkError("the filesystem call did not finish at once")




from runtime._shellawkcomp import compile_program  # noqa: E402  (it uses the names above)

_USAGE = ("usage: awk [-F fs][-v var=value][prog | -f progfile][file ...]\n")


class SandboxAwk:
    name = "awk"

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        try:
            return self.run(args, ctx)
        except AwkSyntaxError as problem:
            return ExecResult(stderr=f"awk: {problem}\n", exit_code=2)
        except AwkError as problem:
            return ExecResult(stderr=f"awk: {problem}\n", exit_code=2)

    def run(self, args: list[str], ctx: Any) -> ExecResult:
        fs: str | None = None
        assigns: list[tuple[str, str]] = []
        sources: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                i += 1
                break
            if not a.startswith("-") or a == "-":
                break
            if a in ("--version", "-V") or (a == "-W" and args[i + 1:i + 2] == ["version"]) or a == "-Wversion":
                return ExecResult(stdout="awk (wasmrun sandbox): POSIX awk with gawk's common extensions\n")
            opt = a[1]
            if opt in "Fvf":
                if len(a) > 2:
                    value = a[2:]
                    i += 1
                elif i + 1 < len(args):
                    value = args[i + 1]
                    i += 2
                else:
                    return ExecResult(stderr=f"awk: option requires an argument -- {opt}\n{_USAGE}", exit_code=2)
                if opt == "F":
                    fs = value
                elif opt == "v":
                    m = _ASSIGNMENT.match(value)
                    if not m:
                        return ExecResult(stderr=f"awk: improper assignment: -v {value}\n", exit_code=2)
                    assigns.append((m.group(1), value[m.end():]))
                else:
                    try:
                        sources.append(_run_sync(ctx.fs.read_file(ctx.fs.resolve_path(ctx.cwd, value)))
                                       if value not in ("-", "/dev/stdin") else ctx.stdin)
                    except OSError as error:
                        return ExecResult(stderr=f"awk: couldn't open file {value} ({_reason(error)})\n",
                                          exit_code=2)
                continue
            if a.startswith("--"):
                return ExecResult(stderr=f"awk: not an option: {a}\n{_USAGE}", exit_code=2)
            return ExecResult(stderr=f"awk: not an option: {a}\n{_USAGE}", exit_code=2)
        if not sources:
            if i >= len(args):
                return ExecResult(stderr=_USAGE, exit_code=2)
            sources.append(args[i])
            i += 1
        operands = args[i:]
        try:
            program = parse("\n".join(sources))
        except RecursionError:
            raise AwkSyntaxError("program nested too deeply") from None
        awk = Awk(ctx)
        try:
            run = compile_program(program, awk)
        except (RecursionError, MemoryError, SyntaxError) as error:
            raise AwkSyntaxError(f"program too complex to compile ({type(error).__name__})") from None
        g = awk.g
        if fs is not None:
            if fs == "t":
                fs = "\t"
            g["V_FS"] = unescape(fs)
        argv = g["V_ARGV"]
        argv["0"] = "awk"
        for n, operand in enumerate(operands, 1):
            argv[str(n)] = SN(operand)
        g["V_ARGC"] = float(len(operands) + 1)
        env = g["V_ENVIRON"]
        for name in ctx.env:
            try:
                env[name] = SN(ctx.env[name])
            except (KeyError, TypeError):
                pass
        for name, value in assigns:
            if isinstance(g.get("V_" + name), dict):
                raise AwkError(f"can't assign to {name}; it's an array name.")
            g["V_" + name] = SN(unescape(value))
        code = 0
        try:
            code = run()
        except AwkError as problem:
            awk.err.append(f"awk: {problem}\n")
            code = 2
        except ZeroDivisionError:
            where = f" (FILENAME={awk.tostr(g['V_FILENAME']) or '-'} FNR={awk.tostr(g['V_FNR'])})"
            awk.err.append(f"awk: division by zero{where}\n")
            code = 2
        except RecursionError:
            awk.err.append("awk: function calls nested too deeply\n")
            code = 2
        try:
            awk.close_all()
        except AwkError as problem:
            awk.err.append(f"awk: {problem}\n")
            code = 2
        return ExecResult(stdout="".join(awk.out), stderr="".join(awk.err), exit_code=code)


AwkCommand = SandboxAwk

__all__ = ["AwkCommand", "SandboxAwk", "compile_regex", "num"]
