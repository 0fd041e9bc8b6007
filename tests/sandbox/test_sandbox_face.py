"""The sandbox's one door (wasmrun/sandbox/__init__.py): what outside code needs is there, loads
on first use without wasmtime, and the architecture check fails code that reaches past it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import wasmrun.sandbox as sandbox
from tests.archcheck import checker
from tests.liveserver import REPO

ROOT = REPO


def test_importing_a_type_from_the_face_loads_no_wasmtime() -> None:
    probe = (
        "import sys\n"
        "from wasmrun.sandbox import RunRequest, RunResult, Limits, errors\n"
        "RunRequest(kind='code', code='def main(args): return 1')\n"
        "assert errors.TIMEOUT\n"
        "print(sorted(m for m in sys.modules if m == 'wasmtime' or m.startswith('wasmtime.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_name_the_face_lists_is_there() -> None:
    missing = [name for name in sandbox.__all__ if getattr(sandbox, name, None) is None]
    assert missing == []
    assert sandbox.RunRequest.__module__.startswith(sandbox.__name__ + ".")  # defined inside, found here


def test_a_name_the_face_does_not_list_is_an_attribute_error() -> None:
    try:
        sandbox.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("an unknown name was found")


def test_the_checker_finds_imports_past_the_face() -> None:
    source = (
        "from wasmrun.sandbox import RunRequest\n"  # the face: fine
        "from wasmrun import sandbox\n"  # the face: fine
        "from wasmrun.sandbox.engine import SandboxEngine\n"  # past it
        "import wasmrun.sandbox.pool.warmup\n"  # past it
        "from wasmrun.sandbox import engine\n"  # a part, by name from the face
        "CMD = ['python', '-m', 'wasmrun.sandbox.pool']\n"  # a part's module name in a string
        "TEXT = 'run `python -m wasmrun.sandbox.images` to make it'\n"  # prose: fine
    )
    found = [str(finding) for finding in checker.face_findings(ast.parse(source), "m.py")]
    assert [line.split(": ")[0] for line in found] == ["m.py:3", "m.py:4", "m.py:5", "m.py:6"], found


def test_the_docs_name_the_sandbox_as_it_is() -> None:
    """docs/architecture.md's paths into the sandbox exist, and docs/layout.md names every
    module of it: a move or a new module shows here until the docs follow."""
    architecture = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\bsandbox/[\w/]+\.py\b", architecture))
    assert named and [path for path in sorted(named) if not (ROOT / "wasmrun" / path).is_file()] == []
    layout = (ROOT / "docs/layout.md").read_text(encoding="utf-8")
    modules = [p for p in (ROOT / "wasmrun/sandbox").rglob("*.py") if p.stem not in ("__init__", "__main__")]
    assert [p.name for p in modules if p.name not in layout] == []
    parts = [p.parent.name + "/" for p in (ROOT / "wasmrun/sandbox").glob("*/__init__.py")]
    assert [part for part in parts if part not in layout] == []


def test_the_face_and_the_docs_list_the_sandbox_in_its_checked_order() -> None:
    """The order the face's docstring (bottom up) and docs/architecture.md's sandbox diagram (top
    down) give is the one SUB_LAYERS checks: a member moved in the code shows here until both follow."""
    order = [name for name, _ in checker.SUB_LAYERS[sandbox.__name__]]
    face = [re.split(r"[/.,:]", line[2:])[0] for line in (sandbox.__doc__ or "").splitlines() if line.startswith("- ")]
    assert face[::-1] == order
    architecture = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    block = architecture.partition("one concept per member")[2].partition("\n```\n")[2].partition("\n```")[0]
    diagram = [re.split(r"[/.\s]", line)[0] for line in block.splitlines() if line[:1].strip()]
    assert diagram == order
