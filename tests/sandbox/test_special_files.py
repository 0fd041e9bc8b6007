"""A FIFO (or device) in a mounted skill folder: opening it must not block.

Only an operator's skill folder can hold one (WASI cannot make FIFOs), but a
plain open of a FIFO blocks in host code until a writer appears, out of the
epoch's reach: the run would hang until the pool gave up on the worker. The
path_open guard refuses such opens with EACCES, however the path is reached.
"""

from __future__ import annotations

import json
import os

from tests.sandbox.conftest import make_skill


def _skill_with_fifo(tmp_path):
    skill = make_skill(tmp_path, "piped", {
        "code/main.py": "def main(args):\n    return 'ran'\n",
        "resources/notes.txt": "notes",
    })
    root = tmp_path / "piped"
    os.mkfifo(root / "resources" / "pipe")
    os.mkfifo(root / "code" / "halfway.py")  # a module name the compile run and imports meet
    (root / "resources" / "to-pipe").symlink_to("pipe")
    return skill


def test_opening_a_fifo_in_a_skill_is_refused_not_blocking(run_code, tmp_path):
    skill = _skill_with_fifo(tmp_path)
    code = (
        "import os\n"
        "def attempt(f):\n"
        "    try:\n"
        "        return f()\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        "def main(args):\n"
        "    d = os.open('/skills/piped/resources', os.O_RDONLY | os.O_DIRECTORY)\n"
        "    return {\n"
        "        'plain': attempt(lambda: open('/skills/piped/resources/pipe').read()),\n"
        "        'symlink': attempt(lambda: open('/skills/piped/resources/to-pipe').read()),\n"
        "        'dir_fd': attempt(lambda: os.open('pipe', os.O_RDONLY, dir_fd=d)),\n"
        "        'regular': open('/skills/piped/resources/notes.txt').read(),\n"
        "        'listed': sorted(os.listdir('/skills/piped/resources')),\n"
        "    }\n"
    )
    result = run_code(code, skills=[skill], timeout_ms=5000)
    assert result.status == "completed", result.error
    out = json.loads(result.output_json)
    assert out["plain"] == out["symlink"] == out["dir_fd"] == "PermissionError"
    assert out["regular"] == "notes"
    assert out["listed"] == ["notes.txt", "pipe", "to-pipe"]


def test_a_reused_fd_number_does_not_skip_the_check(run_code, tmp_path):
    """Closing a preopen that needs no check (the stdlib's, fd 3) and opening a skill's
    folder, which gets that number back, must not let a FIFO under it be opened."""
    skill = _skill_with_fifo(tmp_path)
    code = (
        "import os\n"
        "def main(args):\n"
        "    os.close(3)\n"
        "    d = os.open('/skills/piped/resources', os.O_RDONLY | os.O_DIRECTORY)\n"
        "    try:\n"
        "        os.open('pipe', os.O_RDONLY, dir_fd=d)\n"
        "        return [d, 'opened']\n"
        "    except OSError as exc:\n"
        "        return [d, type(exc).__name__]\n"
    )
    result = run_code(code, skills=[skill], timeout_ms=5000)
    assert result.status == "completed", result.error
    assert json.loads(result.output_json) == [3, "PermissionError"]


def test_creating_files_under_a_skill_is_still_refused_as_before(run_code, tmp_path):
    skill = _skill_with_fifo(tmp_path)
    code = (
        "def main(args):\n"
        "    try:\n"
        "        open('/skills/piped/resources/new.txt', 'w')\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
    )
    result = run_code(code, skills=[skill])
    assert result.status == "completed", result.error
    assert json.loads(result.output_json) in ("PermissionError", "OSError")


def test_a_skill_holding_a_fifo_still_runs(engine, tmp_path):
    from wasmrun.sandbox.contract.types import RunRequest

    skill = _skill_with_fifo(tmp_path)
    for _ in range(2):  # the second run meets the compiled bytecode and image, if any
        result = engine.run(RunRequest(kind="skill", skill="piped", skills=[skill]))
        assert result.status == "completed", result.error
        assert result.output_json == b'"ran"'


def test_workspace_files_open_as_before(run_code):
    code = (
        "def main(args):\n"
        "    open('/workspace/a.txt', 'w').write('x' * 10)\n"
        "    open('/tmp/b.txt', 'w').write('y')\n"
        "    return open('/workspace/a.txt').read() + open('/tmp/b.txt').read()\n"
    )
    result = run_code(code)
    assert result.status == "completed", result.error
    assert result.output_json == b'"xxxxxxxxxxy"'
