"""create_blob and read_blob, and the file blob store under them."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wasmrun.blobs.sampling import utf8_head, utf8_tail
from wasmrun.blobs.store import FileBlobStore

Rpc = Callable[..., dict[str, Any]]
MIXED = "aé€😀z"  # characters of 1, 2, 3, 4 and 1 bytes


def create(rpc: Rpc, content: str, kind: str = "text/plain", **extra: Any) -> str:
    result = rpc("create_blob", {"content": content, "kind": kind, **extra})["result"]
    return result["blob_id"]


def read(rpc: Rpc, blob_id: str, **params: Any) -> dict[str, Any]:
    return rpc("read_blob", {"blob_id": blob_id, **params})["result"]


# -- create_blob ----------------------------------------------------------------


def test_create_returns_id_and_stored_size(rpc: Rpc) -> None:
    result = rpc("create_blob", {"content": "naïve ☃", "kind": "text/plain"})["result"]
    assert result["size_bytes"] == len("naïve ☃".encode())
    assert result["blob_id"].startswith("blob:") and len(result["blob_id"]) == 5 + 32
    int(result["blob_id"][5:], 16)


def test_ids_are_unique_per_content_and_the_same_bytes_are_stored_once(rpc: Rpc, blob_store: Any) -> None:
    assert len({create(rpc, f"text {i}") for i in range(20)}) == 20
    same = {create(rpc, "same bytes") for _ in range(5)}
    assert len(same) == 1
    (blob_id,) = same
    assert create(rpc, "same bytes", "text/csv") != blob_id  # another kind is another blob
    # The id is keyed by the store's secret: not the content's plain hash.
    import hashlib

    assert hashlib.sha256(b"same bytes").hexdigest()[:32] != blob_id[5:]
    assert len([p for p in blob_store.root.glob("*/*") if p.name == blob_id[5:]]) == 1


def test_binary_round_trip_as_base64(rpc: Rpc) -> None:
    data = bytes(range(256))
    blob = rpc(
        "create_blob",
        {
            "content": base64.b64encode(data).decode(),
            "kind": "application/octet-stream",
            "encoding": "base64",
        },
    )["result"]
    assert blob["size_bytes"] == 256
    result = read(rpc, blob["blob_id"], mode="full")
    assert result["encoding"] == "base64" and result["truncated"] is False
    assert base64.b64decode(result["content"]) == data


@pytest.mark.parametrize(
    "params, field",
    [
        pytest.param({"content": "x", "kind": "plain"}, "kind", id="kind-not-mime"),
        pytest.param({"content": "x", "kind": ""}, "kind", id="kind-empty"),
        pytest.param({"content": "x", "kind": "text/" + "a" * 300}, "kind", id="kind-too-long"),
        pytest.param(
            {"content": "not base64!", "kind": "image/png", "encoding": "base64"}, "content", id="bad-base64"
        ),
        pytest.param(
            {"content": "x", "kind": "text/plain", "encoding": "latin-1"}, "encoding", id="bad-encoding"
        ),
        pytest.param({"kind": "text/plain"}, "content", id="no-content"),
        pytest.param({"content": "x"}, "kind", id="no-kind"),
    ],
)
def test_create_invalid(rpc: Rpc, params: dict[str, Any], field: str) -> None:
    error = rpc("create_blob", params)["error"]
    assert error["code"] == -32602 and error["data"]["field"] == field


def test_kind_with_parameters(rpc: Rpc) -> None:
    blob = create(rpc, "a,b", kind="text/csv; charset=utf-8")
    assert read(rpc, blob)["kind"] == "text/csv; charset=utf-8"


# -- read_blob -------------------------------------------------------------------


def test_read_like_the_spec(rpc: Rpc) -> None:
    csv = "name,email,company\nJohn Doe,john@example.com,Acme Corp\nJane Smith,jane@example.com,Tech Inc"
    blob = create(rpc, csv, kind="text/csv")
    assert read(rpc, blob, mode="sample_head", max_bytes=2000) == {
        "content": csv,
        "truncated": False,
        "kind": "text/csv",
        "encoding": "utf-8",
        "size_bytes": len(csv),
    }


@pytest.mark.parametrize("mode", ["sample_head", "sample_tail", "full"])
def test_empty_blob(rpc: Rpc, mode: str) -> None:
    result = read(rpc, create(rpc, ""), mode=mode)
    assert result["content"] == "" and result["truncated"] is False and result["size_bytes"] == 0


@pytest.mark.parametrize(
    "size, max_bytes, truncated",
    [
        pytest.param(2000, 2000, False, id="exactly-max"),
        pytest.param(2001, 2000, True, id="one-over"),
        pytest.param(1999, 2000, False, id="one-under"),
        pytest.param(5, 0, True, id="zero-max"),
    ],
)
@pytest.mark.parametrize("mode", ["sample_head", "sample_tail"])
def test_boundaries(rpc: Rpc, mode: str, size: int, max_bytes: int, truncated: bool) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(size))
    result = read(rpc, create(rpc, text), mode=mode, max_bytes=max_bytes)
    expected = (
        text[:max_bytes] if mode == "sample_head" else text[max(0, size - max_bytes) :] if max_bytes else ""
    )
    assert result["content"] == expected
    assert result["truncated"] is truncated


def test_default_max_bytes_is_2000(rpc: Rpc) -> None:
    result = read(rpc, create(rpc, "x" * 5000))
    assert len(result["content"]) == 2000 and result["truncated"] is True


@pytest.mark.parametrize("max_bytes", range(0, len(MIXED.encode()) + 2))
def test_head_never_splits_a_character(rpc: Rpc, max_bytes: int) -> None:
    content = read(rpc, create(rpc, MIXED), mode="sample_head", max_bytes=max_bytes)["content"]
    assert MIXED.startswith(content)
    assert len(content.encode()) <= max_bytes
    if content != MIXED:  # the longest whole-character prefix that fits
        assert len(MIXED[: len(content) + 1].encode()) > max_bytes


@pytest.mark.parametrize("max_bytes", range(0, len(MIXED.encode()) + 2))
def test_tail_never_splits_a_character(rpc: Rpc, max_bytes: int) -> None:
    content = read(rpc, create(rpc, MIXED), mode="sample_tail", max_bytes=max_bytes)["content"]
    assert MIXED.endswith(content)
    assert len(content.encode()) <= max_bytes
    if content != MIXED:
        assert len(MIXED[len(MIXED) - len(content) - 1 :].encode()) > max_bytes


def test_full_reads_everything(rpc: Rpc) -> None:
    text = "line\n" * 1000
    result = read(rpc, create(rpc, text), mode="full", max_bytes=10)
    assert result["content"] == text and result["truncated"] is False


def test_full_refused_over_the_limit(rpc: Rpc, settings: Any) -> None:
    text = "x" * (settings.max_full_read_bytes + 1)
    error = rpc("read_blob", {"blob_id": create(rpc, text), "mode": "full"})["error"]
    assert error["code"] == -32602 and error["data"]["field"] == "mode"
    assert "sample_head" in error["message"]


def test_binary_sample_counts_raw_bytes(rpc: Rpc) -> None:
    data = b"\x00\xff" * 100
    blob = create(rpc, base64.b64encode(data).decode(), kind="image/png", encoding="base64")
    head = read(rpc, blob, max_bytes=3)
    assert head["encoding"] == "base64" and base64.b64decode(head["content"]) == data[:3]
    tail = read(rpc, blob, mode="sample_tail", max_bytes=3)
    assert base64.b64decode(tail["content"]) == data[-3:] and tail["truncated"] is True


@pytest.mark.parametrize(
    "kind, content, encoding",
    [
        pytest.param("application/json", '{"a": 1}', "utf-8", id="json-is-text"),
        pytest.param("application/vnd.api+json", "{}", "utf-8", id="plus-json-is-text"),
        pytest.param("application/octet-stream", "plain", "base64", id="octet-stream-is-binary"),
        pytest.param("application/pdf", "%PDF-1.4", "base64", id="pdf-is-binary"),
    ],
)
def test_encoding_follows_kind(rpc: Rpc, kind: str, content: str, encoding: str) -> None:
    assert read(rpc, create(rpc, content, kind=kind))["encoding"] == encoding


def test_invalid_utf8_text_kind_comes_back_base64(rpc: Rpc) -> None:
    blob = create(rpc, base64.b64encode(b"caf\xe9").decode(), kind="text/plain", encoding="base64")
    result = read(rpc, blob)
    assert result["encoding"] == "base64" and base64.b64decode(result["content"]) == b"caf\xe9"


@pytest.mark.parametrize(
    "blob_id",
    [
        pytest.param("blob:" + "0" * 32, id="unknown"),
        pytest.param("blob:../../etc/passwd", id="path"),
        pytest.param("blob:ABC", id="malformed"),
        pytest.param("sheet-123", id="no-prefix"),
    ],
)
def test_read_missing_blob(rpc: Rpc, blob_id: str) -> None:
    error = rpc("read_blob", {"blob_id": blob_id})["error"]
    assert error["code"] == -32602 and error["data"]["field"] == "blob_id"
    assert "does not exist" in error["message"]


@pytest.mark.parametrize(
    "params, field",
    [
        pytest.param({"mode": "middle"}, "mode", id="bad-mode"),
        pytest.param({"max_bytes": -1}, "max_bytes", id="negative"),
    ],
)
def test_read_invalid_params(rpc: Rpc, params: dict[str, Any], field: str) -> None:
    blob = create(rpc, "x")
    error = rpc("read_blob", {"blob_id": blob, **params})["error"]
    assert error["code"] == -32602 and error["data"]["field"] == field


# -- the store itself --------------------------------------------------------------


def test_store_survives_a_restart_and_keeps_metadata(tmp_path: Path) -> None:
    blob_id = FileBlobStore(tmp_path).create(b"hello", "text/plain", run_id="run_1")
    again = FileBlobStore(tmp_path)
    assert again.read(blob_id, 0, 100) == b"hello"
    info = again.info(blob_id)
    assert info is not None
    assert (info.kind, info.size_bytes, info.run_id, info.utf8) == ("text/plain", 5, "run_1", True)
    assert info.sha256 == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    assert info.created.endswith("+00:00")
    meta = json.loads((tmp_path / blob_id[5:7] / f"{blob_id[5:]}.json").read_text())
    assert meta["sha256"] == info.sha256


def test_store_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    for i in range(10):
        store.create(b"x" * i, "text/plain")
    assert not [p for p in tmp_path.rglob(".tmp-*")]


def test_store_reads_ranges_and_rejects_unknown(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path)
    blob_id = store.create(b"0123456789", "text/plain")
    assert store.read(blob_id, 3, 4) == b"3456"
    assert store.read(blob_id, 8, 10) == b"89"
    assert store.size("blob:" + "f" * 32) is None
    with pytest.raises(KeyError):
        store.read("blob:" + "f" * 32, 0, 1)


@pytest.mark.parametrize(
    "data, expected",
    [
        pytest.param(b"", b"", id="empty"),
        pytest.param("é".encode()[:1], b"", id="lone-lead-byte"),
        pytest.param("a😀".encode()[:4], b"a", id="three-of-four"),
        pytest.param("a😀".encode(), "a😀".encode(), id="whole"),
    ],
)
def test_utf8_head_edges(data: bytes, expected: bytes) -> None:
    assert utf8_head(data) == expected


@pytest.mark.parametrize(
    "data, expected",
    [
        pytest.param(b"", b"", id="empty"),
        pytest.param("😀".encode()[1:], b"", id="only-continuations"),
        pytest.param("😀a".encode()[3:], b"a", id="last-continuation"),
        pytest.param("😀a".encode(), "😀a".encode(), id="whole"),
    ],
)
def test_utf8_tail_edges(data: bytes, expected: bytes) -> None:
    assert utf8_tail(data) == expected
