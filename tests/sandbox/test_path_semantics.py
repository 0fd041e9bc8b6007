"""Paths answer as on Linux: trailing and repeated slashes, `.` and `..`,
relative paths after chdir, symbolic links, for every path operation a run
makes (pathtable.py), while every refusal that protects the host stays.

The table runs natively (this interpreter, in a temporary folder) and in the
sandbox (in /workspace) and the answers and resulting trees must be equal.
It runs on both images (tests/images.py).
"""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path

import pytest

from tests.images import on_data
from tests.sandbox.conftest import make_skill
from wasmrun.sandbox.contract.limits import Limits
from wasmrun.sandbox.contract.types import RunRequest

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

TABLE = Path(__file__).with_name("pathtable.py")

# Where the sandbox's answer differs from Linux's on purpose, and why.
KNOWN_DIFFERENCES = {
    # Both refuse; CPython picks rmtree's path-based branch on WASI (os.scandir takes
    # no descriptor there), which refuses a symbolic link by name before opening it;
    # on Linux the descriptor-based branch opens the dangling link and reports ENOENT.
    "rmtree lx": "CPython's path-based rmtree on WASI: 'Cannot call rmtree on a symbolic link'",
}
# The data image is CPython 3.15 and the native side this interpreter (3.11): since 3.13
# rmtree ignores FileNotFoundError for entries gone while it walks, so removing `d/sub/..`
# (whose `sub` it removes first, as on Linux) ends without the ENOENT 3.11 raises.
NEWER_CPYTHON = {
    "rmtree d/sub/..": "CPython 3.13+ rmtree ignores FileNotFoundError while it walks",
    "rmtree d/sub/../": "CPython 3.13+ rmtree ignores FileNotFoundError while it walks",
}


def test_path_operations_answer_as_on_linux(engine, tmp_path) -> None:
    native = runpy.run_path(str(TABLE))["main"]({"base": str(tmp_path / "native")})
    os.chdir(tmp_path)  # the table chdirs; leave the test process somewhere harmless
    result = engine.run(RunRequest(
        kind="code", code=TABLE.read_text(), args_json=json.dumps({"base": "/workspace/table"}).encode(),
        limits=Limits(timeout_ms=120_000, cpu_ms=120_000, memory_bytes=1 << 29, output_bytes=1 << 24),
    ))
    assert result.status == "completed", (result.error, result.logs[-3000:])
    sandbox = result.output
    assert len(native) == len(sandbox) > 900
    known = KNOWN_DIFFERENCES | (NEWER_CPYTHON if on_data() else {})
    differ = {case: (native[case], sandbox[case]) for case in native if native[case] != sandbox[case]}
    unexplained = {case: answers for case, answers in differ.items() if case not in known}
    assert not unexplained, "\n".join(f"{case}: native {n[0]} sandbox {s[0]}" for case, (n, s) in unexplained.items())
    assert set(differ) == set(known), "a listed difference is gone: take it off the list"


CLEANUP = """
import os, shutil, unittest, io, csv

class T(unittest.TestCase):
    def setUp(self):
        os.makedirs("./test_data_files/", exist_ok=True)
        with open("./test_data_files/data.csv", "w", newline="") as f:
            csv.writer(f).writerows([["a", "b"], [1, 2]])
        os.makedirs("./t/", exist_ok=True)

    def tearDown(self):
        shutil.rmtree("./test_data_files/")
        os.rmdir("./t/")

    def test_reads(self):
        with open("./test_data_files//data.csv") as f:
            self.assertEqual(list(csv.reader(f))[1], ["1", "2"])

def main(args):
    os.makedirs("d1"); os.rmdir("d1/")
    os.makedirs("d3/sub"); shutil.rmtree("d3/")
    result = unittest.TextTestRunner(stream=io.StringIO()).run(unittest.defaultTestLoader.loadTestsFromTestCase(T))
    return {"ok": result.wasSuccessful(), "left": sorted(os.listdir("."))}
"""


def test_a_test_suite_cleaning_up_its_folders_passes(run_code) -> None:
    result = run_code(CLEANUP)
    assert result.status == "completed", result.error
    assert result.output == {"ok": True, "left": []}


REFUSALS = """
import errno, os

def attempt(call, *paths):
    try:
        call(*paths)
        return "done"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, exc.errno)

def main(args):
    os.makedirs("/workspace/mine/", exist_ok=True)
    out = {}
    for slash in ("", "/", "//"):
        out[slash] = [
            attempt(os.rmdir, "/skills/ro/sub" + slash),
            attempt(os.unlink, "/skills/ro/file.txt" + slash),
            attempt(os.rename, "/skills/ro/sub" + slash, "/workspace/moved" + slash),
            attempt(os.rename, "/workspace/mine" + slash, "/skills/ro/mine" + slash),
            attempt(os.symlink, "/workspace", "/skills/ro/sub" + slash),
            attempt(os.link, "/workspace/x", "/skills/ro/file.txt" + slash),
            attempt(os.rmdir, "/workspace/../skills/ro/sub" + slash),
            attempt(os.rmdir, "/workspace/mine/../../skills/ro/sub" + slash),
            attempt(os.rmdir, "/lib" + slash),
        ]
    out["long"] = attempt(os.rmdir, "/workspace/" + "a" * 5000 + "/")
    out["deep"] = attempt(os.rmdir, "/workspace/" + "x/" * 2000)  # under PATH_MAX: looked up
    out["deeper"] = attempt(os.rmdir, "/workspace/" + "x/" * 3000)
    return out
"""


def test_read_only_folders_and_escapes_stay_refused_with_slashes(run_code, tmp_path) -> None:
    skill = make_skill(tmp_path, "ro", {"file.txt": "keep", "sub/inner.txt": "keep", "code/main.py": ""})
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    result = run_code(REFUSALS, skills=[skill])
    assert result.status == "completed", result.error
    out = result.output
    for slash in ("", "/", "//"):
        assert "done" not in out[slash], (slash, out[slash])
    assert out["long"] in ("ENAMETOOLONG", "ENOENT")
    assert out["deep"] == "ENOENT"
    assert out["deeper"] == "ENAMETOOLONG"  # as Linux: past PATH_MAX
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "ro" / "file.txt").read_text() == "keep"


PANDAS_TASK = """
import os, shutil, unittest, io
import pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

def task(folder):
    os.makedirs(folder, exist_ok=True)
    frame = pd.DataFrame({"x": [1, 2, 3], "y": [2, 4, 6]})
    frame.to_csv(os.path.join(folder, "data.csv"), index=False)
    frame.plot(x="x", y="y")
    plt.savefig(os.path.join(folder, "plot.png"))
    return pd.read_csv(os.path.join(folder, "data.csv"))["y"].sum()

class TestTask(unittest.TestCase):
    def setUp(self):
        self.folder = "./test_data_files/"

    def tearDown(self):
        if os.path.exists(self.folder):
            shutil.rmtree(self.folder)

    def test_sum(self):
        self.assertEqual(task(self.folder), 12)
        self.assertTrue(os.path.isfile("./test_data_files/plot.png"))

def main(args):
    result = unittest.TextTestRunner(stream=io.StringIO()).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(TestTask))
    return {"ok": result.wasSuccessful(), "problems": [t for _, t in result.errors + result.failures],
            "left": sorted(os.listdir("."))}
"""


@pytest.mark.images("data")  # pandas and matplotlib are the data image's
def test_a_data_task_whose_teardown_removes_its_folder_passes(run_code) -> None:
    result = run_code(PANDAS_TASK)
    assert result.status == "completed", result.error
    assert result.output == {"ok": True, "problems": [], "left": []}


HOME_TWICE = r"""
import os
def attempt(call):
    try:
        call()
        return "done"
    except OSError as exc:
        return type(exc).__name__

def main(args):
    open('/home/user/a.txt', 'w').write('written at home')
    open('/workspace/b.txt', 'w').write('written in the workspace')
    os.rename('/home/user/a.txt', '/workspace/moved.txt')
    os.link('/workspace/moved.txt', '/home/user/hard.txt')
    os.symlink('b.txt', '/home/user/rel')
    os.symlink('../../etc/passwd', '/home/user/out')
    os.symlink('..', '/home/user/up')
    return {
        "plain run": [os.environ['HOME'], os.getcwd()],
        "reads": [open('/workspace/moved.txt').read(), open('/home/user/b.txt').read(), open('/workspace/rel').read()],
        "same folder": [os.path.samefile('/home/user', '/workspace'),
                        sorted(os.listdir('/home/user')) == sorted(os.listdir('/workspace'))],
        "links": os.stat('/home/user/hard.txt').st_nlink,
        "root": ['home' in os.listdir('/'), os.listdir('/home')],
        "refused": [
            attempt(lambda: os.symlink('/workspace/b.txt', '/home/user/abs')),
            attempt(lambda: open('/home/user/out')),  # made (dangling, as Linux allows), never followed out
            attempt(lambda: os.listdir('/home/user/up')),
            attempt(lambda: open('/home/user/../../etc/passwd')),
            attempt(lambda: os.rmdir('/home/user')),
            attempt(lambda: os.rename('/home/user', '/workspace/x')),
            attempt(lambda: os.mkdir('/home/other')),
        ],
    }
"""


def test_home_user_is_the_workspace_folder_mounted_again(run_code) -> None:
    """/home/user (E2B's home, abi.USER_HOME) is /workspace's own folder, writable, in
    every run: the same files through either path, renames and hard links across them,
    and the escapes refused as under /workspace. A plain run still lives in /workspace."""
    result = run_code(HOME_TWICE)
    assert result.status == "completed", result.error
    assert result.output == {
        "plain run": ["/workspace", "/workspace"],
        "reads": ["written at home", "written in the workspace", "written in the workspace"],
        "same folder": [True, True],
        "links": 2,
        "root": [True, ["user"]],
        "refused": ["PermissionError"] * 4 + ["OSError"] * 2 + ["PermissionError"],
    }
