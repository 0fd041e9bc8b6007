"""The sandbox's awk, part two: the parsed program compiled to Python source, once.

Each awk global is a global `V_name` of the generated module (its namespace is the run's
`Awk.g`), a function's parameters are its locals `L_name`, a user function is `F_name`.
An expression compiles with its kind known where it can be ("num": a float, "str": a
string compared as one, "sn": a string that may be a numeric string, "any"), so
`s += $2` is one conversion and one addition. Arrays are found statically (subscripted,
`in`, `for (k in a)`, delete, split()/match() targets, passed where a function takes
one), as awk's own compilers do.
"""

from __future__ import annotations

import math
from typing import Any

from runtime._shellawk import (
    SN,
    UNINIT,
    AwkError,
    _Exit,
    _Next,
    _NextFile,
    _Uninit,
    compile_regex,
    looks_numeric,
    num,
)
from runtime._shellawkparse import AwkSyntaxError, Parser

_SPECIAL_SCALARS = {
    "FS": " ", "OFS": " ", "ORS": "\n", "RS": "\n", "SUBSEP": "\x1c", "CONVFMT": "%.6g", "OFMT": "%.6g",
    "NR": 0.0, "FNR": 0.0, "FILENAME": UNINIT, "RSTART": 0.0, "RLENGTH": -1.0, "ARGC": 0.0,
}
_SPECIAL_ARRAYS = ("ENVIRON", "ARGV")
_CMP_OPS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


class Arr(dict):  # type: ignore[type-arg]
    """An awk array: reading a missing element makes it (as awk does)."""

    __slots__ = ()

    def __missing__(self, key: str) -> Any:
        self[key] = UNINIT
        return UNINIT


def _bool(v: Any) -> bool:
    t = type(v)
    if t is float:
        return v != 0.0
    if t is SN:
        if looks_numeric(v):
            return num(v) != 0.0
        return v != ""
    if t is _Uninit:
        return False
    return v != ""


def _pair(a: Any, b: Any, tostr: Any) -> tuple[Any, Any]:
    """The two operands of a comparison as POSIX compares them: both numbers when each
    is a number, an uninitialized value or a numeric string; else both strings."""
    ta, tb = type(a), type(b)
    if ta is float:
        if tb is float:
            return a, b
        if (tb is SN or tb is _Uninit) and looks_numeric(b):
            return a, num(b)
        return tostr(a), b
    if ta is SN or ta is _Uninit:
        if tb is float:
            if looks_numeric(a):
                return num(a), b
            return a, tostr(b)
        if (tb is SN or tb is _Uninit) and looks_numeric(a) and looks_numeric(b):
            return num(a), num(b)
        return a, b
    return a, tostr(b) if tb is float else b


def _mod(a: float, b: float) -> float:
    if b == 0.0:
        raise ZeroDivisionError
    try:
        return math.fmod(a, b)
    except ValueError:
        return math.nan


def _pow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except OverflowError:
        return math.inf
    except (ValueError, ZeroDivisionError):
        if a == 0.0 and b < 0:
            return math.inf
        return math.nan


def _aset(arr: dict[str, Any], key: str, value: Any) -> Any:
    arr[key] = value
    return value


def _math1(fn: Any) -> Any:
    def call(x: float) -> float:
        try:
            return fn(x)
        except OverflowError:
            return math.inf
        except ValueError:
            if fn is math.log and x == 0.0:
                return -math.inf
            return -math.nan  # C's log(-1), sqrt(-1): -nan
    return call


def _int(x: float) -> float:
    return float(math.trunc(x)) if x - x == 0.0 else x


class Compiler:
    def __init__(self, program: Parser, awk: Any) -> None:
        self.p = program
        self.awk = awk
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.tmp = 0
        self.arrays: dict[str | None, set[str]] = {None: set(_SPECIAL_ARRAYS)}
        self.scalars_seen: set[str] = set()
        self.globals: set[str] = set(_SPECIAL_SCALARS) | set(_SPECIAL_ARRAYS)
        self.scope: str | None = None
        self.params: list[str] = []
        self.loops: list[list[str]] = []
        self.in_function = False
        self.ranges = 0

    # -- arrays, found before code ----------------------------------------------------
    def infer(self) -> None:
        for name in self.p.functions:
            self.arrays[name] = set()
        self.calls: list[tuple[str | None, str, int, str]] = []
        for body in self.p.begin + self.p.end:
            self.walk(body, None)
        for pattern, action in self.p.rules:
            if pattern is not None:
                self.walk(pattern, None)
            if action is not None:
                self.walk(action, None)
        for name, (_params, body) in self.p.functions.items():
            self.walk(body, name)
        changed = True
        while changed:
            changed = False
            for scope, callee, i, arg in self.calls:
                params = self.p.functions[callee][0]
                if i >= len(params):
                    continue
                callee_array = params[i] in self.arrays[callee]
                caller_array = self.is_array(scope, arg)
                if callee_array and not caller_array:
                    self.mark(scope, arg)
                    changed = True
                elif caller_array and not callee_array:
                    self.arrays[callee].add(params[i])
                    changed = True

    def mark(self, scope: str | None, name: str) -> None:
        if scope is not None and name in self.p.functions[scope][0]:
            self.arrays[scope].add(name)
        else:
            if name in self.p.functions:
                raise AwkSyntaxError(f"function name `{name}' used as an array")
            self.arrays[None].add(name)
            self.globals.add(name)

    def is_array(self, scope: str | None, name: str) -> bool:
        if scope is not None and name in self.p.functions[scope][0]:
            return name in self.arrays[scope]
        return name in self.arrays[None]

    def walk(self, node: Any, scope: str | None) -> None:
        if not isinstance(node, tuple) or not node:
            if isinstance(node, list):
                for item in node:
                    self.walk(item, scope)
            return
        kind = node[0]
        if kind == "index":
            self.mark(scope, node[1])
            self.walk(node[2], scope)
            return
        if kind == "in":
            self.mark(scope, node[2])
            self.walk(node[1], scope)
            return
        if kind == "forin":
            self.mark(scope, node[2])
            self.note_scalar(scope, node[1])
            self.walk(node[3], scope)
            return
        if kind == "delete":
            self.mark(scope, node[1])
            if node[2] is not None:
                self.walk(node[2], scope)
            return
        if kind == "var":
            self.note_scalar(scope, node[1])
            return
        if kind == "builtin" and node[1] == "split" and len(node[2]) >= 2 and node[2][1][0] == "var":
            self.mark(scope, node[2][1][1])
            self.walk([node[2][0]] + node[2][2:], scope)
            return
        if kind == "builtin" and node[1] == "match" and len(node[2]) == 3 and node[2][2][0] == "var":
            self.mark(scope, node[2][2][1])
            self.walk(node[2][:2], scope)
            return
        if kind == "call":
            for i, arg in enumerate(node[2]):
                if arg[0] == "var":
                    self.calls.append((scope, node[1], i, arg[1]))
                    if not (scope is not None and arg[1] in self.p.functions[scope][0]):
                        self.globals.add(arg[1])
                else:
                    self.walk(arg, scope)
            return
        for item in node[1:]:
            if isinstance(item, (tuple, list)):
                self.walk(item, scope)

    def note_scalar(self, scope: str | None, name: str) -> None:
        if scope is not None and name in self.p.functions[scope][0]:
            return
        if name in self.p.functions:
            raise AwkSyntaxError(f"function name `{name}' used as a variable")
        self.globals.add(name)

    # -- helpers ----------------------------------------------------------------------
    def const(self, value: Any) -> str:
        name = f"_C{len(self.consts)}"
        self.consts[name] = value
        return name

    def temp(self) -> str:
        self.tmp += 1
        return f"_t{self.tmp}"

    def name(self, var: str) -> str:
        if self.scope is not None and var in self.params:
            return "L_" + var
        return "V_" + var

    def array(self, var: str) -> str:
        if not self.is_array(self.scope, var):
            raise AwkSyntaxError(f"can't use scalar {var} as an array")
        return self.name(var)

    def regex_const(self, pattern: str) -> str:
        return self.const(compile_regex(pattern))

    # -- expressions ------------------------------------------------------------------
    def num(self, node: Any) -> str:
        code, kind = self.ex(node)
        return code if kind == "num" else f"_num({code})"

    def str(self, node: Any) -> str:
        code, kind = self.ex(node)
        return code if kind in ("str", "sn") else f"_tostr({code})"

    def out(self, node: Any) -> str:
        code, kind = self.ex(node)
        return code if kind in ("str", "sn") else f"_outstr({code})"

    def key(self, subs: list[Any]) -> str:
        parts = []
        for s in subs:
            if s[0] == "num":
                parts.append(repr(self.awk.key(s[1])))
                continue
            code, kind = self.ex(s)
            parts.append(code if kind in ("str", "sn") else f"_key({code})")
        if len(parts) == 1:
            return parts[0]
        return "(" + " + _tostr(V_SUBSEP) + ".join(parts) + ")"

    def cond(self, node: Any) -> str:
        k = node[0]
        if k == "re":
            return f"{self.regex_const(node[1])}.search(R.rec)"
        if k == "group":
            return self.cond(node[1])
        if k == "not":
            return f"(not {self.cond(node[1])})"
        if k == "and":
            return f"({self.cond(node[1])} and {self.cond(node[2])})"
        if k == "or":
            return f"({self.cond(node[1])} or {self.cond(node[2])})"
        if k == "in":
            return f"({self.key(node[1])} in {self.array(node[2])})"
        if k == "match":
            subject = self.str(node[2])
            rx = self.rx(node[3])
            return f"({rx}.search({subject}) {'is' if node[1] else 'is not'} None)"
        if k == "cmp":
            return self.compare(node)
        code, kind = self.ex(node)
        if kind == "num":
            return f"({code} != 0.0)"
        if kind == "str":
            return f"({code} != '')"
        return f"_bool({code})"

    def rx(self, node: Any) -> str:
        """A regular expression operand: a literal compiled now, else compiled when run (cached)."""
        if node[0] == "re":
            return self.regex_const(node[1])
        if node[0] == "str":
            return self.regex_const(node[1])
        return f"R.regex({self.ex(node)[0]})"

    def compare(self, node: Any) -> str:
        _, op, a, b = node
        ca, ka = self.ex(a)
        cb, kb = self.ex(b)
        if ka == "num" and kb == "num":
            return f"({ca} {op} {cb})"
        if ka == "str" or kb == "str":
            sa = ca if ka in ("str", "sn") else f"_tostr({ca})"
            sb = cb if kb in ("str", "sn") else f"_tostr({cb})"
            return f"({sa} {op} {sb})"
        return f"_{_CMP_OPS[op]}({ca}, {cb})"

    def lvalue(self, node: Any) -> tuple[list[str], str, Any]:
        """(preparations, code reading it, function of a value's code that assigns it)."""
        k = node[0]
        if k == "var":
            if node[1] == "NF" and not (self.scope is not None and "NF" in self.params):
                return [], "R.get_nf()", lambda v: f"R.set_nf({v})"
            if self.is_array(self.scope, node[1]):
                raise AwkSyntaxError(f"can't assign to {node[1]}; it's an array name.")
            n = self.name(node[1])
            return [], n, lambda v: f"({n} := {v})"
        if k == "field":
            ix = node[1]
            if ix[0] == "num":
                i = self.awk.index(ix[1])
                return [], f"R.field({i})", lambda v: f"R.set_field({i}, {v})"
            t = self.temp()
            return [f"({t} := R.index({self.ex(ix)[0]}))"], f"R.field({t})", lambda v: f"R.set_field({t}, {v})"
        if k == "index":
            arr = self.array(node[1])
            subs = node[2]
            if all(s[0] in ("num", "str") for s in subs) or (len(subs) == 1 and subs[0][0] in ("var", "field")
                                                            and (subs[0][0] == "var" or subs[0][1][0] == "num")):
                key = self.key(subs)
                return [], f"{arr}[{key}]", lambda v: f"_aset({arr}, {key}, {v})"
            t = self.temp()
            return [f"({t} := {self.key(subs)})"], f"{arr}[{t}]", lambda v: f"_aset({arr}, {t}, {v})"
        if k == "group":
            return self.lvalue(node[1])
        raise AwkSyntaxError("assignment to something that is not a variable, field or array element")

    @staticmethod
    def seq(prep: list[str], code: str) -> str:
        if not prep:
            return code
        return "(" + ", ".join(prep + [code]) + ")[-1]"

    def ex(self, node: Any) -> tuple[str, str]:
        k = node[0]
        if k == "num":
            v = node[1]
            return (repr(v) if v - v == 0.0 else self.const(v)), "num"
        if k == "str":
            return repr(node[1]), "str"
        if k == "re":
            return f"(1.0 if {self.regex_const(node[1])}.search(R.rec) else 0.0)", "num"
        if k == "group":
            return self.ex(node[1])
        if k == "grouplist":
            raise AwkSyntaxError("a parenthesized list is only allowed in print or before `in'")
        if k == "var":
            if node[1] == "NF" and not (self.scope is not None and "NF" in self.params):
                return "R.get_nf()", "num"
            if self.is_array(self.scope, node[1]):
                raise AwkSyntaxError(f"can't use array {node[1]} in a scalar context")
            return self.name(node[1]), "any"
        if k == "field":
            ix = node[1]
            if ix[0] == "num":
                i = self.awk.index(ix[1])
                return ("R.rec" if i == 0 else f"R.field({i})"), ("sn" if i == 0 else "any")
            return f"R.field({self.ex(ix)[0]})", "any"
        if k == "index":
            return f"{self.array(node[1])}[{self.key(node[2])}]", "any"
        if k == "assign":
            _, op, lv, value = node
            prep, get, put = self.lvalue(lv)
            if op == "=":
                code, kind = self.ex(value)
                return self.seq(prep, put(code)), kind
            return self.seq(prep, put(self.arith(op[0], f"_num({get})", self.num(value)))), "num"
        if k == "cond":
            a, ka = self.ex(node[2])
            b, kb = self.ex(node[3])
            return f"({a} if {self.cond(node[1])} else {b})", (ka if ka == kb else "any")
        if k in ("and", "or", "in", "match", "cmp", "not"):
            return f"(1.0 if {self.cond(node)} else 0.0)", "num"
        if k == "concat":
            parts = [self.str(p) for p in node[1]]
            return "(" + " + ".join(parts) + ")", "str"
        if k == "bin":
            return self.arith(node[1], self.num(node[2]), self.num(node[3])), "num"
        if k == "neg":
            return f"(-{self.num(node[1])})", "num"
        if k == "pos":
            return f"(+{self.num(node[1])})", "num"
        if k in ("preinc", "postinc"):
            _, op, lv = node
            prep, get, put = self.lvalue(lv)
            sign = "+" if op == "++" else "-"
            if k == "preinc":
                return self.seq(prep, put(f"(_num({get}) {sign} 1.0)")), "num"
            t = self.temp()
            return self.seq(prep + [f"({t} := _num({get}))", put(f"({t} {sign} 1.0)"), t], t), "num"
        if k == "call":
            return self.call(node), "any"
        if k == "builtin":
            return self.builtin(node)
        if k == "getline":
            return self.getline(node), "num"
        raise AwkSyntaxError(f"unsupported expression {k}")

    def arith(self, op: str, a: str, b: str) -> str:
        if op == "%":
            return f"_mod({a}, {b})"
        if op == "^":
            return f"_pow({a}, {b})"
        return f"({a} {op} {b})"

    def call(self, node: Any) -> str:
        _, name, args = node
        params = self.p.functions[name][0]
        codes = []
        for i, arg in enumerate(args):
            if params[i] in self.arrays[name]:
                if arg[0] != "var":
                    raise AwkSyntaxError(f"function {name}: argument {i + 1} must be an array")
                codes.append(self.array(arg[1]))
            elif arg[0] == "var" and self.is_array(self.scope, arg[1]):
                codes.append(self.name(arg[1]))
            else:
                codes.append(self.ex(arg)[0])
        return f"F_{name}({', '.join(codes)})"

    def target(self, args: list[Any], i: int) -> tuple[list[str], str, Any]:
        if len(args) > i:
            node = args[i]
            if node[0] in ("var", "field", "index", "group"):
                return self.lvalue(node)
            code = self.ex(node)[0]
            return [], code, lambda v: "None"
        return [], "R.rec", lambda v: f"R.set_field(0, {v})"

    def builtin(self, node: Any) -> tuple[str, str]:
        _, name, args = node
        n = len(args)

        def need(low: int, high: int) -> None:
            if not low <= n <= high:
                raise AwkSyntaxError(f"{n} arguments given to {name}: it takes "
                                     f"{low if low == high else f'{low} to {high}'}")
        if name == "length":
            need(0, 1)
            if n == 0:
                return "float(len(R.rec))", "num"
            a = args[0]
            if a[0] == "var" and self.is_array(self.scope, a[1]):
                return f"float(len({self.name(a[1])}))", "num"
            return f"float(len({self.str(a)}))", "num"
        if name == "substr":
            need(2, 3)
            return f"R.substr({', '.join(self.ex(a)[0] for a in args)})", "str"
        if name == "index":
            need(2, 2)
            return f"float({self.str(args[0])}.find({self.str(args[1])}) + 1)", "num"
        if name == "split":
            need(2, 4)
            if args[1][0] != "var":
                raise AwkSyntaxError("split: the second argument must be an array")
            arr = self.array(args[1][1])
            sep = ""
            if n >= 3:
                sep = ", " + (self.regex_const(args[2][1]) if args[2][0] == "re" else self.ex(args[2])[0])
            return f"R.split({self.ex(args[0])[0]}, {arr}{sep})", "num"
        if name in ("sub", "gsub"):
            need(2, 3)
            rx = self.rx(args[0])
            repl = self.ex(args[1])[0]
            prep, get, put = self.target(args, 2)
            t = self.temp()
            count = "1" if name == "sub" else "1 << 62"
            return self.seq(prep + [f"({t} := R.sub({rx}, {repl}, {get}, {count}))",
                                    f"({put(f'{t}[1]')} if {t}[0] else None)"], f"{t}[0]"), "num"
        if name == "match":
            need(2, 3)
            extra = ""
            if n == 3:
                if args[2][0] != "var":
                    raise AwkSyntaxError("match: the third argument must be an array")
                extra = ", " + self.array(args[2][1])
            return f"R.match({self.ex(args[0])[0]}, {self.rx(args[1])}{extra})", "num"
        if name == "sprintf":
            if n == 0:
                raise AwkSyntaxError("sprintf: no format")
            return f"R.sprintf({self.ex(args[0])[0]}, [{', '.join(self.ex(a)[0] for a in args[1:])}])", "str"
        if name in ("sin", "cos", "exp", "log", "sqrt"):
            need(1, 1)
            return f"_m_{name}({self.num(args[0])})", "num"
        if name == "int":
            need(1, 1)
            return f"_int({self.num(args[0])})", "num"
        if name == "atan2":
            need(2, 2)
            return f"math.atan2({self.num(args[0])}, {self.num(args[1])})", "num"
        if name == "rand":
            need(0, 0)
            return "R.rand()", "num"
        if name == "srand":
            need(0, 1)
            return f"R.srand({self.ex(args[0])[0] if n else ''})", "num"
        if name in ("tolower", "toupper"):
            need(1, 1)
            return f"{self.str(args[0])}.{name[2:]}()", "str"
        if name == "system":
            need(1, 1)
            return f"R.system({self.ex(args[0])[0]})", "num"
        if name == "close":
            need(1, 2)
            return f"R.close({self.ex(args[0])[0]})", "num"
        if name == "fflush":
            need(0, 1)
            return f"R.fflush({self.ex(args[0])[0] if n else ''})", "num"
        raise AwkSyntaxError(f"unknown function {name}")

    def getline(self, node: Any) -> str:
        _, kind, lv, src = node
        if lv is None:
            if kind == "main":
                return "R.getline_main()"
            return f"R.getline_from({kind!r}, {self.ex(src)[0]})"
        call = "R.getline_main_var()" if kind == "main" else f"R.getline_from_var({kind!r}, {self.ex(src)[0]})"
        t = self.temp()
        prep, _get, put = self.lvalue(lv)
        return self.seq([f"({t} := {call})"] + prep + [f"({put(f'{t}[1]')} if {t}[0] > 0 else None)"], f"{t}[0]")

    # -- statements -------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def block(self, node: Any, depth: int) -> None:
        start = len(self.lines)
        self.stmt(node, depth)
        if len(self.lines) == start:
            self.emit(depth, "pass")

    def stmt(self, node: Any, depth: int) -> None:
        k = node[0]
        if k == "block":
            for s in node[1]:
                self.stmt(s, depth)
            return
        if k == "expr":
            e = node[1]
            if e[0] == "assign" and e[1] == "=" and e[2][0] == "var" and e[2][1] != "NF" \
                    and not self.is_array(self.scope, e[2][1]):
                self.emit(depth, f"{self.name(e[2][1])} = {self.ex(e[3])[0]}")
                return
            if e[0] in ("postinc", "preinc"):
                e = ("preinc", e[1], e[2])
            self.emit(depth, self.ex(e)[0])
            return
        if k in ("print", "printf"):
            _, args, redirect, target = node
            if k == "print":
                if not args:
                    text = "R.rec + _tostr(V_ORS)"
                else:
                    sep = " + _tostr(V_OFS) + "
                    text = sep.join(self.out(a) for a in args) + " + _tostr(V_ORS)"
            else:
                text = f"R.sprintf({self.ex(args[0])[0]}, [{', '.join(self.ex(a)[0] for a in args[1:])}])"
            if redirect is None:
                self.emit(depth, f"_write({text})")
            else:
                self.emit(depth, f"R.write_to({redirect!r}, {self.ex(target)[0]}, {text})")
            return
        if k == "if":
            self.emit(depth, f"if {self.cond(node[1])}:")
            self.block(node[2], depth + 1)
            if node[3] is not None:
                self.emit(depth, "else:")
                self.block(node[3], depth + 1)
            return
        if k == "while":
            self.emit(depth, f"while {self.cond(node[1])}:")
            self.loops.append([])
            self.block(node[2], depth + 1)
            self.loops.pop()
            return
        if k == "do":
            self.emit(depth, "while True:")
            check = f"if not {self.cond(node[2])}: break"
            self.loops.append([check])
            self.block(node[1], depth + 1)
            self.loops.pop()
            self.emit(depth + 1, check)
            return
        if k == "for":
            _, init, cond, step, body = node
            if init is not None:
                self.stmt(init, depth)
            self.emit(depth, f"while {self.cond(cond) if cond is not None else 'True'}:")
            steps: list[str] = []
            if step is not None:
                saved = self.lines
                self.lines = []
                self.stmt(step, 0)
                steps = self.lines
                self.lines = saved
            self.loops.append(steps)
            self.block(body, depth + 1)
            self.loops.pop()
            for s in steps:
                self.emit(depth + 1, s)
            return
        if k == "forin":
            _, var, arr, body = node
            t = self.temp()
            self.emit(depth, f"for {t} in list({self.array(arr)}):")
            if var == "NF" and not (self.scope is not None and "NF" in self.params):
                self.emit(depth + 1, f"R.set_nf(str({t}))")
            else:
                self.emit(depth + 1, f"{self.name(var)} = str({t})")
            self.loops.append([])
            self.block(body, depth + 1)
            self.loops.pop()
            return
        if k == "break":
            if not self.loops:
                raise AwkSyntaxError("break is not allowed outside a loop")
            self.emit(depth, "break")
            return
        if k == "continue":
            if not self.loops:
                raise AwkSyntaxError("continue is not allowed outside a loop")
            for s in self.loops[-1]:
                self.emit(depth, s)
            self.emit(depth, "continue")
            return
        if k == "next":
            self.emit(depth, "raise _Next")
            return
        if k == "nextfile":
            self.emit(depth, "raise _NextFile")
            return
        if k == "exit":
            code = "None" if node[1] is None else f"int(_num({self.ex(node[1])[0]})) & 255"
            self.emit(depth, f"raise _Exit({code})")
            return
        if k == "return":
            if not self.in_function:
                raise AwkSyntaxError("return used outside function context")
            self.emit(depth, f"return {'UNINIT' if node[1] is None else self.ex(node[1])[0]}")
            return
        if k == "delete":
            arr = self.array(node[1])
            if node[2] is None:
                self.emit(depth, f"{arr}.clear()")
            else:
                self.emit(depth, f"{arr}.pop({self.key(node[2])}, None)")
            return
        if k in ("getline",):
            self.emit(depth, self.ex(node)[0])
            return
        raise AwkSyntaxError(f"unsupported statement {k}")

    def function(self, header: str, params: list[str], body: Any) -> None:
        self.emit(0, header)
        names = sorted("V_" + g for g in self.globals if g not in params)
        if names:
            self.emit(1, "global " + ", ".join(names))
        for p in params:
            if self.scope is not None and p in self.arrays[self.scope]:
                self.emit(1, f"if L_{p} is None: L_{p} = Arr()")
        self.block(body, 1)

    def compile(self) -> str:
        self.infer()
        for name, (params, body) in self.p.functions.items():
            self.scope, self.params, self.in_function = name, params, True
            defaults = ", ".join(f"L_{p}={'None' if p in self.arrays[name] else 'UNINIT'}" for p in params)
            self.function(f"def F_{name}({defaults}):", params, body)
            self.emit(1, "return UNINIT")
        self.scope, self.params, self.in_function = None, [], False
        self.function("def _BEGIN():", [], ("block", self.p.begin))
        self.function("def _END():", [], ("block", self.p.end))
        rules: list[Any] = []
        self.function("def _MAIN():", [], ("block", []))
        self.lines.pop()  # its `pass`
        for pattern, action in self.p.rules:
            body = action if action is not None else ("print", [], None, None)
            if pattern is None:
                self.stmt(body, 1)
            elif pattern[0] == "range":
                i = self.ranges
                self.ranges += 1
                self.emit(1, f"if _RG[{i}] or {self.cond(pattern[1])}:")
                self.emit(2, f"_RG[{i}] = not {self.cond(pattern[2])}")
                self.block(body, 2)
            else:
                self.emit(1, f"if {self.cond(pattern)}:")
                self.block(body, 2)
            rules.append(pattern)
        if not self.p.rules:
            self.emit(1, "pass")
        return "\n".join(self.lines) + "\n"


def compile_program(program: Parser, awk: Any) -> Any:
    compiler = Compiler(program, awk)
    source = compiler.compile()
    g = awk.g
    g.update(compiler.consts)
    g.update({
        "R": awk, "Arr": Arr, "UNINIT": UNINIT, "_num": num, "_tostr": awk.tostr, "_outstr": awk.outstr,
        "_key": awk.key, "_bool": _bool, "_mod": _mod, "_pow": _pow, "_aset": _aset, "_int": _int, "math": math,
        "_write": awk.write, "_Next": _Next, "_NextFile": _NextFile, "_Exit": _Exit, "_RG": [False] * compiler.ranges,
        "_m_sin": _math1(math.sin), "_m_cos": _math1(math.cos), "_m_exp": _math1(math.exp),
        "_m_log": _math1(math.log), "_m_sqrt": _math1(math.sqrt), "__builtins__": {"float": float, "len": len,
                                                                                  "int": int, "str": str,
                                                                                  "list": list},
    })
    tostr = awk.tostr
    for op, name in _CMP_OPS.items():
        g["_" + name] = _comparator(op, tostr)
    for name in compiler.globals:
        g["V_" + name] = Arr() if name in compiler.arrays[None] else UNINIT
    for name, value in _SPECIAL_SCALARS.items():
        g["V_" + name] = value
    code = compile(source, "<awk program>", "exec")
    exec(code, g)
    has_main = bool(program.rules) or bool(program.end)
    begin, main, end = g["_BEGIN"], g["_MAIN"], g["_END"]
    has_begin, has_end = bool(program.begin), bool(program.end)

    def run() -> int:
        status = 0
        try:
            try:
                if has_begin:
                    begin()
            except _Next:
                raise AwkError("next used in BEGIN action") from None
            if has_main:
                read = awk.next_main
                while True:
                    rec = read()
                    if rec is None:
                        break
                    nr = g["V_NR"]
                    g["V_NR"] = (nr if type(nr) is float else num(nr)) + 1.0
                    fnr = g["V_FNR"]
                    g["V_FNR"] = (fnr if type(fnr) is float else num(fnr)) + 1.0
                    awk.rec = SN(rec)
                    awk.fields = None
                    awk.split_fs = g["V_FS"]
                    try:
                        main()
                    except _Next:
                        pass
                    except _NextFile:
                        awk.main_input = None
        except _Exit as stop:
            if stop.code is not None:
                status = stop.code
        if has_end:
            try:
                end()
            except _Exit as stop:
                if stop.code is not None:
                    status = stop.code
            except _Next:
                raise AwkError("next used in END action") from None
        return status

    awk.source = source
    return run


def _comparator(op: str, tostr: Any) -> Any:
    import operator
    fn = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
          "!=": operator.ne}[op]

    def compare(a: Any, b: Any) -> bool:
        x, y = _pair(a, b, tostr)
        return fn(x, y)
    return compare


__all__ = ["Arr", "compile_program"]
