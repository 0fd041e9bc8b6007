"""The house's size and layering rules (scripts/check_architecture.py, docs/architecture.md):
no module over 600 lines, no function over 60, the engine at most 300, no import cycle
between packages. A change that breaks one fails here with the list of findings."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_architecture", ROOT / "scripts/check_architecture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_the_house_keeps_its_size_and_layering_rules() -> None:
    found = [str(finding) for finding in _checker().findings()]
    assert found == [], "\n".join(found)


def test_the_checker_finds_a_long_function_and_a_package_cycle() -> None:
    checker = _checker()
    body = "\n".join(f"    x{i} = {i}" for i in range(checker.MAX_FUNCTION_LINES + 1))
    tree = ast.parse(f"def long_one():\n{body}\n\ndef short_one():\n    return 1\n")
    found = [str(finding) for finding in checker.function_findings(tree, "m.py")]
    assert len(found) == 1 and "long_one" in found[0]
    graph = {"wasmrun.a": {"wasmrun.b"}, "wasmrun.b": {"wasmrun.c"}, "wasmrun.c": {"wasmrun.a"}, "wasmrun.d": set()}
    cycles = checker.cycles(graph)
    assert [sorted(members) for members in cycles] == [["wasmrun.a", "wasmrun.b", "wasmrun.c"]]
