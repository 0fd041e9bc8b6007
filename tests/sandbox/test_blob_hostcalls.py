"""Blobs cross the sandbox boundary only through the host functions."""

from __future__ import annotations

import json


def test_read_input_blob(run_code, blobs):
    blob_id = blobs.add("héllo\nwörld\n".encode())
    code = "from runtime import blobs\ndef main(args):\n    return blobs.read_text(args['b'])"
    result = run_code(code, args={"b": blob_id}, input_blobs=[blob_id])
    assert result.output == "héllo\nwörld\n"
    assert result.usage.blob_io_bytes >= len("héllo\nwörld\n".encode())


def test_read_byte_range_and_size(run_code, blobs):
    blob_id = blobs.add(bytes(range(256)) * 10000, "application/octet-stream")
    code = (
        "from runtime import blobs\n"
        "def main(args):\n"
        "    b = args['b']\n"
        "    whole = blobs.read_bytes(b)\n"
        "    part = blobs.read_bytes(b, offset=250, length=10)\n"
        "    end = blobs.read_bytes(b, offset=blobs.size(b) - 3, length=100)\n"
        "    return [len(whole), list(part), list(end), blobs.size(b)]\n"
    )
    result = run_code(code, args={"b": blob_id}, input_blobs=[blob_id])
    assert result.output == [2_560_000, [250, 251, 252, 253, 254, 255, 0, 1, 2, 3], [253, 254, 255], 2_560_000]


def test_written_blobs_are_output_blobs(run_code, blobs):
    code = (
        "from runtime import blobs\n"
        "def main(args):\n"
        "    a = blobs.write_text('some text')\n"
        "    b = blobs.write_json({'k': [1, 2]})\n"
        "    c = blobs.write_bytes(b'\\x00\\xff', 'image/png')\n"
        "    return [a, b, c, blobs.read_text(a)]\n"
    )
    result = run_code(code)
    a, b, c, text = result.output
    assert result.output_blobs == [a, b, c]
    assert text == "some text"
    assert blobs.data[a] == (b"some text", "text/plain")
    assert json.loads(blobs.data[b][0]) == {"k": [1, 2]}
    assert blobs.data[b][1] == "application/json"
    assert blobs.data[c] == (b"\x00\xff", "image/png")


def test_blob_not_mounted_is_not_readable(run_code, blobs):
    secret = blobs.add(b"not yours")
    code = (
        "from runtime import blobs\n"
        "def main(args):\n"
        "    try:\n"
        "        blobs.read_text(args['b'])\n"
        "    except blobs.BlobNotFound as exc:\n"
        "        return 'refused: ' + str(exc)\n"
    )
    result = run_code(code, args={"b": secret})
    assert result.output.startswith("refused")


def test_bad_kind_is_refused(run_code):
    code = "from runtime import blobs\ndef main(args):\n    blobs.write_bytes(b'x', 'nonsense')"
    result = run_code(code)
    assert result.status == "failed"
    assert result.error.type == "ValueError"


def test_blob_budget(run_code, blobs):
    blob_id = blobs.add(b"x" * 200_000)
    code = (
        "from runtime import blobs\n"
        "def main(args):\n"
        "    for _ in range(10):\n"
        "        blobs.read_bytes(args['b'])\n"
    )
    result = run_code(code, args={"b": blob_id}, input_blobs=[blob_id], blob_io_bytes=1_000_000)
    assert result.status == "failed"
    assert result.error.type == "BlobBudgetExceeded"


def test_blob_written_by_a_failed_run_is_still_listed(run_code):
    code = "from runtime import blobs\ndef main(args):\n    blobs.write_text('partial')\n    raise RuntimeError('later')"
    result = run_code(code)
    assert result.status == "failed"
    assert len(result.output_blobs) == 1
