"""The data image behaves like the stdlib image where agents' code meets it: values of
the data stack come back as JSON, SQLite files on the read-only mounts open, deep code
raises a catchable RecursionError (or MemoryError) rather than trapping. Real runs on
the data image's engine (tests/dataimage/test_dataimage.py's fixtures)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.dataimage.test_dataimage import run, runner, store  # noqa: F401  (fixtures)
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import DataSandboxEngine, Limits, RunRequest

pytestmark = pytest.mark.images("data")  # the data image only (tests/images.py)


def test_numpy_and_pandas_values_come_back_as_json(runner: DataSandboxEngine) -> None:  # noqa: F811
    code = (
        "import numpy as np, pandas as pd\n"
        "def main(args):\n"
        "    df = pd.DataFrame({'city': ['a', 'b'], 'n': [1, 2]})\n"
        "    return {'sum': np.arange(10).sum(), 'any': np.array([1, 2]) > 1, 'ok': np.bool_(True),\n"
        "            'mean': df['n'].mean(), 'col': df['n'], 'rows': df, 'idx': df.columns,\n"
        "            'grid': np.eye(2, dtype=np.int32)}\n"
    )
    assert run(runner, code)[:2] == ("C", {
        "sum": 45, "any": [False, True], "ok": True, "mean": 1.5, "col": [1, 2],
        "rows": {"columns": ["city", "n"], "index": [0, 1], "data": [["a", 1], ["b", 2]]},
        "idx": ["city", "n"], "grid": [[1, 0], [0, 1]],
    })


def test_nan_and_timestamps_have_a_json_form_now(runner: DataSandboxEngine) -> None:  # noqa: F811
    # NaN is null with a warning (b"W" before b"C"); a Timestamp is ISO text (docs/run-contract.md).
    kind, output, _ = run(runner, "import numpy as np\ndef main(args):\n    return np.array([1.0, np.nan])\n")
    assert (kind, output) == ("C", [1.0, None])
    kind, output, _ = run(runner, "import pandas as pd\ndef main(args):\n    return pd.Timestamp('2024-01-01')\n")
    assert (kind, output) == ("C", "2024-01-01T00:00:00")


@pytest.fixture()
def sqlite_blob(store: FileBlobStore, tmp_path: Path) -> str:  # noqa: F811
    db = tmp_path / "k.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (v)")
        con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    con.close()
    return store.create(db.read_bytes(), "application/vnd.sqlite3")


def test_sqlite_opens_a_database_on_the_read_only_blobs_mount(runner: DataSandboxEngine, sqlite_blob: str) -> None:  # noqa: F811
    code = (
        "import os, sqlite3, pathlib\n"
        "def main(args):\n"
        "    db = '/blobs/' + args['id']\n"
        "    plain = sqlite3.connect(db).execute('SELECT SUM(v) FROM t').fetchone()[0]\n"
        "    as_path = sqlite3.connect(pathlib.Path(db)).execute('SELECT COUNT(*) FROM t').fetchone()[0]\n"
        "    uri = sqlite3.connect('file:' + db + '?mode=ro', uri=True).execute('SELECT MAX(v) FROM t').fetchone()[0]\n"
        "    os.chdir('/blobs')\n"
        "    relative = sqlite3.connect(args['id']).execute('SELECT MIN(v) FROM t').fetchone()[0]\n"
        "    try:\n"
        "        sqlite3.connect(db).execute('INSERT INTO t VALUES (99)')\n"
        "        wrote = 'wrote'\n"
        "    except sqlite3.OperationalError as exc:\n"
        "        wrote = str(exc)\n"
        "    os.chdir('/workspace')\n"
        "    con = sqlite3.connect('/workspace/w.db')\n"
        "    con.execute('CREATE TABLE w (v)')\n"
        "    con.execute('INSERT INTO w VALUES (1)')\n"
        "    con.commit()\n"
        "    return [plain, as_path, uri, relative, wrote, con.execute('SELECT v FROM w').fetchall()]\n"
    )
    result = runner.run(RunRequest(
        kind="code", code=code, input_blobs=[sqlite_blob], args_json=json.dumps({"id": sqlite_blob}).encode(),
        limits=Limits(),
    ))
    assert result.error is None, result.error
    assert json.loads(result.output_json) == [45, 10, 9, 0, "attempt to write a readonly database", [[1]]]


@pytest.mark.parametrize("code, raised", [
    ("def f(n):\n    return f(n + 1)\nf(0)\n", "RecursionError"),
    ("import json\njson.loads('[' * 100000 + ']' * 100000)\n", "RecursionError"),
    ("exec('x = ' + '-' * 100000 + '1')\n", "MemoryError"),
    # native CPython's "too many nested parentheses" (the parser's bound is native: parser_stack.py)
    ("eval('(' * 5000 + ')' * 5000)\n", "SyntaxError"),
])
def test_deep_code_raises_a_catchable_error(runner: DataSandboxEngine, code: str, raised: str) -> None:  # noqa: F811
    """(C recursion over a deeply nested object, as repr or pickle of a list 100,000 deep,
    can still exhaust the wasm stack first: a clean StackOverflow failure; docs/data-stack.md.)"""
    wrapped = (
        "def main(args):\n    try:\n        exec(" + repr(code) + ", {})\n"
        "    except BaseException as exc:\n        return type(exc).__name__\n"
    )
    assert run(runner, wrapped)[:2] == ("C", raised)
