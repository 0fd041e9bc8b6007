"""Held-out parity checks: what agents send first, on each image
(`make test` runs it on both), against native CPython where the answer should be the same.

Each check is what a user would notice: the same values as native Python (stdlib modules,
files in /workspace and /tmp, archives, hashes, asyncio, sqlite3), tracebacks that show the
user's lines and no host paths, the first-try mistakes (a shell line, pip, a subprocess)
answered with what to do, and the differences docs/images.md states held as stated. Native
is this test process's interpreter (CPython 3.11, the stdlib image's version), run as a
child with /workspace mapped to a temporary folder; several checks share one run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.images import current, on_data
from tests.liveserver import REPO

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

Rpc = Callable[..., dict[str, Any]]

# How native CPython runs a `main(args)` or a script, for the comparison: the same module
# name and file name as the sandbox's (`run_code`, `<run_code>`), the traceback from the
# user's first frame.
NATIVE_DRIVER = r'''
import ast, json, linecache, sys, traceback, types
src, out = open(sys.argv[1]).read(), sys.argv[2]
mod = types.ModuleType("run_code"); mod.__file__ = "<run_code>"; sys.modules["run_code"] = mod
linecache.cache["<run_code>"] = (len(src), None, src.splitlines(True), "<run_code>")
try:
    tree = ast.parse(src, "<run_code>")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<run_code>", "exec"), mod.__dict__)
    if hasattr(mod, "main"):
        value = mod.main({})
    else:
        value = eval(compile(ast.Expression(last.value), "<run_code>", "eval"), mod.__dict__) if last else None
    result = {"status": "completed", "output": value}
except BaseException as exc:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<run_code>":
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()
    result = {"status": "failed", "error": {"type": type(exc).__name__, "message": text}}
open(out, "w").write(json.dumps(result))
'''


def native(code: str, tmp_path: Path) -> dict[str, Any]:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    (tmp_path / "code.py").write_text(code.replace("/tmp/", f"{tmp_path}/tmp/").replace("/workspace", str(workspace)))
    (tmp_path / "driver.py").write_text(NATIVE_DRIVER)
    subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "driver.py"), str(tmp_path / "code.py"),
                    str(tmp_path / "out.json")], cwd=workspace, stdin=subprocess.DEVNULL, capture_output=True,
                   timeout=60, check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TZ": "UTC"})
    answer: dict[str, Any] = json.loads((tmp_path / "out.json").read_text().replace(str(workspace), "/workspace"))
    return answer


def run(rpc: Rpc, code: str, **params: Any) -> dict[str, Any]:
    answer = rpc("run_code", {"language": "python", "code": code, **params})
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def completed(result: dict[str, Any]) -> Any:
    assert result["status"] == "completed", result.get("error")
    return result["output"]


# -- 1. the standard library gives native answers ----------------------------------

CHECK = '''
def t(f):
    try:
        return f()
    except BaseException as e:
        return f"{type(e).__name__}: {e}"
'''

STDLIB_BATCH = CHECK + r'''
import base64, bz2, csv, datetime, decimal, fractions, glob, gzip, hashlib, hmac, io, json, lzma, math
import os, pathlib, random, re, shutil, sqlite3, statistics, tarfile, tempfile, uuid, zipfile, zlib, zoneinfo
def main(args):
    o = {}
    o["json"] = t(lambda: json.loads(json.dumps({"a": [1, 2.5, None, "é"]}, ensure_ascii=False)))
    o["re"] = t(lambda: re.findall(r"(?P<y>\d{4})-(\d\d)", "2024-01 and 2025-12"))
    o["paris"] = t(lambda: datetime.datetime(2024, 3, 31, 3, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")).isoformat())
    o["new_york"] = t(lambda: str(datetime.datetime(2024, 11, 3, 12, tzinfo=zoneinfo.ZoneInfo("America/New_York")).utcoffset()))
    o["strptime"] = t(lambda: datetime.datetime.strptime("02/01/2024 13:00", "%d/%m/%Y %H:%M").isoformat())
    o["strftime"] = t(lambda: datetime.date(2024, 1, 2).strftime("%A %d %B %Y %j"))
    o["decimal"] = t(lambda: str(decimal.Decimal("1.10") + decimal.Decimal("2.205")))
    o["fraction"] = t(lambda: str(fractions.Fraction(3, 4) + fractions.Fraction("1/3")))
    o["statistics"] = t(lambda: [statistics.mean([1, 2, 3, 4]), statistics.median([3, 1, 2]),
                                 round(statistics.stdev([1, 2, 3, 4]), 9), statistics.quantiles(range(1, 11), n=4)])
    o["math"] = t(lambda: [math.lgamma(10.5), math.fsum([0.1] * 10), math.isqrt(10**20), math.comb(50, 25)])
    o["floats"] = t(lambda: [repr(0.1 + 0.2), f"{2.5:.0f}", format(1234567.891, ",.2f"), 1 / 3])
    o["hashes"] = t(lambda: [hashlib.sha256(b"abc").hexdigest(), hashlib.md5(b"abc").hexdigest(),
                             hashlib.sha3_256(b"abc").hexdigest(), hashlib.blake2b(b"abc", digest_size=16).hexdigest(),
                             hashlib.new("sha512", b"abc").hexdigest()[:16]])
    o["pbkdf2"] = t(lambda: hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 1000).hex())
    o["hmac"] = t(lambda: hmac.new(b"k", b"msg", "sha256").hexdigest())
    o["uuid5"] = t(lambda: str(uuid.uuid5(uuid.NAMESPACE_DNS, "example.com")))
    o["uuid4"] = t(lambda: uuid.uuid4().version)
    def seeded():
        random.seed(42)
        got = [random.random(), random.randint(1, 100), random.choice("abcdef"), random.sample(range(100), 3)]
        r = random.Random(7)
        items = list(range(10))
        r.shuffle(items)
        return got + [r.gauss(0, 1), items]
    o["random"] = t(seeded)
    data = b"hello world " * 1000
    o["codecs"] = t(lambda: [base64.b64encode(b"\xff\xfe").decode(), zlib.crc32(data), len(gzip.decompress(gzip.compress(data))),
                             len(lzma.decompress(lzma.compress(data))), len(bz2.decompress(bz2.compress(data)))])
    def files():
        root = pathlib.Path("/workspace")
        (root / "d/e").mkdir(parents=True)
        for name in ("a.txt", "d/b.txt", "d/e/c.txt", "d/e/x.csv"):
            (root / name).write_text(name)
        with open("/workspace/t.csv", "w", newline="") as f:
            csv.writer(f).writerows([["a", "b"], [1, "x,y"]])
        with open("/tmp/t.txt", "w") as f:
            f.write("tmp")
        with tempfile.TemporaryDirectory() as d:
            (pathlib.Path(d) / "f").write_text("1")
            in_tmp = d.startswith(tempfile.gettempdir())
        shutil.copytree("d", "d2")
        shutil.move("d2/b.txt", "d2/b2.txt")
        shutil.rmtree("d2/e")
        return [os.getcwd(), sorted(str(p.relative_to(root)) for p in root.rglob("*.txt")),
                sorted(glob.glob("**/*.csv", recursive=True)),
                sorted((os.path.relpath(r, "/workspace"), sorted(ds), sorted(fs)) for r, ds, fs in os.walk("d")),
                list(csv.DictReader(open("/workspace/t.csv", newline=""))), open("/tmp/t.txt").read(), in_tmp,
                sorted(os.listdir("d2")), str(pathlib.Path("d/../a.txt").resolve())]
    o["files"] = t(files)
    def archives():
        with zipfile.ZipFile("/workspace/a.zip", "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("x.txt", data)
            zf.write("/workspace/d/b.txt", "b.txt")
        with tarfile.open("/workspace/t.tar.xz", "w:xz") as tf:
            tf.add("/workspace/d", arcname="d")
        with tarfile.open("/workspace/t.tar.xz") as tf:
            names = sorted(tf.getnames())
        shutil.unpack_archive("/workspace/a.zip", "/workspace/un")
        return [zipfile.ZipFile("/workspace/a.zip").namelist(), names, sorted(os.listdir("/workspace/un"))]
    o["archives"] = t(archives)
    def database():
        con = sqlite3.connect("/workspace/app.db")
        con.execute("create table t (k text primary key, v real, j text)")
        con.executemany("insert into t values (?, ?, ?)", [(f"k{i}", i * 1.5, '{"a": %d}' % i) for i in range(100)])
        con.commit()
        return [con.execute("select count(*), sum(v), avg(v) from t").fetchone(),
                con.execute("select json_extract(j, '$.a') from t where k = 'k7'").fetchone(),
                con.execute("select k, sum(v) over (order by v rows 1 preceding) from t limit 2").fetchall()]
    o["sqlite"] = t(database)
    return o
'''


def test_the_standard_library_answers_as_natively(rpc: Rpc, tmp_path: Path) -> None:
    got = completed(run(rpc, STDLIB_BATCH))
    expected = native(STDLIB_BATCH, tmp_path)["output"]
    assert got == expected, {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}


ASYNC_AND_RECURSION = CHECK + r'''
import asyncio, sys
async def work():
    async def double(i):
        await asyncio.sleep(0.001)
        return i * 2
    got = await asyncio.gather(*(double(i) for i in range(5)))
    try:
        await asyncio.wait_for(asyncio.sleep(1), 0.01)
    except TimeoutError as e:
        got.append(type(e).__name__)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(double(10))
    got.append(task.result())
    queue = asyncio.Queue()
    await queue.put(3)
    got.append(await queue.get())
    return got
def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)
def main(args):
    o = {"asyncio": t(lambda: asyncio.run(work())), "limit": sys.getrecursionlimit(),
         "depth_900": t(lambda: depth(900)), "depth_2000": t(lambda: depth(2000))}
    sys.setrecursionlimit(30_000)
    o["depth_20000"] = t(lambda: depth(20_000))
    return o
'''


def test_asyncio_and_python_recursion_as_natively(rpc: Rpc, tmp_path: Path) -> None:
    got = completed(run(rpc, ASYNC_AND_RECURSION))
    assert got == native(ASYNC_AND_RECURSION, tmp_path)["output"]
    assert got["depth_2000"].startswith("RecursionError: maximum recursion depth exceeded")


# -- 2. tracebacks: the user's lines, native's last line, no host paths -----------------

FAILING = [
    pytest.param("def main(args):\n    x = (1,\n    return x\n", id="unclosed"),
    pytest.param("def main(args):\n    print 'hello'\n", id="print-statement"),
    pytest.param("def main(args):\nreturn 1\n", id="indentation"),
    pytest.param("x = 1\n1 / 0", id="last-line-no-newline"),
    pytest.param("def a(x):\n    return b(x)\ndef b(x):\n    return x['missing']\ndef main(args):\n    return a({})\n",
                 id="nested"),
    pytest.param("class ParseError(Exception):\n    pass\ndef parse(s):\n    try:\n        return int(s)\n"
                 "    except ValueError as e:\n        raise ParseError(f'bad number {s!r}') from e\n"
                 "def main(args):\n    try:\n        parse('x1')\n    except ParseError as e:\n"
                 "        e.add_note('while reading row 3')\n        raise\n", id="chained-with-note"),
    pytest.param("def main(args):\n    try:\n        {}['k']\n    except KeyError:\n        1 / 0\n", id="context"),
    pytest.param("import json\ndef main(args):\n    return json.loads('{bad json}')\n", id="library-frames"),
    pytest.param("def main(args):\n    raise ExceptionGroup('several', [ValueError('a'), TypeError('b')])\n", id="group"),
    pytest.param("def main(args):\n    raise KeyboardInterrupt\n", id="keyboard-interrupt"),
    pytest.param("def f(n):\n    return f(n + 1)\ndef main(args):\n    return f(0)\n", id="recursion"),
]
USER_FRAME = re.compile(r'File "<run_code>", line (\d+), in (\S+)')
HOST_PATHS = (str(REPO), "/root", "/home/", "/work/", "site-packages/wasmrun",
              "wasmtime", sys.prefix)


def _last_line(message: str) -> str:
    lines = [line for line in message.splitlines() if line.strip() and not line.startswith("hint: ")]
    return lines[-1].strip()


@pytest.mark.parametrize("code", FAILING)
def test_a_failure_shows_the_users_lines_as_natively(rpc: Rpc, tmp_path: Path, code: str) -> None:
    got = run(rpc, code)
    want = native(code, tmp_path)
    assert got["status"] == want["status"] == "failed"
    message, native_message = got["error"]["message"], want["error"]["message"]
    assert got["error"]["type"] == want["error"]["type"]
    assert not any(path in message for path in HOST_PATHS), message
    if got["error"]["type"] == "RecursionError":  # 3.15 prints a few frames fewer before "repeated"
        assert USER_FRAME.findall(message)[:4] == USER_FRAME.findall(native_message)[:4]
    elif not on_data() or got["error"]["type"] not in ("SyntaxError", "IndentationError"):
        assert USER_FRAME.findall(message) == USER_FRAME.findall(native_message), message
    if "Error: " in _last_line(native_message) and not on_data():
        assert _last_line(message) == _last_line(native_message)
    else:  # 3.15 adds "Did you mean" and words some messages its own way; the exception's type leads
        assert _last_line(message).split(":")[0] == _last_line(native_message).split(":")[0]
    if "while reading row 3" in native_message:
        assert "The above exception was the direct cause" in message and message.endswith("while reading row 3")


def test_carets_sit_under_the_expression_on_a_last_line_without_newline(rpc: Rpc) -> None:
    """3.11's traceback put them one column right when the source's last line had no newline."""
    message = run(rpc, "x = 1\n1 / 0")["error"]["message"]
    lines = message.splitlines()
    at = lines.index("    1 / 0")
    assert lines[at + 1] == "    ~~^~~", message


# -- 3. the first-try mistakes say what to do -----------------------------------------

# The operator's command names the served image's layer.
PACKAGES_BY_OPERATOR = {"stdlib": "runtime.packages.install(['NAME'])", "data": "runtime.packages.install(['NAME'])"}
FIRST_TRIES = [
    pytest.param("!pip install requests\nimport requests\n", "SyntaxError", "`!` shell lines and `%` magics", id="bang-pip"),
    pytest.param("%pip install requests\n", "SyntaxError", "`!` shell lines and `%` magics", id="percent-pip"),
    pytest.param("import subprocess, sys\nsubprocess.check_call([sys.executable, '-m', 'pip', 'install', 'x'])\n",
                 "OSError", "the sandbox runs no processes", id="pip-subprocess"),
    pytest.param("import pip\npip.main(['install', 'requests'])\n", "ModuleNotFoundError", "the sandbox runs no processes",
                 id="import-pip"),
    pytest.param("import os\nos.system('ls')\n", "AttributeError", "the sandbox runs no processes", id="os-system"),
    pytest.param("import multiprocessing\nmultiprocessing.Pool(2).map(abs, [-1])\n",
                 {"stdlib": "ModuleNotFoundError", "data": "AttributeError"}, "the sandbox runs no processes",
                 id="multiprocessing"),
    pytest.param("import threading\nthreading.Thread(target=print).start()\n", "RuntimeError",
                 "threads are not available in the sandbox", id="thread"),
    pytest.param("import requests\n", "ModuleNotFoundError", "'requests' is not installed in this sandbox", id="requests"),
    pytest.param("open('data.csv').read()\n", "FileNotFoundError", "No such file or directory: 'data.csv'", id="wrong-path"),
]


@pytest.mark.parametrize(("code", "error_type", "phrase"), FIRST_TRIES)
def test_first_try_errors_say_what_to_do(rpc: Rpc, code: str, error_type: str | dict[str, str], phrase: str) -> None:
    result = run(rpc, code)
    assert result["status"] == "failed"
    expected = error_type if isinstance(error_type, str) else error_type[current()]  # the image's own
    assert result["error"]["type"] == expected, result["error"]
    assert phrase in result["error"]["message"], result["error"]["message"]
    if "runs no processes" in phrase or "shell lines" in phrase:
        assert PACKAGES_BY_OPERATOR[current()] in result["error"]["message"]
    assert 'File "<run_code>", line' in result["error"]["message"]


def test_help_and_exit_work_as_in_a_python_prompt(rpc: Rpc) -> None:
    shown = run(rpc, "help(len)\n")
    assert shown["status"] == "completed" and "len(obj, /)" in shown["logs_preview"]
    left = run(rpc, "print('before')\nexit('bye')\n")
    assert left["error"] == {"type": "SystemExit", "message": "the code called exit('bye')"}
    assert left["logs_preview"] == "before\n"


def test_output_keeps_order_and_encodes_what_utf8_cannot(rpc: Rpc) -> None:
    code = ("import sys, warnings\nprint('a', 'b', sep='-', end='|')\nprint('c', flush=True)\n"
            "print('to-err', file=sys.stderr)\nprint('uni: é ✓ 😀', '\\udcff')\nwarnings.warn('careful')\n"
            "sys.stdout.write('w\\n')\n")
    assert run(rpc, code)["logs_preview"] == (
        "a-b|c\nto-err\nuni: é ✓ 😀 \\udcff\n<run_code>:6: UserWarning: careful\nw\n"
    )


def test_the_root_lists_the_mounts_and_refuses_writes(rpc: Rpc) -> None:
    # WASI has no `/`: without one made for the run, os.listdir("/") fails although /workspace works.
    code = CHECK + (
        "import os\ndef main(args):\n"
        "    return [sorted(os.listdir('/')), os.listdir('/skills'), t(lambda: open('/new', 'w')),"
        " t(lambda: open('/etc/passwd')), os.path.isdir('/workspace'), os.path.exists('/etc')]\n"
    )
    root, skills, write, passwd, has_workspace, has_etc = completed(run(rpc, code, mount_skills=["text.stats"]))
    assert {"home", "skills", "tmp", "workspace"} <= set(root), root
    assert skills == ["text.stats"]
    assert write.startswith("PermissionError") and passwd.startswith("FileNotFoundError")
    assert has_workspace and not has_etc


# -- 4. values come back the same on both images ---------------------------------------

def test_return_values_have_the_same_json_on_both_images(rpc: Rpc) -> None:
    code = ("import datetime, decimal\ndef main(args):\n    return {'nan': float('nan'), 'big': 2**100,"
            " 's': {3, 1, 2}, 'b': b'\\x00a', 'when': datetime.datetime(2024, 1, 2, 3, 4),"
            " 'price': decimal.Decimal('19.99'), 't': (1, 2)}\n")
    result = run(rpc, code)
    assert result["output"] == {"nan": None, "big": 2**100, "s": [1, 2, 3], "b": "b'\\x00a'",
                                "when": "2024-01-02T03:04:00", "price": 19.99, "t": [1, 2]}
    assert len(result["warnings"]) == 2
    assert run(rpc, "def main(args):\n    return 10**5000\n")["error"]["type"] == "InvalidOutput"


# -- 5. what docs/images.md states holds -----------------------------------------------

def test_deep_c_recursion_is_as_the_images_table_states(rpc: Rpc, client: Any) -> None:
    """C code walking a structure nested thousands deep: the stdlib image (and native 3.11)
    follows the recursion limit; the data image's 3.15 bounds json's C recursion by its C
    stack (1 MiB: ~21,000 levels), not the limit. Both free any depth (docs/images.md)."""
    code = ("import json, sys\ndef nest(n):\n    d = []\n    for _ in range(n):\n        d = [d]\n    return d\n"
            "def main(args):\n    sys.setrecursionlimit(10_000)\n    try:\n        return len(json.dumps(nest(3000)))\n"
            "    except RecursionError as e:\n        return str(e)\n")
    three_thousand = completed(run(rpc, code))
    freed = run(rpc, "def main(args):\n    d = []\n    for _ in range(100_000):\n        d = [d]\n    del d\n    return 1\n")
    assert freed["output"] == 1
    run_code_text = next(t["description"] for t in client.get("/tools").json() if t["name"] == "run_code")
    assert "StackOverflow" not in run_code_text
    assert three_thousand == 6002
    if on_data():
        assert "bounded by the C stack as in CPython 3.15" in run_code_text
        deeper = run(rpc, code.replace("nest(3000)", "nest(200_000)"))
        assert deeper["output"].startswith("Stack overflow (used"), deeper


def test_a_session_shows_its_cells_in_tracebacks(rpc: Rpc) -> None:
    session = rpc("create_session", {"language": "python"})["result"]["session_id"]
    assert run(rpc, "x = 41\ndef f():\n    return x + 1\n", session_id=session)["status"] == "completed"
    assert run(rpc, "import asyncio\nawait asyncio.sleep(0)\nf()", session_id=session)["output"] == 42
    failed = run(rpc, "def g():\n    return f() / 0\n", session_id=session)
    assert failed["status"] == "completed"
    message = run(rpc, "g()", session_id=session)["error"]["message"]
    assert re.findall(r'File "<cell (\d+)>", line (\d+)', message) == [("4", "1"), ("3", "2")]
    assert message.endswith("ZeroDivisionError: division by zero")
    rpc("close_session", {"session_id": session})
