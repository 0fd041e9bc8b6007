"""Mounted skills' bytecode is compiled once, in a compile run, and mounted read-only."""

from __future__ import annotations

import os

import pytest

from tests.sandbox.conftest import make_skill
from wasmrun import dirtree
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.files.skillstamp import MAX_SKILL_DEPTH, stamp_skill

PYC = "/pycache/skills/{name}/code/{module}.cpython-311.pyc"


@pytest.fixture()
def skill(tmp_path):
    return make_skill(tmp_path, "cached.skill", {
        "code/main.py": "from . import helper\ndef main(args):\n    return helper.VALUE\n",
        "code/helper.py": "VALUE = 'v1'\n",
    })


def test_skill_modules_are_loaded_from_compiled_bytecode(run_code, skill):
    code = (
        "import os, sys\n"
        "from skills.cached.skill import main as skill_main\n"
        "def main(args):\n"
        f"    return [skill_main({{}}), os.path.exists({PYC.format(name='cached.skill', module='main')!r}),\n"
        f"            os.path.exists({PYC.format(name='cached.skill', module='helper')!r})]\n"
    )
    assert run_code(code, skills=[skill]).output == ["v1", True, True]


def test_runs_cannot_write_the_bytecode_cache(run_code, skill):
    target = PYC.format(name="cached.skill", module="main")
    code = (
        "def main(args):\n"
        "    out = []\n"
        f"    for path, mode in (({target!r}, 'r+b'), ({target!r}.replace('main.', 'evil.'), 'wb')):\n"
        "        try:\n"
        "            open(path, mode).write(b'poison')\n"
        "            out.append('wrote')\n"
        "        except OSError as exc:\n"
        "            out.append(type(exc).__name__)\n"
        "    return out\n"
    )
    run_code("from skills.cached.skill import main as m\ndef main(args): return m({})", skills=[skill])
    assert "wrote" not in run_code(code, skills=[skill]).output


def test_changed_source_is_recompiled(run_code, skill, tmp_path):
    use = "from skills.cached.skill import main as m\ndef main(args): return m({})"
    assert run_code(use, skills=[skill]).output == "v1"
    (tmp_path / "cached.skill" / "code" / "helper.py").write_text("VALUE = 'version two'\n")
    assert run_code(use, skills=[skill]).output == "version two"


def _unpacked_like_a_created_skill(folder):
    """Every file's mtime 0, as a created skill's bundle is unpacked (registry/bundle.py)."""
    for path in folder.rglob("*"):
        os.utime(path, ns=(0, 0))


def test_same_name_and_sizes_with_mtime_zero_never_share_bytecode(run_code, tmp_path):
    """Two versions (or two tenants' skills) of one name whose files have equal sizes and
    mtime 0 each run their own code, not the bytecode compiled for the other."""
    use = "from skills.user.team.echo import main as m\ndef main(args): return m({})"
    first = make_skill(tmp_path / "a", "user.team.echo", {"code/main.py": "def main(args):\n    return 'AAAA'\n"})
    second = make_skill(tmp_path / "b", "user.team.echo", {"code/main.py": "def main(args):\n    return 'BBBB'\n"})
    for skill in (first, second):
        _unpacked_like_a_created_skill(tmp_path / skill.root)
    assert run_code(use, skills=[first]).output == "AAAA"
    assert run_code(use, skills=[second]).output == "BBBB"
    assert run_code(use, skills=[first]).output == "AAAA"
    # and in one folder: same size, mtime put back to 0, new content
    (tmp_path / first.root / "code" / "main.py").write_text("def main(args):\n    return 'CCCC'\n")
    _unpacked_like_a_created_skill(tmp_path / first.root)
    assert run_code(use, skills=[first]).output == "CCCC"


def test_a_syntax_error_still_surfaces_at_import(run_code, tmp_path):
    broken = make_skill(tmp_path, "broken.skill", {"code/main.py": "def main(args) return 1\n"})
    result = run_code("from skills.broken.skill import main\ndef main(args): return 1", skills=[broken])
    assert result.error.type == "SyntaxError"
    assert "/skills/broken.skill/code/main.py" in result.error.message


def _compiled_paths(engine, skill) -> set[str]:
    _key, folder = engine.loop.bytecode.lookup(skill, stamp_skill(skill))
    assert folder is not None, "no compiled folder was published for the skill"
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*.pyc")}


def test_a_skill_with_its_entrypoint_at_its_root_is_compiled(engine, run_code, tmp_path, caplog):
    skill = make_skill(tmp_path, "flat.skill", {
        "main.py": "import helper\ndef main(args):\n    return helper.VALUE\n",
        "helper.py": "VALUE = 'flat'\n",
    }, entrypoint="main.py")
    caplog.set_level("WARNING", logger="wasmrun.sandbox")
    for _ in range(2):
        result = engine.run(RunRequest(kind="skill", skill="flat.skill", skills=[skill]))
        assert result.output == "flat"
    assert _compiled_paths(engine, skill) == {"main.cpython-311.pyc", "helper.cpython-311.pyc"}
    assert not [r for r in caplog.records if "compiling skill" in r.getMessage()]


def test_a_dangling_symlink_in_a_skill_does_not_break_it(engine, tmp_path, caplog):
    skill = make_skill(tmp_path, "linked.skill", {"code/main.py": "def main(args):\n    return 'ok'\n"})
    os.symlink(tmp_path / "gone.py", tmp_path / "linked.skill" / "code" / "broken.py")
    caplog.set_level("WARNING", logger="wasmrun.sandbox")
    result = engine.run(RunRequest(kind="skill", skill="linked.skill", skills=[skill]))
    assert result.output == "ok"
    assert _compiled_paths(engine, skill) == {"code/main.cpython-311.pyc"}
    assert not [r for r in caplog.records if "compiling skill" in r.getMessage()]



def test_a_skill_as_deep_as_a_skill_may_be_is_compiled(engine, deep_root, caplog):
    """A file MAX_SKILL_DEPTH levels deep (the deepest a created skill's path may be) is
    compiled; one level deeper the skill is refused (tests/sandbox/test_skill_stamps.py)."""
    levels = MAX_SKILL_DEPTH - 2  # code/<levels folders>/leaf.py
    deep = "/".join(["d"] * levels)
    skill = make_skill(deep_root, "deep.skill", {"code/main.py": "def main(args):\n    return 'deep'\n"})
    folder = os.path.join(skill.root, "code")
    for _ in range(levels):
        folder = os.path.join(folder, "d")
        os.mkdir(folder)
    with open(os.path.join(folder, "leaf.py"), "w") as f:
        f.write("VALUE = 1\n")
    caplog.set_level("WARNING", logger="wasmrun.sandbox")
    result = engine.run(RunRequest(kind="skill", skill="deep.skill", skills=[skill]))
    assert result.output == "deep"
    _key, folder = engine.loop.bytecode.lookup(skill, stamp_skill(skill))
    assert folder is not None
    try:
        assert (folder / f"code/{deep}/leaf.cpython-311.pyc").is_file()
    finally:
        dirtree.remove(folder)  # not left in the shared cache
    assert not [r for r in caplog.records if "compiling skill" in r.getMessage()]


def test_a_fifo_named_like_a_module_is_skipped_not_opened(engine, tmp_path, caplog):
    skill = make_skill(tmp_path, "fifo.skill", {"code/main.py": "def main(args):\n    return 'ok'\n"})
    os.mkfifo(os.path.join(skill.root, "code", "pipe.py"))  # opening it would block the worker
    caplog.set_level("WARNING", logger="wasmrun.sandbox")
    result = engine.run(RunRequest(kind="skill", skill="fifo.skill", skills=[skill]))
    assert result.output == "ok"
    assert _compiled_paths(engine, skill) == {"code/main.cpython-311.pyc"}
    assert not [r for r in caplog.records if "compiling skill" in r.getMessage()]
