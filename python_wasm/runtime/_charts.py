"""matplotlib's text at native speed on the data image (issue #49, docs/data-speed.md).

What a chart's text cost in the sandbox (386 ms of `canvas.draw()` against 36 ms
natively) was FreeType reading its font through a Python file: matplotlib's FT2Font,
given a path, opens the file with `open()` and FreeType's every read of the face
(each glyph's outline, each table HarfBuzz asks for on each layout) is a Python
`seek` and `read`, each a WASI call. One `set_text("0.5")` took 10 ms against
0.25 ms natively; on the same font's bytes in memory (an `io.BytesIO`) it takes
0.25 ms in the guest too.

`install()` (called by the image's prelude) therefore replaces
`matplotlib.font_manager._get_font`, the cache that every renderer (Agg, SVG, PDF,
PS, mathtext) gets its FT2Font objects from, by one that gives FT2Font the file's
bytes in memory (`FontBytes`, a BytesIO; once the font is made it stands for its
path as `font.fname`, so the PDF and PS backends find the file as before). The bytes of the
fonts under matplotlib's own data folder (a read-only mount that is the image's own)
are kept for good; any other font file is read when its FT2Font is made, as the
original reads it. `warm()` then draws a figure with the usual text in it (ticks,
labels, title, legend, a mathtext label) and saves it as PNG and SVG while the
image is made, so that the fonts, the font manager's lookups and the mathtext
parser are already in the image's memory: a run's first chart finds them made.

`text_get_font` gives Text's layout each font's sfnt tables read once (they were
read again, as a new dict, for each text drawn).

A font held in memory holds no file descriptor, so a session's fonts can stay
cached from one run to the next (`holds_files()` says whether any font does).
"""

from __future__ import annotations

import io
import os
import sys
from functools import lru_cache

MPL_DATA_MARK = "/matplotlib/mpl-data/"  # the image's own (read-only) fonts: their bytes are kept
_kept: dict[str, bytes] = {}
_original_get_font = None  # matplotlib's, kept for `installed()` and the tests


class FontBytes(io.BytesIO):
    """A font file's bytes, readable as a file by FreeType, named by the file's path.
    Not os.PathLike: given a path-like object, FT2Font opens the path."""

    def __init__(self, path: str, data: bytes) -> None:
        super().__init__(data)
        self.name = path


class FontFile(FontBytes):
    """What FontBytes becomes once its FT2Font is made (`opened`): FT2Font gives it
    as `font.fname`, and there it stands for the path, as the path did before
    (os.fspath, str, equality and hash are the path's), so the PDF and PS backends
    and FontPath(font.fname, ...) find the file as before."""

    def __fspath__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return repr(self.name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FontBytes):
            return self.name == other.name
        if isinstance(other, (str, os.PathLike)):
            return self.name == os.fspath(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)


def _font(path, **kwargs):
    """ft2font.FT2Font on the bytes of the file at `path`, its fname standing for the path."""
    from matplotlib import ft2font

    data = font_bytes(path)
    font = ft2font.FT2Font(data, **kwargs)
    data.__class__ = FontFile
    return font


def font_bytes(path) -> FontBytes:
    """The font at `path` as FontBytes: from memory for matplotlib's own fonts."""
    name = os.fsdecode(os.fspath(path))
    data = _kept.get(name)
    if data is None:
        with open(name, "rb") as f:
            data = f.read()
        if MPL_DATA_MARK in name:
            _kept[name] = data
    return FontBytes(name, data)


@lru_cache(64)
def _get_font(font_filepaths, *, _kerning_factor, thread_id, enable_last_resort):
    """matplotlib 3.11's font_manager._get_font, its fonts read from memory."""
    from matplotlib import cbook
    from matplotlib.font_manager import _cached_realpath

    (first_fontpath, first_fontindex), *rest = font_filepaths
    fallback_list = [
        _font(fpath, face_index=index, _kerning_factor=_kerning_factor)
        for fpath, index in rest
    ]
    last_resort_path = _cached_realpath(cbook._get_data_path("fonts", "ttf", "LastResortHE-Regular.ttf"))
    try:
        last_resort_index = font_filepaths.index((last_resort_path, 0))
    except ValueError:
        last_resort_index = -1
        if enable_last_resort:
            fallback_list.append(_font(last_resort_path, _kerning_factor=_kerning_factor, _warn_if_used=True))
            last_resort_index = len(fallback_list)
    font = _font(first_fontpath, face_index=first_fontindex, _fallback_list=fallback_list,
                 _kerning_factor=_kerning_factor)
    if last_resort_index == 0:
        font.set_charmap(0)
    elif last_resort_index > 0:
        fallback_list[last_resort_index - 1].set_charmap(0)
    return font


class FontTables:
    """What Text._get_layout asks of a font: its sfnt tables (OS/2, hhea, head), each read
    once per font. FT2Font.get_sfnt_table builds a new dict on each call, 0.12 ms in the
    guest (0.03 ms natively), and each text's layout asks for two or three."""

    __slots__ = ("_font", "_tables")

    def __init__(self, font) -> None:
        self._font = font
        self._tables: dict = {}

    def get_sfnt_table(self, name: str):
        try:
            return self._tables[name]
        except KeyError:
            table = self._tables[name] = self._font.get_sfnt_table(name)
            return table


_font_tables: dict[int, FontTables] = {}  # by id(FT2Font); each holds its font (as _get_font's cache does)


def text_get_font(font_filepaths) -> FontTables:
    """matplotlib.text's `get_font` (its one use: the font's tables in Text._get_layout)."""
    from matplotlib import font_manager

    font = font_manager.get_font(font_filepaths)
    tables = _font_tables.get(id(font))
    if tables is None or tables._font is not font:
        if len(_font_tables) >= 64:
            _font_tables.clear()
        tables = _font_tables[id(font)] = FontTables(font)
    return tables


def install() -> None:
    """Put `_get_font` in place of matplotlib's, and `text_get_font` in matplotlib.text
    (their signatures and uses are 3.11's; another version keeps its own)."""
    global _original_get_font
    import matplotlib
    from matplotlib import font_manager, text

    if not matplotlib.__version__.startswith("3.11."):
        return
    if font_manager._get_font is not _get_font:
        _original_get_font = font_manager._get_font
        font_manager._get_font = _get_font
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_get_font.cache_clear)
    text.get_font = text_get_font


def installed() -> bool:
    font_manager = sys.modules.get("matplotlib.font_manager")
    return font_manager is not None and font_manager._get_font is _get_font


def holds_files() -> bool:
    """Whether a cached font reads from a file (matplotlib's own _get_font in place)."""
    return not installed()


def warm() -> None:
    """Draw and save, in memory, a figure with the text a chart usually has (then close
    it): the image keeps the fonts, the font lookups and the mathtext parser made."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0.0, 0.5, 1.0], [1.0, 3.0, 2.0], label="a line")
    ax.bar([0.25, 0.75], [1.5, 2.5], width=0.2, label="bars")
    ax.set_title("A title", fontweight="bold")
    ax.set_xlabel("x label")
    ax.set_ylabel(r"$y^2$ label")
    ax.legend()
    for fmt in ("png", "svg"):
        fig.savefig(io.BytesIO(), format=fmt)
    plt.close(fig)
