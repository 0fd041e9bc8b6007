"""The house's size and layering rules, checked (docs/architecture.md, "Layers").

- no module over MAX_MODULE_LINES lines, no function or method over MAX_FUNCTION_LINES lines
  (decorators and docstring included), ``sandbox/engine.py`` at most ENGINE_LINES lines;
- no import cycle between packages, and none between modules (``a`` imports ``b`` imports
  ``a``), anywhere in ``wasmrun/`` and ``python_wasm/``: an import inside a function counts
  (it still ties the two modules together), one under ``if TYPE_CHECKING:`` does not (it
  never runs);
- the layer order: each top-level module or package of ``wasmrun/`` (and ``python_wasm``)
  sits in one layer of HOUSE_LAYERS and imports only its own layer and the layers below,
  type-only imports included (a lower layer that names a higher one's type still depends
  on it); a package may declare its own order of sub-packages in SUB_LAYERS;
- no ``from wasmrun.x import _name`` in ``wasmrun/``: a name another module uses is public where
  it is defined;
- no ``from wasmrun.x import name as name`` re-export of our own names: each name is
  imported from the module that defines it (a package's ``__init__.py``, its face, may);
- nothing in ``wasmrun/`` reaches the checkout: no import of ``scripts`` or ``tests``, no
  change to ``sys.path`` (an installed wheel has neither folder);
- docs/layout.md names every top-level module and package of ``wasmrun/``, and every
  ``name.py`` or ``name/`` it names in its ``wasmrun/`` section exists; docs/architecture.md's
  layer diagram has HOUSE_LAYERS' layers, in order, each naming its units;
- code outside ``wasmrun/sandbox/`` imports the sandbox only through its face, ``wasmrun.sandbox``
  (its ``__all__``), never ``wasmrun.sandbox.<part>``, by an import or by a module name in a
  string (``python -m``, ``importlib``); tests under ``tests/sandbox/`` test the parts and may
  reach inside, as may the few tools in FACE_EXEMPT.

KNOWN_UNTIL_MERGE lists the findings other branches remove; it must be empty once they are
merged (a listed finding that no longer occurs is itself a finding, so the list cannot rot).

Run ``python scripts/check_architecture.py`` (exit 1 and a list when a rule is broken);
``tests/packaging/test_architecture.py`` runs it in CI.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
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
    "tests/sandbox/test_abi_drift.py",  # the guest's sources against the host's host calls and door
    "scripts/hello_phases.py",  # times a run's inner steps
    "scripts/session_phases.py",  # times a session run's inner steps
    "scripts/profile_guest.py",  # swaps the images' engine settings
    "scripts/bench_legacy.py",  # the old bench's own stdlib engine
)

Layers = tuple[tuple[str, frozenset[str]], ...]


def _layer(name: str, *units: str) -> tuple[str, frozenset[str]]:
    return name, frozenset(unit if unit == "python_wasm" else f"wasmrun.{unit}" for unit in units)


# Top to bottom. A unit (a top-level module or package of wasmrun, or python_wasm) imports its
# own layer and the layers below it, never one above. A unit placed nowhere is a finding, so a
# new package has to be given its place.
HOUSE_LAYERS: Layers = (
    # What a user starts: commands, their help texts, the bench.
    _layer("commands", "__main__", "cli", "bench"),
    # The assembly: settings read once, the backends opened once, the server built from them.
    _layer("assembly", "server", "backends", "settings", "workersizing"),
    # The fronts: HTTP and its JSON-RPC envelope, MCP, the E2B-compatible front, the client, and
    # agent frameworks' sandbox backends on the client (adapters; their frameworks optional extras);
    # doors: what the E2B, Jupyter and Azure doors share (it imports no door: tests/doors/test_doors.py).
    _layer("fronts", "wire", "mcp", "e2b", "jupyter", "azure", "doors", "tools", "client", "adapters"),
    # The Skills Protocol's methods and the texts of its tools.
    _layer("protocol", "protocol", "capabilities", "served"),
    # What the methods work on: skills, callers and their limits, the shared backend, the audit
    # log and metrics, the package layer, each image's facts.
    _layer("stores", "registry", "sessionstore", "tenants", "database", "observe", "packages", "imagefacts"),
    # Runs.
    _layer("sandbox", "sandbox"),
    # What a run uses: the blob store, network by permission, the guest's build, the declared
    # limits, the bench's timestamps, the offload of blocking work.
    _layer("run services", "blobs", "egress", "python_wasm", "limits", "phases", "offload"),
    # The host-guest contract, the file-system primitives and the traces' hooks (they import
    # nothing of ours).
    _layer("base", "abi", "durable", "dirtree", "tracing"),
)



def _sub_layer(package: str, name: str, *members: str) -> tuple[str, frozenset[str]]:
    return name, frozenset(f"{package}.{member}" for member in members)


# A package's own order of its members (its sub-packages and modules; top to bottom), checked like
# the house's for the imports between them: a member placed nowhere is a finding, and so is a
# member that imports through the package's own face (its __init__) rather than from the member.
SUB_LAYERS: dict[str, Layers] = {
    # The sandbox, as its face's docstring lists it (wasmrun/sandbox/__init__.py).
    SANDBOX: tuple(_sub_layer(SANDBOX, name, *members) for name, *members in (
        ("pool", "pool"),  # off the event loop: the executor, worker processes, the data image's warm-up
        ("engines", "engines"),  # which engine a server runs: an image choice -> its SandboxEngine
        ("engine", "engine"),  # SandboxEngine
        ("sessions", "sessions"),  # a run inside a session, its state and pages on disk
        ("backgroundruns", "backgroundruns"),  # the engine's own runs
        ("runloop", "runloop"),  # what every run needs, and the run itself
        ("outcome", "outcome", "redaction"),  # how a run ended; secrets out
        ("images", "images"),  # the guest images (the Image seam, stdlib, data, compiled modules)
        ("memory", "memory"),  # kept ahead: spare instances, a skill's pages, bytecode, heap trim
        ("budget", "budget"),  # CPU and wall-clock budgets, the WASI guards
        ("guest", "guest"),  # the guest boundary
        ("files", "files"),  # a run's folders and their quota
        ("contract", "contract"),  # the run's request and result, limits, errors
    )),
}

# Findings that other branches remove, each as its exact text. The lead empties this after
# merging them; a listed finding that no longer occurs fails the check.
KNOWN_UNTIL_MERGE: dict[str, str] = {}


@dataclass(frozen=True)
class Finding:
    where: str
    rule: str

    def __str__(self) -> str:
        return f"{self.where}: {self.rule}"


def host_modules(root: Path = ROOT) -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if not relative.startswith(EXCLUDED):
                yield path


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str:
    """The unit a module belongs to for layering: ``wasmrun.sandbox.engine`` ->
    ``wasmrun.sandbox``; top-level modules of ``wasmrun`` are each their own unit."""
    parts = module.split(".")
    if parts[0] == "python_wasm":
        return "python_wasm"
    return ".".join(parts[:2])


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_nodes(tree: ast.AST, *, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, in functions too; those under ``if TYPE_CHECKING:`` only when asked."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and not type_checking and _is_type_checking(node):
            for other in node.orelse:
                yield from import_nodes(ast.Module(body=[other], type_ignores=[]), type_checking=type_checking)
        else:
            yield from import_nodes(node, type_checking=type_checking)


def imported_modules(tree: ast.AST, module: str, is_package: bool, known: set[str], *,
                     type_checking: bool = True) -> set[str]:
    """The known modules a module imports: ``from a import b`` is module ``a.b`` where that is
    a module, else ``a``; a name not known is taken as its nearest known parent."""

    def nearest(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    found: set[str] = set()
    for node in import_nodes(tree, type_checking=type_checking):
        if isinstance(node, ast.Import):
            found.update(nearest(alias.name) for alias in node.names)
            continue
        if node.level:
            base = module.split(".")
            prefix = ".".join(base[: len(base) - node.level + (1 if is_package else 0)])
            target = f"{prefix}.{node.module}" if node.module else prefix
        else:
            target = node.module or ""
        for alias in node.names:
            full = f"{target}.{alias.name}"
            found.add(full if full in known else nearest(target))
    found.discard("")
    found.discard(module)
    return found


def reexport_findings(tree: ast.Module, where: str) -> Iterator[Finding]:
    """``from wasmrun.x import name as name``: a second address for a name of ours."""
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             and (node.level or (node.module or "").split(".")[0] in PACKAGES)
             for alias in node.names if alias.asname == alias.name]
    if names:
        yield Finding(where, f"re-exports {', '.join(names)} (`X as X`): import them from where they are defined")


def private_findings(tree: ast.Module, where: str) -> Iterator[Finding]:
    """``from wasmrun.x import _name``: a module reaching into another's private members (a name
    shared between modules is public where it is defined). wasmrun/ only: the guest's build
    (python_wasm/) shares a few helpers between its modules this way."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "wasmrun"):
            private = [alias.name for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
            if private:
                yield Finding(f"{where}:{node.lineno}", f"imports {', '.join(private)}, private to "
                              f"{'.' * node.level}{node.module or ''}")


CHECKOUT_ONLY = ("scripts", "tests", "conftest")


def checkout_findings(tree: ast.Module, where: str) -> Iterator[Finding]:
    """An import of the checkout's scripts/ or tests/, or a change to sys.path, in wasmrun/."""
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.stmt | ast.expr)), key=lambda n: n.lineno):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        for name in names:
            if name.split(".")[0] in CHECKOUT_ONLY:
                yield Finding(f"{where}:{node.lineno}", f"imports {name}, which only a checkout has")
        target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
        targets = node.targets if isinstance(node, ast.Assign) else [target] if target is not None else []
        if any(isinstance(t, ast.Attribute) and t.attr == "path" and isinstance(t.value, ast.Name)
               and t.value.id == "sys" for t in targets):
            yield Finding(f"{where}:{node.lineno}", "changes sys.path (what it imports must be in the package)")


def face_findings(tree: ast.Module, where: str, root: Path = ROOT) -> Iterator[Finding]:
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
                names += [f"{SANDBOX}.{alias.name}" for alias in node.names if _is_part(alias.name, root)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_module_name(node.value):
            names = [node.value]
        for name in names:
            if name.startswith(SANDBOX + "."):
                yield Finding(f"{where}:{node.lineno}", f"imports {name} past the sandbox's face (wasmrun.sandbox)")


def _is_part(name: str, root: Path) -> bool:
    """A module or package inside the sandbox (not a name its face exports)."""
    base = root / "wasmrun" / "sandbox" / name
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _is_module_name(text: str) -> bool:
    parts = text.split(".")
    return len(parts) > 2 and all(part.isidentifier() for part in parts)


def face_checked_modules(root: Path = ROOT) -> Iterator[Path]:
    for folder in FACE_CHECKED:
        for path in sorted((root / folder).rglob("*.py")):
            if not path.relative_to(root).as_posix().startswith(FACE_EXEMPT):
                yield path


def function_findings(tree: ast.Module, where: str) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > MAX_FUNCTION_LINES:
                yield Finding(f"{where}:{node.lineno} {node.name}", f"function of {length} lines")


def package_graph(module_graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {package_of(module): set() for module in module_graph}
    for module, targets in module_graph.items():
        source = package_of(module)
        graph[source].update(package_of(target) for target in targets if package_of(target) != source)
    # The root package (``wasmrun/__init__.py``) loads the client lazily and is no layer's unit.
    graph.pop("wasmrun", None)
    for targets in graph.values():
        targets.discard("wasmrun")
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Each strongly connected set of nodes with more than one member (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return sorted(found)


def layer_findings(graph: Mapping[str, Iterable[str]], layers: Layers, unit_of: Mapping[str, str],
                   where: Mapping[str, str]) -> Iterator[Finding]:
    """Each unit placed in no layer (or in a layer but missing), and each import of a unit in a
    higher layer. ``unit_of`` gives the unit of each module the layers cover."""
    rank: dict[str, int] = {}
    for position, (name, units) in enumerate(layers):
        for unit in units:
            if unit in rank:
                yield Finding(unit, f"placed in two layers ({layers[rank[unit]][0]!r} and {name!r})")
            rank[unit] = position
    present = set(unit_of.values())
    for unit in sorted(present - set(rank)):
        yield Finding(unit, "placed in no layer (scripts/check_architecture.py)")
    for unit in sorted(set(rank) - present):
        yield Finding(unit, "placed in a layer but no such module or package")
    for module in sorted(graph):
        source = unit_of.get(module)
        if source not in rank:
            continue
        for target in sorted(graph[module]):
            above = unit_of.get(target)
            if above in rank and rank[above] < rank[source]:
                yield Finding(where[module], f"imports {target} (layer {layers[rank[above]][0]!r} is above "
                                             f"{layers[rank[source]][0]!r})")


def sub_units(graph: Mapping[str, Iterable[str]], package: str) -> dict[str, str]:
    """Each module inside ``package`` -> its member directly under it (``package.x``)."""
    depth = package.count(".") + 1
    return {module: ".".join(module.split(".")[: depth + 1]) for module in graph
            if module.startswith(package + ".")}


LAYOUT_NAME = re.compile(r"(?<![\w/.-])((?:[a-z_][a-z0-9_]*/)*[a-z_][a-z0-9_]*(?:\.py\b|/(?![\w.])))")


def layout_findings(root: Path = ROOT) -> Iterator[Finding]:
    """docs/layout.md's ``wasmrun/`` section names each top-level module and package, and every
    ``name.py`` / ``name/`` it names exists under ``wasmrun/`` (as a path, or a file anywhere in it)."""
    doc = root / "docs/layout.md"
    text = doc.read_text(encoding="utf-8")
    section = text.partition("\nwasmrun/\n")[2].partition("\npython_wasm/\n")[0]
    if not section:
        yield Finding("docs/layout.md", "no `wasmrun/` section (from a line `wasmrun/` to a line `python_wasm/`)")
        return
    package = root / "wasmrun"
    named = set(LAYOUT_NAME.findall(section))
    files = {path.name for path in package.rglob("*.py")}
    folders = {path.name + "/" for path in package.rglob("*") if path.is_dir()}
    for name in sorted(named):
        if not ((package / name).exists() or name in files or name in folders):
            yield Finding("docs/layout.md", f"names {name}, which is not in wasmrun/")
    for path in sorted(package.iterdir()):
        if path.name.startswith(("_", ".")):
            continue
        name = path.name + "/" if path.is_dir() else path.name
        if (path.is_dir() or path.suffix == ".py") and name not in named:
            yield Finding("docs/layout.md", f"does not name wasmrun/{name}")


def diagram_findings(root: Path, layers: Layers) -> Iterator[Finding]:
    """docs/architecture.md's diagram (the first code block under "## Layers"): a line that
    starts in the first column opens a layer (its label, then what it holds); each layer of
    ``layers`` is there in order under its name, and names each of its units."""
    doc = "docs/architecture.md"
    text = (root / doc).read_text(encoding="utf-8").partition("\n## Layers\n")[2]
    block = text.partition("\n```\n")[2].partition("\n```")[0]
    labels: list[str] = []
    named: dict[str, int] = {}
    for line in block.splitlines():
        if line[:1].strip():
            labels.append(re.split(r"\s{2,}", line, maxsplit=1)[0].rstrip("/"))
        for name in LAYOUT_NAME.findall(line):
            named.setdefault(name, len(labels) - 1)
    names = [name for name, _ in layers]
    if labels != names:
        yield Finding(doc, f"the layer diagram has layers {labels}, HOUSE_LAYERS has {names}")
        return
    for position, (name, units) in enumerate(layers):
        for unit in sorted(units):
            file_name = _doc_name(root, unit)
            if file_name not in named:
                yield Finding(doc, f"the layer diagram does not name {file_name} (layer {name!r})")
            elif named[file_name] != position:
                yield Finding(doc, f"the layer diagram places {file_name} in layer {labels[named[file_name]]!r}, "
                                   f"HOUSE_LAYERS in {name!r}")


def _doc_name(root: Path, unit: str) -> str:
    """How the docs name a unit: ``tools.py``, ``wire/``, ``python_wasm/``."""
    last = unit.rpartition(".")[2]
    return f"{last}/" if (root / unit.replace(".", "/")).is_dir() else f"{last}.py"


def module_trees(root: Path = ROOT) -> tuple[dict[str, ast.Module], dict[str, Path], list[Finding]]:
    trees: dict[str, ast.Module] = {}
    paths: dict[str, Path] = {}
    found: list[Finding] = []
    for path in host_modules(root):
        where = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            found.append(Finding(where, f"module of {lines} lines"))
        tree = ast.parse(text, filename=where)
        found.extend(function_findings(tree, where))
        if path.name != "__init__.py":
            found.extend(reexport_findings(tree, where))
        if where.startswith("wasmrun/"):
            found.extend(checkout_findings(tree, where))
            found.extend(private_findings(tree, where))
        name = module_name(path, root)
        trees[name] = tree
        paths[name] = path
    return trees, paths, found


def raw_findings(root: Path = ROOT, layers: Layers = HOUSE_LAYERS,
                 sub_layers: Mapping[str, Layers] | None = None) -> list[Finding]:
    """Every finding of the tree at ``root``, the allowlist not applied."""
    trees, paths, result = module_trees(root)
    engine = root / "wasmrun/sandbox/engine.py"
    if engine.exists() and (engine_lines := engine.read_text(encoding="utf-8").count("\n")) > ENGINE_LINES:
        result.append(Finding("wasmrun/sandbox/engine.py", f"engine of {engine_lines} lines"))
    known = set(trees)
    where = {name: path.relative_to(root).as_posix() for name, path in paths.items()}

    def graph(type_checking: bool) -> dict[str, set[str]]:
        return {name: imported_modules(tree, name, paths[name].name == "__init__.py", known,
                                       type_checking=type_checking) for name, tree in trees.items()}

    run_time, every = graph(type_checking=False), graph(type_checking=True)
    for members in cycles(package_graph(run_time)):
        result.append(Finding(" <-> ".join(members), "import cycle between packages"))
    for members in cycles(run_time):
        result.append(Finding(" <-> ".join(members), "import cycle between modules"))
    units = {name: package_of(name) for name in every if name != "wasmrun"}
    result.extend(layer_findings(every, layers, units, where))
    for package, order in (SUB_LAYERS if sub_layers is None else sub_layers).items():
        members = sub_units(every, package)
        result.extend(layer_findings(every, order, members, where))
        result.extend(Finding(where[module], f"imports through {package}'s face: import from the member")
                      for module in sorted(members) if package in every[module])
    if (root / "wasmrun/sandbox/__init__.py").exists():
        for path in face_checked_modules(root):
            relative = path.relative_to(root).as_posix()
            result.extend(face_findings(ast.parse(path.read_text(encoding="utf-8"), filename=relative), relative, root))
    if (root / "docs/layout.md").exists():
        result.extend(layout_findings(root))
    if (root / "docs/architecture.md").exists():
        result.extend(diagram_findings(root, layers))
    return result


def findings(root: Path = ROOT, layers: Layers = HOUSE_LAYERS, sub_layers: Mapping[str, Layers] | None = None,
             known: Mapping[str, str] | None = None) -> list[Finding]:
    """The findings not in ``known`` (KNOWN_UNTIL_MERGE), and each entry of it that no longer occurs."""
    known = KNOWN_UNTIL_MERGE if known is None else known
    found = raw_findings(root, layers, sub_layers)
    texts = {str(finding) for finding in found}
    result = [finding for finding in found if str(finding) not in known]
    for text, branch in known.items():
        if text not in texts:
            result.append(Finding("KNOWN_UNTIL_MERGE", f"lists {text!r} (branch {branch}), which no longer occurs"))
    return result


def main() -> int:
    found = findings()
    for finding in found:
        print(finding)
    print(f"{len(found)} finding(s); {len(KNOWN_UNTIL_MERGE)} known until a merge (KNOWN_UNTIL_MERGE)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
