"""Warnings for code that misread the run contract and so returned null silently.

The contract: run_code calls `main(args)` when the code defines it (its return
value is the output); otherwise the code runs as a script and the value of its
last statement, when that is an expression, is the output. A typo (`mian`),
a final assignment or print, or a `__main__` guard all end with `output: null`
and no error; a model then believes its code returned nothing. Each check here
runs only when the output is null, so a run with a value pays nothing for it.
"""

from __future__ import annotations

import ast
import types

# Names models and people give an entrypoint besides `main`.
_ENTRYPOINT_LIKE = frozenset({
    "run", "execute", "handler", "handle", "entrypoint", "entry", "start", "solve", "process", "go", "app",
    "lambda_handler", "main_function",
})

ARGS_UNUSED = (
    "args were given but the code defines no main(args), so nothing read them:"
    " define `def main(args):` and return the result"
)


def _distance(a: str, b: str, cap: int = 3) -> int:
    """Levenshtein distance (with transpositions), stopping early past `cap`."""
    if abs(len(a) - len(b)) > cap:
        return cap + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        previous2, previous = previous, current
    return previous[-1]


def _looks_like(name: str, wanted: str) -> bool:
    """A name that is `wanted` mistyped (case, underscores, up to 2 edits), or for
    `main`, a name people give an entrypoint (`run`, `handler`, ...)."""
    folded = name.lower().strip("_")
    target = wanted.lower().strip("_")
    if folded == target:
        return True
    if wanted == "main" and folded in _ENTRYPOINT_LIKE:
        return True
    return len(folded) >= 3 and _distance(folded, target) <= min(2, len(target) // 2)


def _functions(namespace: dict) -> list[str]:
    module = namespace.get("__name__")
    return [
        name for name, value in namespace.items()
        if isinstance(value, types.FunctionType) and value.__module__ == module
    ]


def candidates(namespace: dict, wanted: str) -> str:
    """For EntrypointNotFound: the functions that look like `wanted`, else all of them."""
    functions = _functions(namespace)
    close = [name for name in functions if _looks_like(name, wanted)]
    if close:
        return f"; did you mean {', '.join(repr(n) for n in close[:5])}? Rename it to {wanted!r}"
    if functions:
        return f"; it defines {', '.join(repr(n) for n in functions[:10])}"
    return "; it defines no functions at all"


def plain_script_null(namespace: dict, source: str, last: object, warnings: list[str]) -> None:
    """A script without main whose output is null: say why, if a reason shows."""
    close = [name for name in _functions(namespace) if _looks_like(name, "main")]
    if close:
        found = close[0]
        warnings.append(
            f"the code defines {found}() but no main(args), so it ran as a plain script and"
            f" {found} was never called; the output is null. Rename it to `def main(args):`"
            f" (args is the run's args object), or make the script's last line an expression"
            f" such as a call to {found}"
        )
    if "__main__" in source and "__name__" in source:
        warnings.append(
            "the code's `if __name__ == \"__main__\":` block did not run (the code is not run as"
            " __main__); the output is null. Define `def main(args):` and return the result instead"
        )
    if isinstance(last, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        target = last.targets[0] if isinstance(last, ast.Assign) else last.target
        name = ast.unparse(target) if len(ast.unparse(target)) <= 40 else "the value"
        warnings.append(
            f"the script's last statement assigns {name}, so the output is null: end the script"
            f" with the expression itself (a last line `{name}`) or return it from main(args)"
        )
    elif isinstance(last, ast.Expr) and _is_print(last.value):
        warnings.append(
            "the script's last statement is print(...), whose value is None: the output is null"
            " (the printed text is in logs_preview). To return a value, end the script with the"
            " value as an expression, or return it from main(args)"
        )


def _is_print(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "pprint")


def no_parameter(name: str) -> str:
    return (
        f"{name}() takes no parameter, so the run's args were not passed to it:"
        f" write `def {name}(args):` to receive them"
    )


def returned_none(name: str) -> str:
    return f"{name}() returned None, so the output is null: did it forget a `return`?"
