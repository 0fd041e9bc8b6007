"""The sandbox's awk, part one: the lexer and parser of the POSIX awk language.

The program becomes a tree of tuples (`("bin", "+", a, b)`, `("print", args, redirect,
target)`, ...) that runtime/_shellawk.py compiles to Python source once. Errors are
AwkSyntaxError with gawk/mawk's wording: `awk: line N: syntax error at or near X`.
"""

from __future__ import annotations

from typing import Any

BUILTINS = frozenset({
    "length", "substr", "index", "split", "sub", "gsub", "match", "sprintf", "sin", "cos", "atan2",
    "exp", "log", "sqrt", "int", "rand", "srand", "tolower", "toupper", "system", "close", "fflush",
})
KEYWORDS = frozenset({
    "BEGIN", "END", "function", "func", "if", "else", "while", "for", "do", "break", "continue", "next",
    "nextfile", "exit", "return", "delete", "in", "getline", "print", "printf",
})
# Deeper than this and the program is refused (Python's own compiler has limits too).
MAX_DEPTH = 150

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "/": "/", "a": "\a", "b": "\b",
            "f": "\f", "v": "\v"}


class AwkSyntaxError(Exception):
    pass


def unescape(text: str) -> str:
    """Escape sequences of an awk string (`\\t`, `\\n`, `\\052`, ...), as in -v and -F values."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        d = text[i + 1]
        if d in _ESCAPES:
            out.append(_ESCAPES[d])
            i += 2
        elif d in "01234567":
            j = i + 1
            while j < n and j < i + 4 and text[j] in "01234567":
                j += 1
            out.append(chr(int(text[i + 1:j], 8)))
            i = j
        else:  # an unknown escape keeps its backslash (mawk and POSIX leave it undefined)
            out.append("\\" + d)
            i += 2
    return "".join(out)


class Token:
    __slots__ = ("kind", "value", "line")

    def __init__(self, kind: str, value: Any, line: int) -> None:
        self.kind, self.value, self.line = kind, value, line

    def __repr__(self) -> str:
        return f"Token({self.kind!r}, {self.value!r})"


# After these a `/` divides; anywhere else it starts a regular expression.
_OPERAND_END = frozenset({"NUMBER", "STRING", "ERE", "NAME", "FUNC_NAME", "BUILTIN", ")", "]", "$", "++", "--"})
_PUNCT3 = ("**=",)
_PUNCT2 = ("+=", "-=", "*=", "/=", "%=", "^=", "==", "<=", ">=", "!=", "++", "--", "&&", "||", ">>", "!~", "**")
_PUNCT1 = "{}()[];,+-*/%^!><|?:~$="


def tokenize(src: str) -> list[Token]:
    toks: list[Token] = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            toks.append(Token("NEWLINE", "\n", line))
            line += 1
            i += 1
            continue
        if c in " \t\r":
            i += 1
            continue
        if c == "\\" and i + 1 < n and src[i + 1] == "\n":
            i += 2
            line += 1
            continue
        if c == "\\" and src[i + 1:i + 3] == "\r\n":
            i += 3
            line += 1
            continue
        if c == "#":
            while i < n and src[i] != "\n":
                i += 1
            continue
        if c == '"':
            j = i + 1
            out: list[str] = []
            while True:
                if j >= n or src[j] == "\n":
                    raise AwkSyntaxError(f"line {line}: runaway string constant \"{src[i + 1:j][:10]} ...")
                d = src[j]
                if d == '"':
                    break
                if d == "\\" and j + 1 < n:
                    e = src[j + 1]
                    if e == "\n":
                        j += 2
                        line += 1
                        continue
                    if e in _ESCAPES:
                        out.append(_ESCAPES[e])
                        j += 2
                    elif e in "01234567":
                        k = j + 1
                        while k < n and k < j + 4 and src[k] in "01234567":
                            k += 1
                        out.append(chr(int(src[j + 1:k], 8)))
                        j = k
                    else:
                        out.append("\\" + e)
                        j += 2
                    continue
                out.append(d)
                j += 1
            toks.append(Token("STRING", "".join(out), line))
            i = j + 1
            continue
        if c == "/" and (not toks or toks[-1].kind not in _OPERAND_END):
            j = i + 1
            out = []
            in_bracket = False
            while True:
                if j >= n or src[j] == "\n":
                    raise AwkSyntaxError(f"line {line}: runaway regular expression /{src[i + 1:j][:10]} ...")
                d = src[j]
                if d == "\\" and j + 1 < n:
                    if src[j + 1] == "/":
                        out.append("/")
                    else:
                        out.append(src[j:j + 2])
                    j += 2
                    continue
                if d == "[" and not in_bracket:
                    in_bracket = True
                    out.append(d)
                    j += 1
                    if j < n and src[j] == "^":
                        out.append("^")
                        j += 1
                    if j < n and src[j] == "]":
                        out.append("]")
                        j += 1
                    continue
                if d == "]" and in_bracket:
                    in_bracket = False
                elif d == "/" and not in_bracket:
                    break
                out.append(d)
                j += 1
            toks.append(Token("ERE", "".join(out), line))
            i = j + 1
            continue
        if c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            j = i
            while j < n and src[j].isdigit():
                j += 1
            if j < n and src[j] == ".":
                j += 1
                while j < n and src[j].isdigit():
                    j += 1
            if j < n and src[j] in "eE":
                k = j + 1
                if k < n and src[k] in "+-":
                    k += 1
                if k < n and src[k].isdigit():
                    while k < n and src[k].isdigit():
                        k += 1
                    j = k
            toks.append(Token("NUMBER", float(src[i:j]), line))
            i = j
            continue
        if c.isalpha() or c == "_":
            j = i
            while j < n and (src[j].isalnum() or src[j] == "_") and src[j].isascii():
                j += 1
            word = src[i:j]
            if word in KEYWORDS:
                toks.append(Token("function" if word == "func" else word, word, line))
            elif word in BUILTINS:
                toks.append(Token("BUILTIN", word, line))
            elif j < n and src[j] == "(":
                toks.append(Token("FUNC_NAME", word, line))
            else:
                toks.append(Token("NAME", word, line))
            i = j
            continue
        for p in _PUNCT3 + _PUNCT2:
            if src.startswith(p, i):
                toks.append(Token({"**": "^", "**=": "^="}.get(p, p), p, line))
                i += len(p)
                break
        else:
            if c in _PUNCT1:
                toks.append(Token(c, c, line))
                i += 1
            else:
                raise AwkSyntaxError(f"line {line}: syntax error at or near {c}")
    toks.append(Token("EOF", "end of file", line))
    return toks


# Tokens that can start an operand of a concatenation.
_CONCAT_START = frozenset({"NUMBER", "STRING", "ERE", "NAME", "FUNC_NAME", "BUILTIN", "$", "(", "!", "-", "+",
                           "++", "--"})
_ASSIGN_OPS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "^="})
_LVALUES = frozenset({"var", "field", "index"})


class Parser:
    def __init__(self, src: str) -> None:
        self.toks = tokenize(src)
        self.pos = 0
        self.depth = 0
        self.no_gt = 0  # inside print's arguments: `>` redirects
        self.no_in = 0  # inside a for's first clause
        self.functions: dict[str, tuple[list[str], Any]] = {}
        self.begin: list[Any] = []
        self.end: list[Any] = []
        self.rules: list[tuple[Any, Any]] = []
        self.calls: list[tuple[str, int, int]] = []

    # -- helpers ------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.toks[self.pos]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.pos + k, len(self.toks) - 1)]

    def error(self, tok: Token | None = None) -> AwkSyntaxError:
        tok = tok or self.tok
        near = tok.value if tok.kind not in ("STRING", "ERE", "NUMBER", "NEWLINE") else {
            "STRING": lambda v: f'"{v}"', "ERE": lambda v: f"/{v}/",
            "NUMBER": lambda v: f"{v:g}", "NEWLINE": lambda v: "end of line"}[tok.kind](tok.value)
        return AwkSyntaxError(f"line {tok.line}: syntax error at or near {near}")

    def take(self, kind: str) -> Token:
        if self.tok.kind != kind:
            raise self.error()
        t = self.tok
        self.pos += 1
        return t

    def accept(self, kind: str) -> bool:
        if self.tok.kind == kind:
            self.pos += 1
            return True
        return False

    def newlines(self) -> None:
        while self.tok.kind == "NEWLINE":
            self.pos += 1

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise AwkSyntaxError(f"line {self.tok.line}: program nested too deeply (more than {MAX_DEPTH} levels)")

    # -- program ------------------------------------------------------------------
    def program(self) -> Parser:
        self.terminators()
        while self.tok.kind != "EOF":
            self.item()
            self.terminators()
        for name, nargs, line in self.calls:
            if name not in self.functions:
                raise AwkSyntaxError(f"line {line}: function {name} never defined")
            if nargs > len(self.functions[name][0]):
                raise AwkSyntaxError(f"line {line}: function {name} called with {nargs} args, accepts only "
                                     f"{len(self.functions[name][0])}")
        return self

    def terminators(self) -> None:
        while self.tok.kind in ("NEWLINE", ";"):
            self.pos += 1

    def item(self) -> None:
        t = self.tok
        if t.kind == "BEGIN":
            self.pos += 1
            self.newlines()
            self.begin.append(self.block())
        elif t.kind == "END":
            self.pos += 1
            self.newlines()
            self.end.append(self.block())
        elif t.kind == "function":
            self.pos += 1
            name_tok = self.tok
            if name_tok.kind not in ("NAME", "FUNC_NAME"):
                raise self.error()
            name = name_tok.value
            self.pos += 1
            if name in self.functions:
                raise AwkSyntaxError(f"line {name_tok.line}: function {name} redefined")
            self.take("(")
            params: list[str] = []
            while self.tok.kind != ")":
                p = self.take("NAME").value
                if p in params:
                    raise AwkSyntaxError(f"line {name_tok.line}: function {name}: duplicate parameter {p}")
                params.append(p)
                if not self.accept(","):
                    break
                self.newlines()
            self.take(")")
            self.newlines()
            self.functions[name] = (params, None)
            self.functions[name] = (params, self.block())
        else:
            pattern: Any = None
            if t.kind != "{":
                pattern = self.expr()
                if self.accept(","):
                    self.newlines()
                    pattern = ("range", pattern, self.expr())
            if self.tok.kind == "{":
                self.rules.append((pattern, self.block()))
            else:
                if self.tok.kind not in ("NEWLINE", ";", "EOF"):
                    raise self.error()
                self.rules.append((pattern, None))

    def block(self) -> Any:
        self.take("{")
        self.enter()
        stmts = []
        self.terminators()
        while self.tok.kind != "}":
            stmts.append(self.statement())
            self.terminators()
        self.take("}")
        self.depth -= 1
        return ("block", stmts)

    def simple_end(self) -> None:
        if self.tok.kind in (";", "NEWLINE"):
            self.pos += 1
        elif self.tok.kind not in ("}", "EOF"):
            raise self.error()

    def statement(self) -> Any:
        t = self.tok
        k = t.kind
        if k == "{":
            return self.block()
        if k == "if":
            self.pos += 1
            self.take("(")
            cond = self.expr()
            self.take(")")
            self.newlines()
            then = self.body()
            save = self.pos
            self.terminators()
            if self.tok.kind == "else":
                self.pos += 1
                self.newlines()
                return ("if", cond, then, self.body())
            self.pos = save
            return ("if", cond, then, None)
        if k == "while":
            self.pos += 1
            self.take("(")
            cond = self.expr()
            self.take(")")
            if self.tok.kind == ";":
                self.pos += 1
                return ("while", cond, ("block", []))
            self.newlines()
            return ("while", cond, self.body())
        if k == "do":
            self.pos += 1
            self.newlines()
            body = self.body()
            self.terminators()
            self.take("while")
            self.take("(")
            cond = self.expr()
            self.take(")")
            self.simple_end()
            return ("do", body, cond)
        if k == "for":
            self.pos += 1
            self.take("(")
            if (self.tok.kind == "NAME" and self.peek().kind == "in" and self.peek(2).kind == "NAME"
                    and self.peek(3).kind == ")"):
                var = self.tok.value
                arr = self.peek(2).value
                self.pos += 4
                self.newlines()
                return ("forin", var, arr, self.body())
            if (self.tok.kind == "(" and self.peek().kind == "NAME" and self.peek(2).kind == "in"
                    and self.peek(3).kind == "NAME" and self.peek(4).kind == ")" and self.peek(5).kind == ")"):
                var, arr = self.peek().value, self.peek(3).value
                self.pos += 6
                self.newlines()
                return ("forin", var, arr, self.body())
            init = None if self.tok.kind == ";" else self.simple_statement()
            self.take(";")
            self.newlines()
            cond = None if self.tok.kind == ";" else self.expr()
            self.take(";")
            self.newlines()
            step = None if self.tok.kind == ")" else self.simple_statement()
            self.take(")")
            if self.tok.kind == ";":
                self.pos += 1
                return ("for", init, cond, step, ("block", []))
            self.newlines()
            return ("for", init, cond, step, self.body())
        if k == ";":
            self.pos += 1
            return ("block", [])
        if k in ("next", "nextfile", "break", "continue"):
            self.pos += 1
            self.simple_end()
            return (k,)
        if k in ("exit", "return"):
            self.pos += 1
            value = None
            if self.tok.kind not in (";", "NEWLINE", "}", "EOF"):
                value = self.expr()
            self.simple_end()
            return (k, value)
        s = self.simple_statement()
        self.simple_end()
        return s

    def body(self) -> Any:
        """The statement after if/while/for/else (a `;` alone is an empty one)."""
        if self.tok.kind == ";":
            self.pos += 1
            return ("block", [])
        return self.statement()

    def simple_statement(self) -> Any:
        k = self.tok.kind
        if k in ("print", "printf"):
            self.pos += 1
            args: list[Any] = []
            self.no_gt += 1
            try:
                if self.tok.kind not in (";", "NEWLINE", "}", ">", ">>", "|", "EOF"):
                    args.append(self.expr())
                    while self.accept(","):
                        self.newlines()
                        args.append(self.expr())
            finally:
                self.no_gt -= 1
            if len(args) == 1 and args[0][0] == "grouplist":
                args = list(args[0][1])
            for a in args:
                if a[0] == "grouplist":
                    raise self.error()
            redirect, target = None, None
            if self.tok.kind in (">", ">>", "|"):
                redirect = self.tok.kind
                self.pos += 1
                self.no_gt += 1
                try:
                    target = self.concatenation()
                finally:
                    self.no_gt -= 1
            if k == "printf" and not args:
                raise self.error()
            return (k, args, redirect, target)
        if k == "delete":
            self.pos += 1
            name = self.take("NAME").value
            if self.accept("["):
                subs = self.expr_list("]")
                return ("delete", name, subs)
            return ("delete", name, None)
        return ("expr", self.expr())

    def expr_list(self, close: str) -> list[Any]:
        items = [self.expr()]
        while self.accept(","):
            self.newlines()
            items.append(self.expr())
        self.take(close)
        return items

    # -- expressions --------------------------------------------------------------
    def expr(self) -> Any:
        self.enter()
        try:
            return self.ternary()
        finally:
            self.depth -= 1

    def ternary(self) -> Any:
        cond = self.or_expr()
        if self.tok.kind == "?":
            self.pos += 1
            self.newlines()
            a = self.ternary()
            self.newlines()
            self.take(":")
            self.newlines()
            b = self.ternary()
            return ("cond", cond, a, b)
        if self.tok.kind in _ASSIGN_OPS:
            if cond[0] not in _LVALUES:
                if self.tok.kind == "/=" :
                    raise self.error()
                raise self.error()
            op = self.tok.kind
            self.pos += 1
            self.newlines()
            self.enter()
            try:
                value = self.ternary()
            finally:
                self.depth -= 1
            return ("assign", op, cond, value)
        return cond

    def or_expr(self) -> Any:
        left = self.and_expr()
        while self.tok.kind == "||":
            self.pos += 1
            self.newlines()
            left = ("or", left, self.and_expr())
        return left

    def and_expr(self) -> Any:
        left = self.in_expr()
        while self.tok.kind == "&&":
            self.pos += 1
            self.newlines()
            left = ("and", left, self.in_expr())
        return left

    def in_expr(self) -> Any:
        left = self.match_expr()
        while self.tok.kind == "in" and not self.no_in:
            self.pos += 1
            left = ("in", [left], self.take("NAME").value)
        return left

    def match_expr(self) -> Any:
        left = self.comparison()
        while self.tok.kind in ("~", "!~"):
            neg = self.tok.kind == "!~"
            self.pos += 1
            left = ("match", neg, left, self.comparison())
        return left

    def comparison(self) -> Any:
        left = self.getline_pipe()
        while True:
            k = self.tok.kind
            if k in ("<", "<=", "!=", "==", ">=") or (k == ">" and not self.no_gt):
                self.pos += 1
                left = ("cmp", k, left, self.getline_pipe())
            else:
                return left

    def getline_pipe(self) -> Any:
        left = self.concatenation()
        while self.tok.kind == "|" and self.peek().kind == "getline":
            self.pos += 2
            lv = self.optional_lvalue()
            left = ("getline", "cmd", lv, left)
        return left

    def concatenation(self) -> Any:
        first = self.additive()
        parts = [first]
        while True:
            k = self.tok.kind
            if k not in _CONCAT_START or k in ("-", "+", "!"):
                break
            if k == "in":
                break
            parts.append(self.additive())
        return parts[0] if len(parts) == 1 else ("concat", parts)

    def additive(self) -> Any:
        left = self.multiplicative()
        while self.tok.kind in ("+", "-"):
            op = self.tok.kind
            self.pos += 1
            left = ("bin", op, left, self.multiplicative())
        return left

    def multiplicative(self) -> Any:
        left = self.unary()
        while self.tok.kind in ("*", "/", "%"):
            op = self.tok.kind
            self.pos += 1
            left = ("bin", op, left, self.unary())
        return left

    def unary(self) -> Any:
        k = self.tok.kind
        if k in ("!", "-", "+"):
            self.pos += 1
            self.enter()
            try:
                operand = self.unary()
            finally:
                self.depth -= 1
            return ({"!": "not", "-": "neg", "+": "pos"}[k], operand)
        return self.power()

    def power(self) -> Any:
        base = self.postfix()
        if self.tok.kind == "^":
            self.pos += 1
            self.enter()
            try:
                k = self.tok.kind
                if k in ("-", "+", "!"):
                    self.pos += 1
                    exponent = ({"!": "not", "-": "neg", "+": "pos"}[k], self.power_operand())
                else:
                    exponent = self.power_operand()
            finally:
                self.depth -= 1
            return ("bin", "^", base, exponent)
        return base

    def power_operand(self) -> Any:
        return self.power()

    def postfix(self) -> Any:
        k = self.tok.kind
        if k in ("++", "--"):
            self.pos += 1
            lv = self.postfix()
            if lv[0] not in _LVALUES:
                raise self.error()
            return ("preinc", k, lv)
        node = self.primary()
        if self.tok.kind in ("++", "--") and node[0] in _LVALUES:
            op = self.tok.kind
            self.pos += 1
            return ("postinc", op, node)
        return node

    def optional_lvalue(self) -> Any:
        k = self.tok.kind
        if k == "$":
            self.pos += 1
            return ("field", self.field_operand())
        if k == "NAME":
            name = self.tok.value
            self.pos += 1
            if self.accept("["):
                return ("index", name, self.expr_list("]"))
            return ("var", name)
        return None

    def field_operand(self) -> Any:
        k = self.tok.kind
        if k in ("++", "--"):
            self.pos += 1
            lv = self.primary()
            if lv[0] not in _LVALUES:
                raise self.error()
            return ("preinc", k, lv)
        if k in ("-", "+", "!"):
            self.pos += 1
            return ({"!": "not", "-": "neg", "+": "pos"}[k], self.field_operand())
        self.enter()
        try:
            return self.primary()
        finally:
            self.depth -= 1

    def primary(self) -> Any:
        t = self.tok
        k = t.kind
        if k == "NUMBER":
            self.pos += 1
            return ("num", t.value)
        if k == "STRING":
            self.pos += 1
            return ("str", t.value)
        if k == "ERE":
            self.pos += 1
            return ("re", t.value)
        if k == "$":
            self.pos += 1
            return ("field", self.field_operand())
        if k == "(":
            self.pos += 1
            saved = self.no_gt, self.no_in
            self.no_gt = self.no_in = 0
            self.depth += 1
            try:
                self.newlines()
                items = [self.expr()]
                while self.accept(","):
                    self.newlines()
                    items.append(self.expr())
                self.newlines()
                self.take(")")
            finally:
                self.depth -= 1
                self.no_gt, self.no_in = saved
            if len(items) > 1:
                if self.tok.kind == "in":
                    self.pos += 1
                    return ("in", items, self.take("NAME").value)
                return ("grouplist", items)
            return ("group", items[0])
        if k == "NAME":
            self.pos += 1
            if self.tok.kind == "[":
                self.pos += 1
                saved = self.no_gt, self.no_in
                self.no_gt = self.no_in = 0
                try:
                    subs = self.expr_list("]")
                finally:
                    self.no_gt, self.no_in = saved
                return ("index", t.value, subs)
            return ("var", t.value)
        if k == "FUNC_NAME":
            self.pos += 1
            self.take("(")
            args = self.call_args()
            self.calls.append((t.value, len(args), t.line))
            return ("call", t.value, args)
        if k == "BUILTIN":
            self.pos += 1
            name = t.value
            if self.tok.kind == "(":
                self.pos += 1
                args = self.call_args()
            elif name == "length":
                args = []
            else:
                raise self.error()
            return ("builtin", name, args)
        if k == "getline":
            self.pos += 1
            lv = self.optional_lvalue()
            if self.tok.kind == "<":
                self.pos += 1
                src = self.getline_source()
                return ("getline", "file", lv, src)
            return ("getline", "main", lv, None)
        if k in ("-", "+", "!"):
            return self.unary()
        raise self.error()

    def getline_source(self) -> Any:
        k = self.tok.kind
        if k == "$":
            self.pos += 1
            return ("field", self.field_operand())
        return self.primary()

    def call_args(self) -> list[Any]:
        saved = self.no_gt, self.no_in
        self.no_gt = self.no_in = 0
        self.enter()
        try:
            self.newlines()
            if self.accept(")"):
                return []
            items = [self.expr()]
            while self.accept(","):
                self.newlines()
                items.append(self.expr())
            self.newlines()
            self.take(")")
            return items
        finally:
            self.depth -= 1
            self.no_gt, self.no_in = saved


def parse(src: str) -> Parser:
    return Parser(src).program()
