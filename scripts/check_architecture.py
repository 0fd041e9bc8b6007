"""The house's size and layering rules, checked (docs/architecture.md).

- no module over MAX_MODULE_LINES lines;
- no function or method over MAX_FUNCTION_LINES lines (decorators and docstring included);
- no import cycle between packages (``wasmrun.sandbox`` -> ``python_wasm`` -> ``wasmrun.sandbox``);
- ``sandbox/engine.py`` at most ENGINE_LINES lines;
- code outside ``wasmrun/sandbox/`` imports the sandbox only through its face, ``wasmrun.sandbox``
  (its ``__all__``), never ``wasmrun.sandbox.<part>``, by an import or by a module name in a
  string (``python -m``, ``importlib``); tests under ``tests/sandbox/`` test the parts and may
  reach inside, as may the few tools in FACE_EXEMPT.

Run ``python scripts/check_architecture.py`` (exit 1 and a list when a rule is broken);
``tests/test_architecture.py`` runs it in CI.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("wasmrun", "python_wasm")
# The guest's own runtime runs inside the sandbox and is not part of the host's layering.
EXCLUDED = ("python_wasm/runtime",)
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
ENGINE_LINES = 300
SANDBOX = "wasmrun.sandbox"
# Where code outside the sandbox lives, and what of it may reach inside: tests of the parts, and
# tools that time or compare its inner steps (they patch or read a part's functions by name).
FACE_CHECKED = ("wasmrun", "tests", "scripts", "examples")
FACE_EXEMPT = (
    "wasmrun/sandbox/",
    "tests/sandbox/",
    "tests/test_abi_drift.py",  # the guest's sources against the host's host calls and door
    "scripts/hello_phases.py",  # times a run's inner steps
    "scripts/profile_guest.py",  # swaps the images' engine settings
    "scripts/bench_legacy.py",  # the old bench's own stdlib engine
)


@dataclass(frozen=True)
class Finding:
    where: str
    rule: str

    def __str__(self) -> str:
        return f"{self.where}: {self.rule}"


def host_modules() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(EXCLUDED):
                yield path


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str:
    """The package a module belongs to for layering: ``wasmrun.sandbox.engine`` ->
    ``wasmrun.sandbox``; top-level modules of ``wasmrun`` are each their own unit."""
    parts = module.split(".")
    if parts[0] == "python_wasm":
        return "python_wasm"
    return ".".join(parts[:2])


def imported_modules(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                keep = len(base) - node.level + (1 if is_package else 0)
                prefix = ".".join(base[:keep])
                target = f"{prefix}.{node.module}" if node.module else prefix
            else:
                target = node.module or ""
            yield target
            for alias in node.names:
                yield f"{target}.{alias.name}"


def function_findings(tree: ast.Module, where: str) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > MAX_FUNCTION_LINES:
                yield Finding(f"{where}:{node.lineno} {node.name}", f"function of {length} lines")


def package_graph(modules: dict[str, ast.Module], packages: set[str]) -> dict[str, set[str]]:
    known = set(modules)
    graph: dict[str, set[str]] = {package: set() for package in packages}
    for module, tree in modules.items():
        source = package_of(module)
        is_package = module in packages or module.count(".") == 0
        for target in imported_modules(tree, module, is_package):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and package_of(target) != source:
                graph[source].add(package_of(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected set of packages with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def face_findings(tree: ast.Module, where: str) -> Iterator[Finding]:
    """Imports of the sandbox past its face in one module outside it: ``wasmrun.sandbox.<part>``
    imported, a part imported by name from the face (``from wasmrun.sandbox import engine``),
    or a part's module name as a whole string."""
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
            if node.module == SANDBOX:
                names += [f"{SANDBOX}.{alias.name}" for alias in node.names if _is_part(alias.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_module_name(node.value):
            names = [node.value]
        for name in names:
            if name.startswith(SANDBOX + "."):
                yield Finding(f"{where}:{node.lineno}", f"imports {name} past the sandbox's face (wasmrun.sandbox)")


def _is_part(name: str) -> bool:
    """A module or package inside the sandbox (not a name its face exports)."""
    base = ROOT / "wasmrun" / "sandbox" / name
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _is_module_name(text: str) -> bool:
    parts = text.split(".")
    return len(parts) > 2 and all(part.isidentifier() for part in parts)


def face_checked_modules() -> Iterator[Path]:
    for folder in FACE_CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if not path.relative_to(ROOT).as_posix().startswith(FACE_EXEMPT):
                yield path


def findings() -> list[Finding]:
    result: list[Finding] = []
    modules: dict[str, ast.Module] = {}
    for path in host_modules():
        where = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            result.append(Finding(where, f"module of {lines} lines"))
        tree = ast.parse(text, filename=where)
        modules[module_name(path)] = tree
        result.extend(function_findings(tree, where))
    engine = ROOT / "wasmrun/sandbox/engine.py"
    engine_lines = engine.read_text(encoding="utf-8").count("\n")
    if engine_lines > ENGINE_LINES:
        result.append(Finding("wasmrun/sandbox/engine.py", f"engine of {engine_lines} lines"))
    packages = {package_of(module) for module in modules}
    for members in cycles(package_graph(modules, packages)):
        result.append(Finding(" <-> ".join(members), "import cycle between packages"))
    for path in face_checked_modules():
        where = path.relative_to(ROOT).as_posix()
        result.extend(face_findings(ast.parse(path.read_text(encoding="utf-8"), filename=where), where))
    return result


def main() -> int:
    found = findings()
    for finding in found:
        print(finding)
    print(f"{len(found)} finding(s)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
