"""stdout's buffer in guest memory on both images: the stdlib guest's is bridge.c's, the data
image's an `array` made with the image whose address its maker writes beside it
(python_wasm/dataimage.py `out_buffer`, runtime/_door.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from python_wasm import dataimage
from wasmrun.sandbox.engine import SandboxEngine

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)


def test_the_engine_reads_the_guests_stdout_buffer(engine: SandboxEngine) -> None:
    buffers = engine.image.buffers
    assert buffers.out_capacity == 64 * 1024 and buffers.out_buffer > 0 and buffers.out_len > 0


def test_prints_past_the_buffer_arrive_whole_and_in_order(run_code) -> None:
    code = "def main(args):\n    for i in range(5000):\n        print(i, 'y' * 30)\n    return 1\n"
    result = run_code(code, output_bytes=1 << 20)
    assert result.status == "completed"
    assert [int(line.split()[0]) for line in result.logs.splitlines()] == list(range(5000))


@pytest.mark.parametrize(
    ("text", "found"),
    [("84212544 84043168 65536", (84212544, 84043168, 65536)), ("", None), ("1 2", None), ("a b c", None),
     ("0 5 65536", None), ("-1 5 65536", None)],
)
def test_an_images_buffer_file_is_read_or_refused(tmp_path: Path, text: str, found: object) -> None:
    image = tmp_path / "image-0123.wasm"
    dataimage.buffers_path(image).write_text(text)
    assert dataimage.out_buffer(image) == found
    assert dataimage.out_buffer(tmp_path / "image-missing.wasm") is None
