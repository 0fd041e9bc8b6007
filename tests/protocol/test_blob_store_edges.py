"""Blob store edges: one kind rule for every writer, reads at any offset, and a start
that sweeps what killed writers left behind."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from wasmrun.blobs.quota import BlobQuota, BlobQuotaExceeded
from wasmrun.blobs.store import COPY_CHUNK, STALE_WRITE_S, FileBlobStore, Usage
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import assemble, create_app
from wasmrun.settings import Settings

Rpc = Any

BAD_KINDS = [
    "a/b c",
    "text/plain\n",
    "/",
    "text/",
    "text/plain; charset=\u00fc",
    "t\u00e9xt/plain",
    "text/plain;",
    "x" * 200 + "/" + "y" * 100,
]


@pytest.mark.parametrize("kind", BAD_KINDS, ids=repr)
def test_a_kind_create_blob_refuses_is_refused_to_a_run_too(rpc: Rpc, kind: str) -> None:
    error = rpc("create_blob", {"content": "x", "kind": kind})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "kind")
    code = (
        "from runtime import blobs\n\n"
        "def main(args):\n"
        "    try:\n"
        "        return blobs.write_text('x', kind=args['kind'])\n"
        "    except ValueError as exc:\n"
        "        return 'refused: ' + str(exc)\n"
    )
    result = rpc("run_code", {"language": "python", "code": code, "args": {"kind": kind}})["result"]
    assert result["status"] == "completed"
    assert str(result["output"]).startswith("refused"), result
    assert result["output_blobs"] == []


@pytest.mark.parametrize("kind", ["text/csv; charset=utf-8", "application/vnd.api+json", "image/svg+xml"])
def test_a_good_kind_is_taken_by_both(rpc: Rpc, kind: str) -> None:
    assert "result" in rpc("create_blob", {"content": "x", "kind": kind})
    code = "from runtime import blobs\n\ndef main(args):\n    return blobs.write_text('x', kind=args['kind'])\n"
    result = rpc("run_code", {"language": "python", "code": code, "args": {"kind": kind}})["result"]
    blob = rpc("read_blob", {"blob_id": result["output"]})["result"]
    assert blob["kind"] == kind


@pytest.mark.parametrize("offset", [2**62, 2**63 - 1, 10**15, 32, 31])
def test_reading_past_the_end_of_a_blob_gives_no_bytes(rpc: Rpc, offset: int) -> None:
    blob_id = rpc("create_blob", {"content": "0123456789" * 3 + "xy", "kind": "text/plain"})["result"]["blob_id"]
    code = (
        "import _wasmrun\nfrom runtime import blobs\n\n"
        "def main(args):\n"
        "    raw = _wasmrun.blob_read(args['id'], args['offset'], 10)\n"
        "    api = blobs.read_bytes(args['id'], offset=args['offset'], length=10)\n"
        "    return [raw.decode(), api.decode()]\n"
    )
    params = {"language": "python", "code": code, "args": {"id": blob_id, "offset": offset}, "input_blobs": [blob_id]}
    result = rpc("run_code", params)["result"]
    assert result["status"] == "completed", result
    expected = "y" if offset == 31 else ""
    assert result["output"] == [expected, expected]


def test_a_negative_offset_is_a_value_error_in_the_run(rpc: Rpc) -> None:
    blob_id = rpc("create_blob", {"content": "abc", "kind": "text/plain"})["result"]["blob_id"]
    code = (
        "import _wasmrun\n\n"
        "def main(args):\n"
        "    try:\n"
        "        _wasmrun.blob_read(args['id'], -1, 10)\n"
        "    except ValueError:\n"
        "        return 'refused'\n"
    )
    params = {"language": "python", "code": code, "args": {"id": blob_id}, "input_blobs": [blob_id]}
    assert rpc("run_code", params)["result"]["output"] == "refused"


def test_store_read_answers_any_offset(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    blob_id = store.create(b"abc", "text/plain")
    assert store.read(blob_id, 2**62, 10) == b""
    assert store.read(blob_id, 1, 2**62) == b"bc"
    with pytest.raises(ValueError):
        store.read(blob_id, -1, 1)


def _age(path: Path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_a_start_sweeps_what_killed_writers_left(
    settings: Settings, executor: InProcessExecutor
) -> None:
    store = FileBlobStore(settings.blobs_dir)
    kept = store.create(b"region,sales\n", "text/csv")
    folder = settings.blobs_dir / kept[5:7]
    stale_tmp = folder / ".tmp-abandoned"
    stale_tmp.write_bytes(b"half an upload")
    orphan_data = folder / ("ab" * 16)
    orphan_data.write_bytes(b"bytes whose metadata never came")
    orphan_meta = folder / (("cd" * 16) + ".json")
    orphan_meta.write_text(json.dumps({"blob_id": "blob:" + "cd" * 16}))
    for path in (stale_tmp, orphan_data, orphan_meta):
        _age(path, STALE_WRITE_S + 60)
    in_progress = folder / ".tmp-being-written"
    in_progress.write_bytes(b"a write going on right now")

    server = assemble(settings, executor=executor)  # what `wasmrun serve` does at start
    with TestClient(create_app(server), base_url="http://localhost") as client:
        answer = client.post(
            "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "read_blob", "params": {"blob_id": kept}}
        ).json()
    assert answer["result"]["content"] == "region,sales\n"
    assert not stale_tmp.exists() and not orphan_data.exists() and not orphan_meta.exists()
    assert in_progress.exists()  # younger than any write could be abandoned
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [kept[5:], kept[5:] + ".json", in_progress.name]
    )


# A streamed create (BlobStore.create_file: the E2B front's uploads) is the same blob as create's.
ACROSS_A_CHUNK = b"a" * (COPY_CHUNK - 1) + "\u00e9".encode() + b"z" * 10  # a UTF-8 character cut by the chunk


@pytest.mark.parametrize("data", [b"", b"small", ACROSS_A_CHUNK, ACROSS_A_CHUNK[:COPY_CHUNK]], ids=len)
def test_a_streamed_create_is_the_blob_create_makes(tmp_path: Path, data: bytes) -> None:
    store = FileBlobStore(tmp_path)
    source = io.BytesIO(data)
    source.seek(len(data) // 2)  # read from its start all the same
    streamed = store.create_file(source, "text/plain", owner="t")
    info = store.info(streamed, "t")
    assert info is not None and streamed == store.create(data, "text/plain", owner="t")
    assert (info.size_bytes, info.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert info.utf8 == _decodes(data)
    assert store.read(streamed, 0, len(data) + 1, "t") == data
    assert store.usage("t").count == 1 and not list(tmp_path.glob(".tmp-*"))


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_a_streamed_create_over_the_quota_stores_nothing(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    with pytest.raises(BlobQuotaExceeded):
        store.create_file(io.BytesIO(b"x" * 10_000), "application/octet-stream", owner="t",
                          quota=BlobQuota(max_bytes=8192, max_count=10))
    assert store.usage("t") == Usage() and not list(tmp_path.glob(".tmp-*"))
    assert list(tmp_path.glob("[0-9a-f][0-9a-f]/*")) == []  # no bytes, no metadata


@pytest.mark.parametrize("text", [False, True], ids=["binary", "utf8-text"])
def test_a_streamed_create_holds_a_chunk_at_a_time(tmp_path: Path, text: bool) -> None:
    # Text with a 4-byte character early in each MiB: decoded whole, a chunk's text is 4 MiB.
    piece = ("\U0001f600" + "a" * ((1 << 20) - 4)).encode() if text else b""
    with tempfile.TemporaryFile() as source:
        for _ in range(32):
            source.write(piece or os.urandom(1 << 20))
        tracemalloc.start()
        try:
            FileBlobStore(tmp_path).create_file(source, "application/octet-stream")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 * COPY_CHUNK, f"{peak} bytes held to store a 32 MiB file"
