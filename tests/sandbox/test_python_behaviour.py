"""The sandbox's Python behaves like Python: UTF-8, zlib, sqlite3, time zones,
/tmp, asyncio, the run contract and errors that say what to do next.
Every test runs real code in the real guest."""

from __future__ import annotations

import pytest

from tests.images import on_data
from wasmrun.limits import MiB
from wasmrun.sandbox.contract import errors

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)


def completed(result):
    assert result.status == "completed", result.error
    return result.output


# -- UTF-8 ---------------------------------------------------------------------


def test_files_default_to_utf8_text_and_names(run_code) -> None:
    code = (
        "import csv, json, os, sys, pathlib\n"
        "def main(args):\n"
        "    open('/workspace/a.txt', 'w').write('héllo €')\n"
        "    pathlib.Path('/workspace/prix €.txt').write_text('٣ 日本')\n"
        "    with open('/workspace/t.csv', 'w', newline='') as f:\n"
        "        csv.writer(f).writerow(['naïve', 'café'])\n"
        "    json.dump({'k': 'ü'}, open('/workspace/d.json', 'w'), ensure_ascii=False)\n"
        "    os.mkdir('/workspace/dossier-été')\n"
        "    return {\n"
        "        'text': open('/workspace/a.txt').read(),\n"
        "        'raw': list(open('/workspace/a.txt', 'rb').read()),\n"
        "        'named': pathlib.Path('/workspace/prix €.txt').read_text(),\n"
        "        'csv': open('/workspace/t.csv', newline='').read(),\n"
        "        'json': json.load(open('/workspace/d.json')),\n"
        "        'names': sorted(os.listdir('/workspace')),\n"
        "        'fs': sys.getfilesystemencoding(), 'utf8_mode': sys.flags.utf8_mode,\n"
        "    }\n"
    )
    out = completed(run_code(code))
    assert out["text"] == "héllo €"
    assert bytes(out["raw"]) == "héllo €".encode()
    assert out["named"] == "٣ 日本"
    assert out["csv"] == "naïve,café\r\n"
    assert out["json"] == {"k": "ü"}
    assert out["names"] == sorted(["a.txt", "prix €.txt", "t.csv", "d.json", "dossier-été"])
    assert (out["fs"], out["utf8_mode"]) == ("utf-8", 1)


def test_common_codecs_are_ready_before_the_run_and_decode_right(run_code) -> None:
    # A CSV with a byte-order mark, Latin-1 and Windows exports: the codecs text
    # readers name come with the snapshot (a run no longer imports them from the
    # stdlib zip, about 4 ms), and they still decode exactly as CPython's do.
    code = (
        "import codecs, sys\n"
        "READY = sorted(m for m in sys.modules if m.startswith('encodings.'))\n"
        "def main(args):\n"
        "    sig = codecs.getincrementaldecoder('utf-8-sig')()\n"
        "    return {\n"
        "        'ready': READY,\n"
        "        'sig': sig.decode(b'\\xef\\xbb') + sig.decode(b'\\xbfa,b\\n', final=True),\n"
        "        'latin': b'caf\\xe9'.decode('latin-1'),\n"
        "        'cp1252': b'\\x80 \\x93q\\x94'.decode('cp1252'),\n"
        "        'utf16': 'ü€'.encode('utf-16').decode('utf-16'),\n"
        "        'ascii_error': b'\\xff'.decode('ascii', 'replace'),\n"
        "    }\n"
    )
    out = completed(run_code(code))
    for module in ("utf_8_sig", "latin_1", "cp1252", "utf_16", "ascii"):
        assert f"encodings.{module}" in out["ready"]
    assert out["sig"] == "a,b\n"
    assert out["latin"] == "café"
    assert out["cp1252"] == "€ \u201cq\u201d"
    assert out["utf16"] == "ü€"
    assert out["ascii_error"] == "\ufffd"


# -- zlib, gzip, zipfile, tarfile -----------------------------------------------


def test_gzip_round_trip_and_zlib(run_code) -> None:
    code = (
        "import gzip, zlib\n"
        "def main(args):\n"
        "    data = ('ligne ' * 5000).encode()\n"
        "    with gzip.open('/workspace/x.gz', 'wt', encoding='utf-8') as f:\n"
        "        f.write('héllo\\n' * 1000)\n"
        "    packed = gzip.compress(data)\n"
        "    return {'back': gzip.decompress(packed) == data, 'smaller': len(packed) < len(data) // 10,\n"
        "            'file': gzip.open('/workspace/x.gz', 'rt').read() == 'héllo\\n' * 1000,\n"
        "            'crc': zlib.crc32(b'abc'), 'z': zlib.decompress(zlib.compress(b'q' * 99)) == b'q' * 99}\n"
    )
    assert completed(run_code(code)) == {"back": True, "smaller": True, "file": True, "crc": 891568578, "z": True}


def test_deflated_zip_and_tar_gz(run_code) -> None:
    code = (
        "import io, tarfile, zipfile\n"
        "def main(args):\n"
        "    with zipfile.ZipFile('/workspace/a.zip', 'w', zipfile.ZIP_DEFLATED) as z:\n"
        "        z.writestr('données.txt', 'x' * 10000)\n"
        "    with zipfile.ZipFile('/workspace/a.zip') as z:\n"
        "        info = z.getinfo('données.txt')\n"
        "        text = z.read('données.txt').decode()\n"
        "    with tarfile.open('/workspace/a.tar.gz', 'w:gz') as t:\n"
        "        t.add('/workspace/a.zip', arcname='a.zip')\n"
        "    with tarfile.open('/workspace/a.tar.gz', 'r:gz') as t:\n"
        "        names = t.getnames()\n"
        "    return [info.compress_type, info.compress_size < 200, len(text), names]\n"
    )
    assert completed(run_code(code)) == [8, True, 10000, ["a.zip"]]


def test_bz2_round_trip_and_tar_bz2(run_code) -> None:
    code = (
        "import bz2, tarfile\n"
        "def main(args):\n"
        "    data = ('ligne é ' * 4000).encode()\n"
        "    packed = bz2.compress(data)\n"
        "    with bz2.open('/workspace/x.bz2', 'wt', encoding='utf-8') as f:\n"
        "        f.write('ok')\n"
        "    with tarfile.open('/workspace/a.tar.bz2', 'w:bz2') as t:\n"
        "        t.add('/workspace/x.bz2', arcname='x.bz2')\n"
        "    names = tarfile.open('/workspace/a.tar.bz2', 'r:bz2').getnames()\n"
        "    return [bz2.decompress(packed) == data, len(packed) < 1000,\n"
        "            bz2.open('/workspace/x.bz2', 'rt').read(), names]\n"
    )
    assert completed(run_code(code)) == [True, True, "ok", ["x.bz2"]]


def test_lzma_xz_round_trip_and_tar_xz(run_code) -> None:
    code = (
        "import lzma, tarfile\n"
        "def main(args):\n"
        "    data = ('ligne é ' * 4000).encode()\n"
        "    packed = lzma.compress(data)\n"
        "    alone = lzma.compress(data, format=lzma.FORMAT_ALONE)\n"
        "    with lzma.open('/workspace/x.xz', 'wt', encoding='utf-8') as f:\n"
        "        f.write('ok')\n"
        "    with tarfile.open('/workspace/a.tar.xz', 'w:xz') as t:\n"
        "        t.add('/workspace/x.xz', arcname='x.xz')\n"
        "    names = tarfile.open('/workspace/a.tar.xz', 'r:xz').getnames()\n"
        "    return [lzma.decompress(packed) == data, lzma.decompress(alone) == data, len(packed) < 1000,\n"
        "            lzma.open('/workspace/x.xz', 'rt').read(), names, lzma.is_check_supported(lzma.CHECK_SHA256)]\n"
    )
    assert completed(run_code(code)) == [True, True, True, "ok", ["x.xz"], True]


# -- sqlite3 ---------------------------------------------------------------------

SQL = (
    "import sqlite3\n"
    "def main(args):\n"
    "    db = sqlite3.connect(args['path'])\n"
    "    db.executescript('''\n"
    "        CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT);\n"
    "        CREATE TABLE orders (id INTEGER PRIMARY KEY, person INTEGER, total REAL);\n"
    "        CREATE INDEX orders_person ON orders(person);\n"
    "    ''')\n"
    "    db.executemany('INSERT INTO people VALUES (?, ?)', [(1, 'Zoë'), (2, 'Ana')])\n"
    "    db.executemany('INSERT INTO orders (person, total) VALUES (?, ?)', [(1, 2.5), (1, 4.0), (2, 1.0)])\n"
    "    db.commit()\n"
    "    rows = db.execute('SELECT p.name, SUM(o.total) FROM people p JOIN orders o ON o.person = p.id'\n"
    "                      ' GROUP BY p.id ORDER BY p.name').fetchall()\n"
    "    plan = ' '.join(str(r) for r in db.execute(\n"
    "        'EXPLAIN QUERY PLAN SELECT * FROM orders WHERE person = 1').fetchall())\n"
    "    db.close()\n"
    "    return {'rows': rows, 'uses_index': 'orders_person' in plan, 'version': sqlite3.sqlite_version}\n"
)


@pytest.mark.parametrize("path", [":memory:", "/workspace/shop.db"])
def test_sqlite3_join_and_index(run_code, path: str) -> None:
    out = completed(run_code(SQL, {"path": path}))
    assert out["rows"] == [["Ana", 1.0], ["Zoë", 6.5]]
    assert out["uses_index"] is True
    assert out["version"].startswith("3.")


def test_sqlite3_file_persists_within_the_run(run_code) -> None:
    code = (
        "import os, sqlite3\n"
        "def main(args):\n"
        "    db = sqlite3.connect('/workspace/k.db')\n"
        "    db.execute('CREATE TABLE t (v)')\n"
        "    db.execute('INSERT INTO t VALUES (42)')\n"
        "    db.commit(); db.close()\n"
        "    again = sqlite3.connect('/workspace/k.db')\n"
        "    return [again.execute('SELECT v FROM t').fetchone()[0], os.path.getsize('/workspace/k.db') > 0]\n"
    )
    assert completed(run_code(code)) == [42, True]


# -- zoneinfo --------------------------------------------------------------------


def test_zoneinfo_across_a_dst_change(run_code) -> None:
    code = (
        "from datetime import datetime, timedelta, timezone\n"
        "from zoneinfo import ZoneInfo\n"
        "def main(args):\n"
        "    ny = ZoneInfo('America/New_York')\n"
        "    before = datetime(2024, 3, 10, 1, 30, tzinfo=ny)\n"
        "    after = (before.astimezone(timezone.utc) + timedelta(hours=1)).astimezone(ny)\n"
        "    paris = datetime(2024, 10, 27, 12, 0, tzinfo=timezone.utc).astimezone(ZoneInfo('Europe/Paris'))\n"
        "    return [before.utcoffset().total_seconds(), after.isoformat(), paris.isoformat()]\n"
    )
    assert completed(run_code(code)) == [
        -18000.0,
        "2024-03-10T03:30:00-04:00",
        "2024-10-27T13:00:00+01:00",
    ]


# -- /tmp --------------------------------------------------------------------------


def test_tmp_is_writable_and_emptied_after_the_run(run_code) -> None:
    code = (
        "import os, tempfile\n"
        "def main(args):\n"
        "    before = os.listdir('/tmp')\n"
        "    with open('/tmp/a.txt', 'w') as f:\n"
        "        f.write('x')\n"
        "    with tempfile.NamedTemporaryFile('w', delete=False) as f:\n"
        "        f.write('y')\n"
        "    return {'before': before, 'dir': os.path.dirname(f.name), 'n': len(os.listdir('/tmp'))}\n"
    )
    first = completed(run_code(code))
    assert first == {"before": [], "dir": "/tmp", "n": 2}
    assert completed(run_code(code))["before"] == []


def test_tmp_counts_against_the_workspace_quota(run_code) -> None:
    code = (
        "def main(args):\n"
        "    open('/workspace/a', 'wb').write(b'a' * 600_000)\n"
        "    open('/tmp/b', 'wb').write(b'b' * 600_000)\n"
        "    return 'fits'\n"
    )
    result = run_code(code, workspace_bytes=1_000_000)
    assert result.status == "failed"
    assert result.error.type == errors.WORKSPACE_QUOTA
    assert "/tmp" in result.error.message
    assert completed(run_code(code, workspace_bytes=2_000_000)) == "fits"


# -- threads and asyncio -------------------------------------------------------------


def test_asyncio_run_of_a_coroutine(run_code) -> None:
    code = (
        "import asyncio\n"
        "async def work(n):\n"
        "    await asyncio.sleep(0.01)\n"
        "    return n * 2\n"
        "async def both():\n"
        "    q = asyncio.Queue()\n"
        "    await q.put(5)\n"
        "    got = await asyncio.wait_for(q.get(), 1)\n"
        "    return await asyncio.gather(work(1), work(got))\n"
        "def main(args):\n"
        "    return asyncio.run(both())\n"
    )
    result = run_code(code)
    assert completed(result) == [2, 10]
    assert "Traceback" not in result.logs


def test_starting_a_thread_fails_with_one_clear_line(run_code) -> None:
    for start in (
        "threading.Thread(target=print).start()",
        "concurrent.futures.ThreadPoolExecutor().submit(print).result()",
    ):
        code = f"import threading, concurrent.futures\ndef main(args):\n    {start}\n"
        result = run_code(code)
        assert result.status == "failed"
        assert result.error.type == "RuntimeError"
        last = result.error.message.splitlines()[-1]
        assert last.startswith("RuntimeError: threads are not available in the sandbox")


# -- the run contract ------------------------------------------------------------------


def test_a_plain_script_returns_its_last_expression(run_code) -> None:
    result = run_code("import math\nprint('working')\nx = [math.sqrt(16), 'é']\n{'x': x, 'n': len(x)}\n")
    assert completed(result) == {"x": [4.0, "é"], "n": 2}
    assert result.logs == "working\n"


def test_a_plain_script_without_a_final_expression_returns_null(run_code) -> None:
    result = run_code("total = sum(range(10))\nprint(total)\n")
    assert completed(result) is None
    assert result.logs == "45\n"


def test_a_script_may_await_at_top_level(run_code) -> None:
    assert completed(run_code("import asyncio\nawait asyncio.sleep(0)\nawait asyncio.sleep(0, result=7)\n")) == 7


def test_async_main_is_awaited(run_code) -> None:
    code = "import asyncio\nasync def main(args):\n    await asyncio.sleep(0)\n    return {'got': args['n']}\n"
    assert completed(run_code(code, {"n": 3})) == {"got": 3}


def test_main_stays_the_default_and_gets_args(run_code) -> None:
    # A final expression does not replace main's return value.
    assert completed(run_code("def main(args):\n    return args['n'] + 1\n'ignored'\n", {"n": 1})) == 2


def test_a_named_entrypoint_must_exist(run_code) -> None:
    result = run_code("x = 1\nx\n", function="handler")
    assert result.status == "failed"
    assert result.error.type == errors.ENTRYPOINT_NOT_FOUND


def test_a_failing_async_main_shows_the_users_frames(run_code) -> None:
    result = run_code("async def main(args):\n    raise ValueError('nope')\n")
    assert result.error.type == "ValueError"
    assert "asyncio" not in result.error.message
    assert 'File "<run_code>", line 2, in main' in result.error.message


# -- error hints --------------------------------------------------------------------------


def _hint(result) -> str:
    assert result.status == "failed"
    lines = result.error.message.splitlines()
    assert lines[-1].startswith("hint: ")
    return lines[-1]


def test_third_party_module_hint(run_code) -> None:
    result = run_code("import torch\n")  # on neither image (the data image has pandas)
    assert result.error.type == "ModuleNotFoundError"
    assert "No module named 'torch'" in result.error.message.splitlines()[-2]
    hint = _hint(result)
    assert "standard library" in hint and "mount_skills" in hint


def test_no_hint_for_a_missing_stdlib_submodule_or_own_error(run_code) -> None:
    for code in ("import json.nonexistent\n", "raise KeyError('x')\n"):
        result = run_code(code)
        assert result.status == "failed"
        assert not result.error.message.splitlines()[-1].startswith("hint:")


def test_blob_not_found_hint(run_code) -> None:
    missing = "blob:" + "0" * 32
    result = run_code(f"from runtime import blobs\nblobs.read_bytes({missing!r})\n")
    assert result.error.type == "BlobNotFound"
    assert "input_blobs" in _hint(result) and missing in _hint(result)


def test_memory_hint_names_the_limit_and_how_to_ask(run_code) -> None:
    result = run_code("x = bytearray(400 * 1024 * 1024)\n", memory_bytes=64 * MiB)
    # The guest's own MemoryError (an allocation Python refused) or the host's type.
    assert result.error.type in ("MemoryError", errors.MEMORY_LIMIT)
    hint = _hint(result)
    assert "64 MiB" in hint and "limits.memory_mb" in hint


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.create_connection(('example.com', 80))\n",
        "import socket\nsocket.socket()\n",
        "import http.client\nhttp.client.HTTPConnection('example.com').request('GET', '/')\n",
    ],
)
def test_socket_hint(run_code, code: str) -> None:
    result = run_code(code)
    hint = _hint(result)
    assert "no sockets" in hint and "runtime.http" in hint


def test_a_refused_request_explains_itself_without_a_second_hint(run_code) -> None:
    result = run_code("import urllib.request\nurllib.request.urlopen('http://example.com')\n")
    assert result.error.type == "NetworkNotAllowed"
    assert not result.error.message.splitlines()[-1].startswith("hint:")


# -- /blobs ----------------------------------------------------------------------------------


def _zip_and_db(tmp_path) -> tuple[bytes, bytes]:
    import io
    import sqlite3
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("notes/é.txt", "bonjour " * 100)
    db_path = tmp_path / "in.db"
    db = sqlite3.connect(db_path)
    db.execute("CREATE TABLE t (k TEXT, v INTEGER)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [("a", 1), ("b", 2)])
    db.commit()
    db.close()
    return buf.getvalue(), db_path.read_bytes()


BLOBS_CODE = (
    "import os, sqlite3, zipfile\n"
    "def main(args):\n"
    "    with zipfile.ZipFile('/blobs/' + args['zip']) as z:\n"
    "        text = z.read('notes/é.txt').decode()\n"
    "    db = sqlite3.connect('/blobs/' + args['db'])  # as a user writes it: read-only falls back\n"
    "    total = db.execute('SELECT SUM(v) FROM t').fetchone()[0]\n"
    "    try:\n"
    "        open('/blobs/' + args['zip'], 'ab').write(b'x')\n"
    "        writable = True\n"
    "    except OSError:\n"
    "        writable = False\n"
    "    return {'names': sorted(os.listdir('/blobs')), 'text': text[:8], 'total': total, 'writable': writable}\n"
)


def test_input_blobs_are_files_under_blobs(run_code, blobs, tmp_path) -> None:
    zip_bytes, db_bytes = _zip_and_db(tmp_path)
    zip_id, db_id = blobs.add(zip_bytes, "application/zip"), blobs.add(db_bytes, "application/vnd.sqlite3")
    other = blobs.add(b"not granted")
    out = completed(run_code(BLOBS_CODE, {"zip": zip_id, "db": db_id}, input_blobs=[zip_id, db_id]))
    assert out == {"names": sorted([zip_id, db_id]), "text": "bonjour ", "total": 3, "writable": False}
    assert other not in out["names"]
    assert blobs.data[zip_id][0] == zip_bytes  # untouched


def test_blobs_folder_is_absent_without_input_blobs_and_emptied_after(run_code, blobs) -> None:
    blob_id = blobs.add(b"abc")
    code = "import os\ndef main(args):\n    return os.listdir('/blobs') if os.path.isdir('/blobs') else None\n"
    assert completed(run_code(code, input_blobs=[blob_id])) == [blob_id]
    # (the data image's /blobs is baked into its memory: there, an empty folder; docs/images.md)
    assert completed(run_code(code)) == ([] if on_data() else None)
    unknown = "blob:" + "f" * 32
    assert completed(run_code(code, input_blobs=[unknown, "../../etc", blob_id])) == [blob_id]


def test_a_main_without_parameters_is_called_without_args(run_code) -> None:
    code = "def main():\n    return 'no args needed'\nif __name__ == '__main__':\n    main()\n"
    assert completed(run_code(code, {"ignored": 1})) == "no args needed"
    assert completed(run_code("def main(*args):\n    return len(args)\n", {"a": 1})) == 1


def test_unmounted_skill_hint(run_code) -> None:
    result = run_code("import skills.text.stats\n")
    assert result.error.type == "ModuleNotFoundError"
    assert "mount_skills" in _hint(result)


@pytest.mark.parametrize("define_main", [False, True])
def test_code_nested_too_deeply_is_a_syntax_error_not_a_memory_limit(run_code, define_main: bool) -> None:
    def wrap(expression: str) -> str:
        return f"def main(args):\n    return {expression}\n" if define_main else f"x = {expression}\nx\n"

    # CPython's own limits, as natively: 200 nested brackets are fine, 201 are not.
    assert completed(run_code(wrap("[" * 200 + "]" * 200))) is not None
    result = run_code(wrap("[" * 201 + "]" * 201))
    assert result.error.type == "SyntaxError"
    assert "too many nested parentheses" in result.error.message
    # Past the parser's own bound CPython raises MemoryError: reported as what it is.
    result = run_code(wrap("-" * 100_000 + "1"))
    assert result.status == "failed"
    assert result.error.type == "SyntaxError"
    assert "nested too deeply" in result.error.message


def test_asyncio_connections_fail_with_the_network_hint(run_code) -> None:
    code = (
        "import asyncio\n"
        "async def main(args):\n"
        "    await asyncio.open_connection('example.com', 80)\n"
    )
    result = run_code(code)
    assert result.error.type == "OSError"
    assert "no sockets" in _hint(result)
