"""Charts on the data image (issue #49, docs/data-speed.md): matplotlib's fonts are read from
memory and made when the image is made (python_wasm/runtime/_charts.py), and `plt.show()`
draws each figure once. What a user would notice: a run's chart reads no font file, its
PNG and SVG are the ones matplotlib's own font loading gives (same size, same pixels),
the PDF backend still embeds the font, a font file of the user's own still works, and a
shown figure's display and its returned image are the same picture, drawn once.
Timings are the bench's (wasmrun/bench/chartrows.py), never asserted here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import DataSandboxEngine, Limits, RunRequest, RunResult

pytestmark = pytest.mark.images("data")  # the data image only (tests/images.py)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> FileBlobStore:
    return FileBlobStore(tmp_path_factory.mktemp("blobs"))


@pytest.fixture(scope="module")
def engine(store: FileBlobStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataSandboxEngine]:
    with DataSandboxEngine(store, tmp_path_factory.mktemp("work")) as eng:
        yield eng


def run(engine: DataSandboxEngine, code: str) -> RunResult:
    result = engine.run(RunRequest(kind="code", code=code, limits=Limits(timeout_ms=60_000)))
    assert result.error is None, (result.error, result.logs)
    return result


def output(engine: DataSandboxEngine, code: str) -> Any:
    return json.loads(run(engine, code).output_json)


CHART = (
    "import io\nimport matplotlib.pyplot as plt\n"
    "plt.rcParams['svg.hashsalt'] = 'fixed'  # the SVG's ids the same from one save to the next\n"
    "def chart(fmt):\n"
    "    fig, ax = plt.subplots(figsize=(4, 3), dpi=80)\n"
    "    ax.plot([0, 1, 2, 3], [1, 4, 2, 3], label='a line')\n"
    "    ax.set_title('Quarterly figures')\n    ax.set_xlabel('quarter')\n    ax.set_ylabel(r'$\\sigma^2$ units')\n"
    "    ax.legend()\n"
    "    buf = io.BytesIO()\n"
    "    fig.savefig(buf, format=fmt, metadata={'png': {'Software': None}, 'svg': {'Date': None}}.get(fmt))\n"
    "    plt.close(fig)\n    return buf.getvalue()\n"
)


def test_a_runs_chart_reads_no_font_file(engine: DataSandboxEngine) -> None:
    """The image holds the fonts: a fresh run's chart (title, labels, legend, mathtext) opens
    no .ttf file and makes no font (matplotlib's font cache hits)."""
    got = output(engine, CHART + (
        "import builtins, io as _io\nfrom matplotlib import font_manager\n"
        "opened = []\n_open = _io.open\n"
        "def spy(file, *a, **k):\n    opened.append(str(file))\n    return _open(file, *a, **k)\n"
        "def main(args):\n"
        "    before = font_manager._get_font.cache_info()\n"
        "    _io.open = builtins.open = spy\n"
        "    try:\n        png = chart('png')\n        svg = chart('svg')\n"
        "    finally:\n        _io.open = builtins.open = _open\n"
        "    after = font_manager._get_font.cache_info()\n"
        "    return {'fonts': [f for f in opened if f.endswith(('.ttf', '.otf', '.afm'))], 'cached': before.currsize,\n"
        "            'misses': after.misses - before.misses, 'hits': after.hits - before.hits, 'png': len(png)}\n"
    ))
    assert got["fonts"] == [], got
    assert got["cached"] > 0 and got["misses"] == 0 and got["hits"] > 0, got
    assert got["png"] > 1000


def test_the_pictures_are_matplotlibs_own(engine: DataSandboxEngine) -> None:
    """The same figure through matplotlib's own font loading (a font read from its file):
    the PNG has the same size and the same pixels, the SVG is the same text."""
    got = output(engine, CHART + (
        "import numpy as np\nfrom matplotlib import font_manager, image\nimport runtime._charts as charts\n"
        "def main(args):\n"
        "    ours = chart('png'), chart('svg')\n"
        "    assert charts.installed() and charts._original_get_font is not None\n"
        "    font_manager._get_font = charts._original_get_font\n"
        "    try:\n        theirs = chart('png'), chart('svg')\n"
        "    finally:\n        font_manager._get_font.cache_clear()\n        font_manager._get_font = charts._get_font\n"
        "    a, b = (image.imread(io.BytesIO(p), format='png') for p in (ours[0], theirs[0]))\n"
        "    return {'sizes': [len(ours[0]), len(theirs[0])], 'shape': [a.shape, b.shape],\n"
        "            'pixels_differ': int((a != b).any(axis=-1).sum()), 'ink': int((a[..., :3] < 0.5).any(axis=-1).sum()),\n"
        "            'svg_same': ours[1] == theirs[1]}\n"
    ))
    assert got["sizes"][0] == got["sizes"][1], got
    assert got["shape"][0] == got["shape"][1] == [240, 320, 4], got
    assert got["pixels_differ"] == 0, got
    assert got["ink"] > 500, got  # the text and the line are drawn
    assert got["svg_same"], got


def test_pdf_embeds_the_font_and_a_users_own_font_works(engine: DataSandboxEngine) -> None:
    """font.fname still stands for the font's path: the PDF backend embeds DejaVu Sans;
    a font file copied into /workspace draws (read from its file, as before)."""
    got = output(engine, CHART + (
        "import shutil\nfrom matplotlib import font_manager\n"
        "def main(args):\n"
        "    pdf = chart('pdf')\n"
        "    path = shutil.copy(font_manager.findfont('DejaVu Sans Mono'), '/workspace/mine.ttf')\n"
        "    fig, ax = plt.subplots(figsize=(2, 1), dpi=50)\n"
        "    ax.set_axis_off()\n    fig.text(0.1, 0.4, 'Mine', fontproperties=font_manager.FontProperties(fname=path))\n"
        "    buf = io.BytesIO()\n    fig.savefig(buf, format='png')\n    plt.close(fig)\n"
        "    from matplotlib import image\n    px = image.imread(io.BytesIO(buf.getvalue()), format='png')\n"
        "    return {'pdf_font': b'DejaVuSans' in pdf, 'pdf': pdf[:5].decode(),\n"
        "            'ink': int((px[..., :3] < 0.5).any(axis=-1).sum()),\n"
        "            'fname': str(font_manager.get_font(path).fname)}\n"
    ))
    assert got["pdf"] == "%PDF-" and got["pdf_font"], got
    assert got["ink"] > 20, got
    assert got["fname"] == "/workspace/mine.ttf", got


def test_show_draws_the_figure_once_and_shares_its_png(engine: DataSandboxEngine, store: FileBlobStore) -> None:
    """plt.show(): one draw per figure; the display's PNG is the returned image's bytes."""
    result = run(engine, (
        "import matplotlib.pyplot as plt\nfrom matplotlib.figure import Figure\n"
        "draws = []\n_draw = Figure.draw\n"
        "def counting(self, renderer):\n    draws.append(self.number)\n    return _draw(self, renderer)\n"
        "Figure.draw = counting\n"
        "plt.plot([1, 2, 3], [4, 1, 2])\nplt.title('three points')\n"
        "plt.figure()\nplt.bar(['a', 'b'], [2, 3])\n"
        "plt.show()\nFigure.draw = _draw\n"
        "def main(args):\n    return draws\n"
    ))
    assert json.loads(result.output_json) == [1, 2]
    assert [i.name for i in result.images] == ["figure-1.png", "figure-2.png"]
    assert len(result.displays) == 2
    for display, figure in zip(result.displays, result.images, strict=True):
        png = base64.b64decode(display.data["image/png"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert store.read(figure.blob_id, 0, len(png) + 1) == png
