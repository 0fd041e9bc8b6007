"""The guest sees /lib (read-only), its skills (read-only) and /workspace; nothing else."""

from __future__ import annotations

import pytest

from tests.sandbox.conftest import make_skill


@pytest.mark.parametrize(
    "snippet",
    [
        pytest.param("open('/etc/passwd').read()", id="absolute-host-path"),
        pytest.param("open('/workspace/../etc/passwd').read()", id="dotdot-from-workspace"),
        pytest.param("import os; os.listdir('/workspace/..')", id="list-parent"),
        pytest.param("open('../../../../etc/passwd').read()", id="relative-dotdot"),
        pytest.param("open('/lib/../etc/passwd').read()", id="dotdot-from-lib"),
        pytest.param("open('/lib/wasmrun-guest.zip', 'r+b')", id="write-stdlib"),
        pytest.param("open('/lib/new', 'w')", id="create-in-lib"),
    ],
)
def test_escapes_fail(run_code, snippet):
    result = run_code(f"def main(args):\n    {snippet}\n    return 'escaped'")
    assert result.status == "failed"
    assert result.error.type in ("PermissionError", "FileNotFoundError", "OSError")


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("/etc/passwd", id="absolute"),
        pytest.param("../../../../../../etc/passwd", id="relative-up"),
        pytest.param("/proc/self/environ", id="proc"),
    ],
)
def test_symlinks_out_of_workspace_fail(run_code, target):
    code = (
        "import os\n"
        "def main(args):\n"
        f"    try:\n        os.symlink({target!r}, '/workspace/link')\n"
        "    except OSError:\n        return 'refused at creation'\n"
        "    return open('/workspace/link').read()\n"
    )
    result = run_code(code)
    assert result.output == "refused at creation" or result.status == "failed"
    assert "root:" not in (result.output or "")


def test_symlink_within_workspace_works(run_code):
    code = (
        "import os\n"
        "def main(args):\n"
        "    open('/workspace/a.txt', 'w').write('inside')\n"
        "    os.symlink('a.txt', '/workspace/b.txt')\n"
        "    return open('/workspace/b.txt').read()\n"
    )
    assert run_code(code).output == "inside"


def test_workspace_is_the_working_directory(run_code):
    # (temporary files go to the run's own /tmp)
    code = (
        "import os, tempfile\n"
        "def main(args):\n"
        "    open('rel.txt', 'w').write('x')\n"
        "    with tempfile.NamedTemporaryFile() as f:\n"
        "        tmp = f.name\n"
        "    return [os.getcwd(), os.path.exists('/workspace/rel.txt'), tmp.startswith('/tmp/')]\n"
    )
    assert run_code(code).output == ["/workspace", True, True]


def test_environment_is_only_home_unless_granted(run_code):
    code = "import os\ndef main(args):\n    return dict(os.environ)"
    assert run_code(code).output == {"HOME": "/workspace"}
    granted = "import os\ndef main(args):\n    return [sorted(os.environ), os.environ['API_KEY'] == 's3cret']"
    assert run_code(granted, env={"API_KEY": "s3cret"}).output == [["API_KEY", "HOME"], True]
    # the value itself never comes back out: it is replaced by its placeholder
    assert run_code(code, env={"API_KEY": "s3cret"}).output == {"API_KEY": "wasmrun-secret:API_KEY", "HOME": "/workspace"}


def test_home_is_the_workspace(run_code):
    """Path.home() and expanduser work as natively (WASI has no passwd database)."""
    code = ("import os, pathlib\ndef main(args):\n    open(os.path.expanduser('~/notes.txt'), 'w').write('x')\n"
            "    return [str(pathlib.Path.home()), os.path.expanduser('~/data.csv'), sorted(os.listdir('/workspace'))]")
    assert run_code(code).output == ["/workspace", "/workspace/data.csv", ["notes.txt"]]


def test_no_network(run_code):
    code = (
        "import socket\n"
        "def main(args):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', 80), timeout=1)\n"
        "    except Exception as exc:  # WASI has no sockets: OSError or a missing function\n"
        "        return 'no network: ' + type(exc).__name__\n"
    )
    assert run_code(code).output.startswith("no network")


@pytest.mark.parametrize(
    "snippet",
    [
        pytest.param("import subprocess; subprocess.run(['ls'])", id="subprocess"),
        pytest.param("import os; os.system('ls')", id="os-system"),
        pytest.param("import ctypes", id="ctypes"),
        pytest.param("import threading; threading.Thread(target=print).start()", id="threads"),
    ],
)
def test_no_processes_threads_or_ffi(run_code, snippet):
    result = run_code(f"def main(args):\n    {snippet}\n    return 'ran'")
    assert result.status == "failed"


@pytest.mark.parametrize(
    "snippet",
    [
        pytest.param("os.link(SRC, '/workspace/hard')\n    open('/workspace/hard', 'w').write('x')", id="hard-link"),
        pytest.param("os.rename(SRC, '/workspace/moved')", id="rename-out"),
        pytest.param("os.unlink(SRC)", id="delete"),
        pytest.param("open(SRC, 'a').write('x')", id="append"),
        pytest.param("os.chmod(SRC, 0o777)", id="chmod"),
    ],
)
def test_mounted_skill_cannot_be_changed_through_the_workspace(run_code, tmp_path, snippet):
    skill = make_skill(tmp_path, "victim", {"code/main.py": "def main(args): return 'original'\n"})
    host_file = tmp_path / "victim" / "code" / "main.py"
    mode = host_file.stat().st_mode
    code = f"import os\nSRC = '/skills/victim/code/main.py'\ndef main(args):\n    {snippet}\n"
    run_code(code, skills=[skill])  # refused, or (chmod: WASI has none) a no-op
    assert host_file.read_text() == "def main(args): return 'original'\n"
    assert host_file.stat().st_mode == mode
