"""`plt.show()` in a sandbox: there is no screen, so each open figure is saved
as /workspace/figure-N.png, shown as a display result (its PNG, as a notebook
shows it) and closed; the host also returns the run's images (PNG and SVG
files it finds in /workspace) with the result. Installed on the data image,
where matplotlib is pre-imported with the Agg backend.
"""

import base64
import os
import sys

from runtime import _display

WORKSPACE = "/workspace"


def _next_free(n: int) -> tuple[int, str]:
    while True:
        path = f"{WORKSPACE}/figure-{n}.png"
        if not os.path.exists(path):
            return n, path
        n += 1


def show(*args, **kwargs) -> None:
    import matplotlib.pyplot as plt

    n = 1
    for num in plt.get_fignums():
        n, path = _next_free(n)
        figure = plt.figure(num)
        figure.savefig(path, format="png")
        n += 1
        with open(path, "rb") as f:
            png = base64.b64encode(f.read()).decode("ascii")
        _display.send({"text/plain": _display.bundle_text(figure), "image/png": png})
    plt.close("all")


def install() -> None:
    import matplotlib.pyplot as plt

    plt.show = show


def release_fonts() -> None:
    """Close the font files matplotlib holds open, at the end of a session's run.

    FreeType keeps each font it loaded open (matplotlib caches the FT2Font objects),
    and a file descriptor is the run's own: a session's next run has other ones, so
    a cached font would read from a closed descriptor ("failed to load glyph") or
    from whatever file the next run opened under that number. Emptying the caches
    now closes them while their descriptors are valid; the next run that draws
    text loads its fonts again. Nothing is imported: a no-op unless matplotlib is.
    With runtime/_charts.py's fonts (read from memory, no descriptor) in place, the
    fonts stay made for the next run."""
    charts = sys.modules.get("runtime._charts")
    if charts is not None and not charts.holds_files():
        return
    font_manager = sys.modules.get("matplotlib.font_manager")
    if font_manager is not None:
        font_manager._get_font.cache_clear()
    mathtext = sys.modules.get("matplotlib.mathtext")
    parse = getattr(getattr(mathtext, "MathTextParser", None), "_parse_cached", None)
    if parse is not None and hasattr(parse, "cache_clear"):  # its parses hold their fonts
        parse.cache_clear()
