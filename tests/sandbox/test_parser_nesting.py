"""Deeply nested source parses as on native CPython, on every image: its parser's
nesting bound is native CPython's (python_wasm/parser_stack.py patches the WASI build's
smaller MAXSTACK in both guests). Runs on both images (tests/images.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)


def test_199_nested_parentheses_parse(run_code) -> None:
    result = run_code("def main(args):\n    return eval('(' * 199 + '1' + ')' * 199)\n")
    assert result.output == 1, result.error


def test_past_the_nesting_limit_is_the_native_syntax_error(run_code) -> None:
    code = ("def main(args):\n    try:\n        eval('(' * 250 + '1' + ')' * 250)\n"
            "    except SyntaxError as exc:\n        return exc.msg\n")
    assert run_code(code).output == "too many nested parentheses"


@pytest.mark.parametrize("source", ["'-' * 5000 + '1'", "'[' * 3000 + ']' * 3000", "'not ' * 5000 + 'x'"])
def test_source_nested_past_the_parser_bound_is_an_error_not_a_crash(run_code, source: str) -> None:
    code = (f"def main(args):\n    try:\n        compile({source}, 's', 'eval')\n"
            "    except (SyntaxError, MemoryError, RecursionError) as exc:\n        return type(exc).__name__\n"
            "    return 'parsed'\n")
    result = run_code(code)
    assert result.status == "completed", result.error
    assert result.output in ("SyntaxError", "MemoryError", "RecursionError", "parsed")
