"""`awk` for the sandbox's shell: just-bash's, with string concatenation parsed right.

just-bash's awk evaluates a concatenation (`$1 " " $2`, `NR ": " $0`) by splitting the
expression on every space, inside string literals too (awk.py `_eval_expr`'s last case),
so `print $1 " " $2` printed `ab` and `print "x y" $1` printed its own source. Here an
expression made only of operands (strings, fields, names, calls, numbers) separated by
spaces is split into those operands, quotes and parentheses respected, and each one is
evaluated by the library; anything with an operator is the library's, as it was.
"""

from __future__ import annotations

from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.commands.awk.awk import AwkCommand
# isort: on


# Characters that make an expression more than a concatenation (outside strings and brackets).
_OPERATORS = frozenset("+-*/%<>=!&|?:~^,;")


def concatenation(expr: str) -> list[str] | None:
    """The operands of `expr` if it is a concatenation of two or more, else None."""
    tokens: list[str] = []
    current = ""
    depth = 0
    quoted = False
    i = 0
    while i < len(expr):
        c = expr[i]
        if quoted:
            current += c
            if c == "\\" and i + 1 < len(expr):
                current += expr[i + 1]
                i += 1
            elif c == '"':
                quoted = False
                if depth == 0:
                    tokens.append(current)
                    current = ""
        elif c == '"':
            if current and depth == 0:
                tokens.append(current)
                current = ""
            quoted = True
            current += c
        elif c in "([":
            depth += 1
            current += c
        elif c in ")]":
            depth -= 1
            current += c
        elif depth == 0 and c.isspace():
            if current:
                tokens.append(current)
                current = ""
        elif depth == 0 and c in _OPERATORS:
            return None
        else:
            current += c
        i += 1
    if quoted or depth:
        return None
    if current:
        tokens.append(current)
    return tokens if len(tokens) > 1 else None


class SandboxAwk(AwkCommand):
    def _eval_expr(self, expr: str, state: Any, line: str, fields: list[str] | None = None) -> Any:
        tokens = concatenation(expr.strip())
        if tokens is None:
            return super()._eval_expr(expr, state, line, fields)
        return "".join(self._format_number(super(SandboxAwk, self)._eval_expr(t, state, line, fields)) for t in tokens)
