"""The house's size and layering rules (scripts/check_architecture.py, docs/architecture.md):
no module over 600 lines, no function over 60, the engine at most 300, no import cycle between
packages or between modules, the layer order, no `X as X` re-export, and docs/layout.md naming
what wasmrun/ holds. Each rule is shown failing on a small bad tree and passing on the real one."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.archcheck import checker

# A small house: "top" above "middle" above "bottom", each a top-level module or package.
LAYERS = (("top", frozenset({"wasmrun.top"})), ("middle", frozenset({"wasmrun.middle"})),
          ("bottom", frozenset({"wasmrun.bottom"})))
LAYOUT = "# Layout\n\n```\nwasmrun/\n  top.py\n  middle/\n  bottom.py\npython_wasm/\n```\n"


def _tree(tmp_path: Path, files: dict[str, str], layout: str = LAYOUT) -> Path:
    base = {"wasmrun/__init__.py": "", "wasmrun/top.py": "", "wasmrun/middle/__init__.py": "",
            "wasmrun/bottom.py": "", "docs/layout.md": layout}
    for name, text in {**base, **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _found(root: Path, sub_layers: dict[str, object] | None = None) -> list[str]:
    return [str(finding) for finding in checker.raw_findings(root, LAYERS, sub_layers or {})]


def test_the_house_keeps_its_size_and_layering_rules() -> None:
    found = [str(finding) for finding in checker.findings()]
    assert found == [], "\n".join(found)


def test_the_small_good_house_passes(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"wasmrun/top.py": "from wasmrun import middle\nfrom wasmrun.bottom import x\n",
                            "wasmrun/middle/a.py": "import wasmrun.bottom\n"})
    assert _found(root) == []


def test_the_checker_finds_a_long_function_and_a_package_cycle() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(checker.MAX_FUNCTION_LINES + 1))
    tree = ast.parse(f"def long_one():\n{body}\n\ndef short_one():\n    return 1\n")
    found = [str(finding) for finding in checker.function_findings(tree, "m.py")]
    assert len(found) == 1 and "long_one" in found[0]
    graph = {"wasmrun.a": {"wasmrun.b"}, "wasmrun.b": {"wasmrun.c"}, "wasmrun.c": {"wasmrun.a"}, "wasmrun.d": set()}
    cycles = checker.cycles(graph)
    assert [sorted(members) for members in cycles] == [["wasmrun.a", "wasmrun.b", "wasmrun.c"]]


def test_a_cycle_between_modules_of_one_package_is_found_with_imports_in_functions(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "wasmrun/middle/a.py": "from wasmrun.middle.b import thing\n",
        "wasmrun/middle/b.py": "def later():\n    from wasmrun.middle import c\n",
        "wasmrun/middle/c.py": "from . import a\n",
    })
    assert _found(root) == [
        "wasmrun.middle.a <-> wasmrun.middle.b <-> wasmrun.middle.c: import cycle between modules"]


def test_an_import_under_type_checking_makes_no_cycle(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "wasmrun/middle/a.py": "from wasmrun.middle.b import thing\n",
        "wasmrun/middle/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from wasmrun.middle import a\n"
                               "else:\n    import json\n",
    })
    assert _found(root) == []


def test_a_lower_layer_importing_a_higher_one_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "wasmrun/middle/deep.py": "def f():\n    import wasmrun.top\n",
        # a type-only import still ties the bottom to the middle: found too
        "wasmrun/bottom.py": "import typing\nif typing.TYPE_CHECKING:\n    from wasmrun.middle.deep import f\n",
    })
    assert _found(root) == [
        "wasmrun/bottom.py: imports wasmrun.middle.deep (layer 'middle' is above 'bottom')",
        "wasmrun/middle/deep.py: imports wasmrun.top (layer 'top' is above 'middle')",
    ]


def test_a_package_placed_in_no_layer_or_a_layer_naming_nothing_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"wasmrun/newcomer/__init__.py": ""},
                 layout=LAYOUT.replace("  bottom.py\n", "  bottom.py\n  newcomer/\n"))
    assert _found(root) == ["wasmrun.newcomer: placed in no layer (scripts/check_architecture.py)"]
    (root / "wasmrun/bottom.py").unlink()
    assert _found(root) == ["wasmrun.newcomer: placed in no layer (scripts/check_architecture.py)",
                            "wasmrun.bottom: placed in a layer but no such module or package",
                            "docs/layout.md: names bottom.py, which is not in wasmrun/"]


def test_a_package_own_layer_order_is_checked(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"wasmrun/middle/run.py": "from wasmrun.middle.parts import engine\n",
                            "wasmrun/middle/parts/__init__.py": "",
                            "wasmrun/middle/parts/engine.py": "from wasmrun.middle import run\n"})
    order = {"wasmrun.middle": (("run", frozenset({"wasmrun.middle.run"})),
                                ("parts", frozenset({"wasmrun.middle.parts"})))}
    assert _found(root, order) == [
        "wasmrun.middle.parts.engine <-> wasmrun.middle.run: import cycle between modules",
        "wasmrun/middle/parts/engine.py: imports wasmrun.middle.run (layer 'run' is above 'parts')"]


# A package of three members, "engine" above "images" above "contract" (as the sandbox's own order).
PARTS = {"wasmrun.middle": (("engine", frozenset({"wasmrun.middle.engine"})),
                            ("images", frozenset({"wasmrun.middle.images"})),
                            ("contract", frozenset({"wasmrun.middle.contract"})))}


def _parts(tmp_path: Path, files: dict[str, str]) -> Path:
    base = {"wasmrun/middle/__init__.py": "def __getattr__(name):\n    return name\n",
            "wasmrun/middle/engine.py": "from wasmrun.middle.images import data\nfrom wasmrun.middle import contract\n",
            "wasmrun/middle/images/__init__.py": "", "wasmrun/middle/images/data.py": "from wasmrun.middle.contract import x\n",
            "wasmrun/middle/contract.py": "x = 1\n"}
    return _tree(tmp_path, {**base, **files})


def test_a_packages_members_in_their_order_pass(tmp_path: Path) -> None:
    assert _found(_parts(tmp_path, {}), PARTS) == []


def test_a_lower_member_importing_a_higher_one_is_found_without_a_cycle(tmp_path: Path) -> None:
    """The sandbox's old exception: an image that builds engines. No cycle is needed for the
    finding: the import is in a function, and the type-only one runs never."""
    root = _parts(tmp_path, {
        "wasmrun/middle/images/maker.py": "def make():\n    from wasmrun.middle.engine import data\n",
        "wasmrun/middle/contract.py": "import typing\nif typing.TYPE_CHECKING:\n    from wasmrun.middle.images import data\n",
    })
    assert _found(root, PARTS) == [
        "wasmrun/middle/contract.py: imports wasmrun.middle.images.data (layer 'images' is above 'contract')",
        "wasmrun/middle/images/maker.py: imports wasmrun.middle.engine (layer 'engine' is above 'images')",
    ]
    assert _found(root) == []  # the house's order alone does not see inside a package


def test_a_new_member_placed_nowhere_and_an_import_through_the_face_are_found(tmp_path: Path) -> None:
    root = _parts(tmp_path, {"wasmrun/middle/extra.py": "",
                             "wasmrun/middle/images/data.py": "from wasmrun.middle import Engine\n"})
    assert _found(root, PARTS) == [
        "wasmrun.middle.extra: placed in no layer (scripts/check_architecture.py)",
        "wasmrun/middle/images/data.py: imports through wasmrun.middle's face: import from the member",
    ]


def test_the_sandbox_declares_its_own_order() -> None:
    """Every member of wasmrun/sandbox/ has its layer, the images below the engine that runs them."""
    order = [name for name, _ in checker.SUB_LAYERS["wasmrun.sandbox"]]
    assert order.index("engines") < order.index("engine") < order.index("sessions") < order.index("images")
    assert order.index("images") < order.index("memory") < order.index("contract") == len(order) - 1


def test_a_re_export_of_our_own_name_is_found_outside_a_package_face(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "wasmrun/top.py": "from wasmrun.bottom import x as x\nfrom json import loads as loads\n",
        "wasmrun/middle/__init__.py": "from wasmrun.bottom import x as x\n",
    })
    assert _found(root) == [
        "wasmrun/top.py: re-exports x (`X as X`): import them from where they are defined"]


def test_a_module_importing_another_module_private_name_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"wasmrun/top.py": "from wasmrun.bottom import _helper, public\nfrom os import _exit\n",
                            "wasmrun/middle/a.py": "def f():\n    from .b import _x, __version__\n",
                            "wasmrun/middle/b.py": "_x = 1\n__version__ = '1'\n",
                            "wasmrun/bottom.py": "_helper = public = 1\n"})
    assert _found(root) == [
        "wasmrun/middle/a.py:2: imports _x, private to .b",
        "wasmrun/top.py:1: imports _helper, private to wasmrun.bottom"]


def test_the_package_reaching_the_checkout_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"wasmrun/top.py": "import sys\nsys.path.insert(0, 'scripts')\nfrom scripts import bench\n",
                            "wasmrun/middle/a.py": "import sys\nsys.path = []\ndef f():\n    import tests.liveserver\n",
                            "wasmrun/bottom.py": "import sys\nprint(sys.path)\n"})
    assert _found(root) == [
        "wasmrun/middle/a.py:2: changes sys.path (what it imports must be in the package)",
        "wasmrun/middle/a.py:4: imports tests.liveserver, which only a checkout has",
        "wasmrun/top.py:2: changes sys.path (what it imports must be in the package)",
        "wasmrun/top.py:3: imports scripts, which only a checkout has"]


def test_docs_layout_must_name_each_module_and_only_modules_that_exist(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"wasmrun/extra.py": ""},
                 layout=LAYOUT.replace("  top.py\n", "  top.py (gone.py: long gone; old/ too)\n"))
    found = [line for line in _found(root) if line.startswith("docs/")]
    assert found == ["docs/layout.md: names gone.py, which is not in wasmrun/",
                     "docs/layout.md: names old/, which is not in wasmrun/",
                     "docs/layout.md: does not name wasmrun/extra.py"]


def test_the_layer_diagram_must_follow_the_declared_layers(tmp_path: Path) -> None:
    diagram = "# A\n\n## Layers\n\n```\ntop       top.py\n  |\nmiddle/   middle/ (and more.py)\n  |\n" \
              "bottom    bottom.py\n```\n"
    root = _tree(tmp_path, {"docs/architecture.md": diagram})
    assert _found(root) == []
    (root / "docs/architecture.md").write_text(diagram.replace("top       top.py", "top       the top"))
    assert _found(root) == ["docs/architecture.md: the layer diagram does not name top.py (layer 'top')"]
    (root / "docs/architecture.md").write_text(diagram.replace("bottom    bottom.py", "bottom    it").replace(
        "middle/ (and more.py)", "middle/, bottom.py"))
    assert _found(root) == [
        "docs/architecture.md: the layer diagram places bottom.py in layer 'middle', HOUSE_LAYERS in 'bottom'"]
    (root / "docs/architecture.md").write_text(diagram.replace("bottom    bottom.py", ""))
    assert _found(root) == ["docs/architecture.md: the layer diagram has layers ['top', 'middle'], "
                            "HOUSE_LAYERS has ['top', 'middle', 'bottom']"]


def test_a_known_finding_that_no_longer_occurs_fails_the_check(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"wasmrun/middle/a.py": "from wasmrun.middle import b\n",
                            "wasmrun/middle/b.py": "from wasmrun.middle import a\n"})
    cycle = "wasmrun.middle.a <-> wasmrun.middle.b: import cycle between modules"
    assert [str(f) for f in checker.findings(root, LAYERS, {}, known={})] == [cycle]
    assert checker.findings(root, LAYERS, {}, known={cycle: "somebranch"}) == []
    (root / "wasmrun/middle/b.py").write_text("")
    assert [str(f) for f in checker.findings(root, LAYERS, {}, known={cycle: "somebranch"})] == [
        f"KNOWN_UNTIL_MERGE: lists {cycle!r} (branch somebranch), which no longer occurs"]
