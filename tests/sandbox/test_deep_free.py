"""Freeing deeply nested structures and compiling long expressions, on each image (`make test`
runs it on both). Native CPython frees any depth: its trashcan defers containers when
the C stack runs low. On the data image CPython 3.15 measured that stack where its
deallocators barely use it, so a linked list of 20,000 dicts stopped the run with
StackOverflow when it was freed (python_wasm/native/data_dealloc.c)."""

from __future__ import annotations

import pytest

from wasmrun.sandbox.contract.types import RunResult

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

CHAINS = """
import gc

class Node:
    freed = 0
    def __init__(self, next):
        self.next = next
    def __del__(self):
        Node.freed += 1

class Plain:
    __slots__ = ("next",)
    def __init__(self, next):
        self.next = next

def build(kind, n):
    head = None
    for i in range(n):
        if kind == "list":
            head = [head]
        elif kind == "dict":
            head = {"next": head, "value": i}
        elif kind == "tuple":
            head = (head, i)
        elif kind == "node":
            head = Node(head)
        elif kind == "slots":
            head = Plain(head)
        elif kind == "cycle":  # freed by the cycle collector, not by reference counts
            head = [head]
            if i == 0:
                first = head
    if kind == "cycle":
        first.append(head)
    return head

def main(args):
    n = args["n"]
    done = []
    for kind in ("list", "dict", "tuple", "node", "slots", "cycle"):
        head = build(kind, n)
        del head  # the whole chain freed here, one level inside the next
        if kind == "cycle":
            gc.collect()
        done.append(kind)
    return {"done": done, "node_del_ran": Node.freed}
"""


def completed(result: RunResult):
    assert result.status == "completed", (result.error, result.logs)
    return result.output


@pytest.mark.parametrize("depth", [20_000, 300_000])
def test_chains_of_any_depth_are_freed_as_natively(run_code, depth: int) -> None:
    out = completed(run_code(CHAINS, args={"n": depth}))
    assert out == {"done": ["list", "dict", "tuple", "node", "slots", "cycle"], "node_del_ran": depth}


def test_a_deep_free_inside_a_deep_python_recursion(run_code) -> None:
    # The C stack is already partly used when the chain is freed: the trashcan still takes over.
    code = CHAINS + (
        "import sys\n"
        "def deep(k, n):\n"
        "    return deep(k - 1, n) if k else main({'n': n})\n"
        "def outer(args):\n"
        "    sys.setrecursionlimit(5_000)\n"
        "    return deep(3_000, args['n'])\n"
    )
    out = completed(run_code(code, args={"n": 100_000}, function="outer"))
    assert out["node_del_ran"] == 100_000


def test_deep_recursion_in_c_is_still_a_recursion_error_and_the_structure_is_freed(run_code) -> None:
    out = completed(run_code(
        "import json\n"
        "def main(args):\n"
        "    nested = []\n"
        "    for _ in range(100_000):\n"
        "        nested = [nested]\n"
        "    try:\n"
        "        json.dumps(nested)\n"
        "    except RecursionError:\n"
        "        return 'RecursionError'\n"
    ))
    assert out == "RecursionError"


LONG_EXPRESSIONS = """
import ast
def outcome(f):
    try:
        f()
        return "ok"
    except (RecursionError, MemoryError) as exc:
        return type(exc).__name__

def main(args):
    terms = "+".join(["1"] * 100_000)
    return [outcome(lambda: eval(terms)), outcome(lambda: compile("a" + ".b" * 50_000, "s", "eval")),
            outcome(lambda: ast.parse(terms)), outcome(lambda: ast.literal_eval("[" * 150 + "]" * 150))]
"""


def test_a_long_generated_expression_is_a_recursion_error_not_a_stopped_run(run_code) -> None:
    # Native CPython raises RecursionError for these; on the data image the compiler's and
    # ast.parse's recursion outran a 4 or 8 MiB wasm stack (dataimage.DATA_WASM_STACK_BYTES).
    evaluated, compiled, parsed, literal = completed(run_code(LONG_EXPRESSIONS))
    assert evaluated == compiled == "RecursionError" and literal == "ok"
    assert parsed in ("RecursionError", "ok")  # 3.11 stops ast.parse by depth; 3.15 by its C stack, which holds it
