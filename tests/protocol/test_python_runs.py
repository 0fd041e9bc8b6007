"""The run contract and what a caller sees of it, over HTTP: plain scripts,
async main, hints in the error and the summary, limits.memory_mb, the whole
log kept as a blob, and input blobs read as files from /blobs."""

from __future__ import annotations

import base64
import io
import zipfile
from collections.abc import Callable
from typing import Any

import pytest

from wasmrun.protocol.run_result import MAX_LOGS_PREVIEW_BYTES

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

Rpc = Callable[..., dict[str, Any]]


def run_code(rpc: Rpc, code: str, **params: Any) -> dict[str, Any]:
    answer = rpc("run_code", {"language": "python", "code": code, **params})
    assert "result" in answer, answer
    return answer["result"]


def test_a_plain_script_over_http(rpc: Rpc) -> None:
    result = run_code(rpc, "import statistics\nprint('mean of 3')\nstatistics.mean([1, 2, 6])\n")
    assert result["status"] == "completed"
    assert result["output"] == 3
    assert result["logs_preview"] == "mean of 3\n"


def test_async_main_over_http(rpc: Rpc) -> None:
    code = "import asyncio\nasync def main(args):\n    await asyncio.sleep(0.001)\n    return args['x'] * 2\n"
    assert run_code(rpc, code, args={"x": 21})["output"] == 42


def test_the_hint_reaches_the_summary(rpc: Rpc) -> None:
    result = run_code(rpc, "import docx\n")  # on neither image (python-docx; the data image has numpy)
    assert result["status"] == "failed"
    assert result["error"]["type"] == "ModuleNotFoundError"
    assert result["error"]["message"].splitlines()[-1].startswith("hint: ")
    summary = result["summary"]
    assert summary.startswith("Failed: ModuleNotFoundError: No module named 'docx' (hint: ")
    assert "standard library" in summary and len(summary) <= 200


def test_memory_limit_can_be_asked_for_and_is_named_in_the_hint(rpc: Rpc) -> None:
    code = "def main(args):\n    return len(bytearray(args['mb'] * 1024 * 1024))\n"
    small = run_code(rpc, code, args={"mb": 100}, limits={"memory_mb": 64})
    assert small["error"]["type"] in ("MemoryError", "MemoryLimitExceeded")
    assert "64 MiB" in small["error"]["message"] and "limits.memory_mb" in small["error"]["message"]
    big = run_code(rpc, code, args={"mb": 100}, limits={"memory_mb": 256})
    assert big["output"] == 100 * 1024 * 1024


def test_memory_mb_is_validated(rpc: Rpc) -> None:
    for bad in (0, -1, "64", 10**30):
        answer = rpc("run_code", {"language": "python", "code": "1", "limits": {"memory_mb": bad}})
        assert answer["error"]["code"] == -32602, answer


def test_cut_logs_are_kept_whole_in_a_blob(rpc: Rpc) -> None:
    code = "for i in range(3000):\n    print(f'line {i} ✓')\n"
    result = run_code(rpc, code)
    assert len(result["logs_preview"].encode()) <= MAX_LOGS_PREVIEW_BYTES
    blob = rpc("read_blob", {"blob_id": result["logs_blob"], "mode": "full"})["result"]
    assert blob["kind"].startswith("text/plain")
    assert blob["content"] == "".join(f"line {i} ✓\n" for i in range(3000))
    assert result["logs_blob"] not in result["output_blobs"]


def test_short_logs_have_no_blob(rpc: Rpc) -> None:
    assert "logs_blob" not in run_code(rpc, "print('short')\n")


def test_failed_runs_keep_their_logs_too(rpc: Rpc) -> None:
    result = run_code(rpc, "print('x' * 5000)\nraise ValueError('late')\n")
    assert result["status"] == "failed"
    content = rpc("read_blob", {"blob_id": result["logs_blob"], "mode": "full"})["result"]["content"]
    assert content.startswith("x" * 5000)


def test_an_input_zip_is_a_file_under_blobs(rpc: Rpc) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("data.csv", "a,b\n1,2\n")
    blob_id = rpc(
        "create_blob",
        {"content": base64.b64encode(buf.getvalue()).decode(), "kind": "application/zip", "encoding": "base64"},
    )["result"]["blob_id"]
    code = (
        "import csv, io, os, zipfile\n"
        "def main(args):\n"
        "    with zipfile.ZipFile('/blobs/' + args['data']) as z:\n"
        "        rows = list(csv.reader(io.TextIOWrapper(z.open('data.csv'))))\n"
        "    st = os.stat('/blobs/' + args['data'])\n"
        "    return {'rows': rows, 'listed': os.listdir('/blobs'), 'size': st.st_size, 'links': st.st_nlink}\n"
    )
    result = run_code(rpc, code, args={"data": blob_id}, input_blobs=[blob_id])
    assert result["output"] == {
        "rows": [["a", "b"], ["1", "2"]],
        "listed": [blob_id],
        "size": len(buf.getvalue()),
        "links": 2,  # the store's file itself, hard-linked: no copy
    }


def test_the_guides_example_runs_as_written(rpc: Rpc) -> None:
    guide = rpc("load_skills_protocol_guide", {})["result"]["content"]
    example = guide.split("```python\n", 1)[1].split("```", 1)[0]
    data = rpc("create_blob", {"content": "a,b\n1,2\n3,4\n", "kind": "text/csv"})["result"]["blob_id"]
    result = run_code(rpc, example, args={"data": data}, input_blobs=[data])
    assert result["status"] == "completed", result
    assert result["output"]["summary"] == "2 rows"
    report = rpc("read_blob", {"blob_id": result["output"]["report"], "mode": "full"})["result"]
    assert report["content"] == '{"rows": 2}'


# -- with tenants -----------------------------------------------------------------


def _tenant_http(settings, context, limits: dict[str, int] | None = None):  # type: ignore[no-untyped-def]
    from starlette.testclient import TestClient

    from tests.tenants.test_tenants import caller
    from wasmrun.server import assemble, create_app
    from wasmrun.tenants.store import TenantStore

    store = TenantStore(settings.data_dir)
    keys = {"alice": store.add("alice", limits or {}), "bob": store.add("bob")}
    client = TestClient(create_app(assemble(settings, blobs=context.blobs, executor=context.executor)), base_url="http://localhost")
    return client, caller(client, keys["alice"]), caller(client, keys["bob"])


def test_blobs_folder_holds_only_the_tenants_own_blobs(settings, context) -> None:  # type: ignore[no-untyped-def]
    client, alice, bob = _tenant_http(settings, context)
    with client:
        mine = alice("create_blob", {"content": "alice's", "kind": "text/plain"})["result"]["blob_id"]
        theirs = bob("create_blob", {"content": "bob's", "kind": "text/plain"})["result"]["blob_id"]
        code = "import os\ndef main(args):\n    return {n: open('/blobs/' + n).read() for n in os.listdir('/blobs')}\n"
        out = alice("run_code", {"language": "python", "code": code, "input_blobs": [mine]})["result"]["output"]
        assert out == {mine: "alice's"}
        refused = alice("run_code", {"language": "python", "code": code, "input_blobs": [theirs]})
        assert "error" in refused


def test_memory_mb_within_the_tenants_ceiling(settings, context) -> None:  # type: ignore[no-untyped-def]
    client, alice, _ = _tenant_http(settings, context, {"max_memory_mb": 96})
    with client:
        code = {"language": "python", "code": "def main(args):\n    return 1\n"}
        error = alice("run_code", {**code, "limits": {"memory_mb": 128}})["error"]
        assert error["code"] == -32602 and error["data"]["field"] == "limits.memory_mb"
        assert error["data"]["limit"] == "max_memory_mb" and error["data"]["value"] == 96
        assert alice("run_code", {**code, "limits": {"memory_mb": 96}})["result"]["output"] == 1


def test_a_real_server_mounts_blobs_tmp_and_keeps_logs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import httpx2

    from tests.liveserver import LiveServer

    server = LiveServer(tmp_path / "data")
    try:
        def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            answer: dict[str, Any] = httpx2.post(server.endpoint, json=body, timeout=60).json()
            return answer

        # A database built in /tmp by one run (a plain script whose last line is
        # its output), handed to the next as a blob and opened from /blobs.
        build = (
            "import sqlite3\n"
            "con = sqlite3.connect('/tmp/k.db')\n"
            "con.execute('CREATE TABLE t (v)')\n"
            "con.executemany('INSERT INTO t VALUES (?)', [(i,) for i in range(10)])\n"
            "con.commit(); con.close()\n"
            "from runtime import blobs\n"
            "print('é' * 3000)\n"
            "blobs.write_bytes(open('/tmp/k.db', 'rb').read(), 'application/vnd.sqlite3')\n"
        )
        made = rpc("run_code", {"language": "python", "code": build})["result"]
        assert made["status"] == "completed", made
        blob_id = made["output"]
        logs = rpc("read_blob", {"blob_id": made["logs_blob"], "mode": "full"})["result"]["content"]
        assert logs == "é" * 3000 + "\n"
        use = (
            "def main(args):\n"
            "    import sqlite3\n"
            "    return sqlite3.connect('/blobs/' + args['db']).execute('SELECT SUM(v) FROM t').fetchone()[0]\n"
        )
        used = rpc("run_code", {"language": "python", "code": use, "args": {"db": blob_id}, "input_blobs": [blob_id]})
        assert used["result"]["output"] == 45, used
    finally:
        server.stop()
