"""Display results, as a notebook shows them: `display(obj)`, a script's last
expression and `plt.show()` each send the host a bundle of MIME forms.

A bundle is {"data": {mime: value}, "main": bool, "blobs": {mime: blob id}}:
`text/plain` always (the object's repr), and whatever IPython's display
protocol gives (`_repr_mimebundle_`, `_repr_html_`, `_repr_markdown_`,
`_repr_svg_`, `_repr_png_`, `_repr_jpeg_`, `_repr_json_`, `_repr_latex_`);
a matplotlib figure is its PNG. Images are base64 text. A form that would take
one display past INLINE_BYTES is written as a blob (its raw bytes) and named
in `blobs` instead. Each display goes to the host as it is made (the `log`
host call at DISPLAY_LEVEL, wasmrun/abi.py), so a streamed run sends it at
once; the host checks it (wasmrun/sandbox/displays.py).

`display` is a builtin here (no IPython in the sandbox), and
`from IPython.display import display, HTML, Markdown, Image, SVG, JSON` works
through a small stand-in module, made only when imported and only when no
real IPython is installed.
"""

from __future__ import annotations

import base64
import builtins
import importlib.abc
import importlib.machinery
import io
import json
import sys
import types

import _wasmrun
from runtime import _stdio

DISPLAY_LEVEL = 0x44495350  # wasmrun/abi.py DISPLAY_LEVEL ("DISP")
MAX_DISPLAYS = 64  # wasmrun/abi.py MAX_DISPLAYS: a run's displays past it are dropped
INLINE_BYTES = 512 * 1024  # a display's forms inline at most; the host's bound is abi.MAX_DISPLAY_BYTES
MAX_TEXT = 100_000  # characters of a text/plain form
_BINARY = ("image/png", "image/jpeg", "image/gif", "image/webp")
_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
)
_sent = 0
_dropped = 0


def _method(obj, name: str):
    """The class's own method (IPython's get_real_method): never an instance's
    __getattr__ answering every name, never a class object itself."""
    if isinstance(obj, type):
        return None
    method = getattr(type(obj), name, None)
    return method if callable(method) else None


def bundle_text(obj) -> str:
    return _text(obj)


def _text(obj) -> str:
    try:
        text = repr(obj)
    except Exception as exc:
        text = f"<{type(obj).__name__} object (its repr failed: {type(exc).__name__})>"
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _is_figure(obj) -> bool:
    try:
        return str(type(obj).__module__).startswith("matplotlib.figure")
    except Exception:  # a metaclass whose __module__ raises
        return False


def _figure_png(fig) -> str | None:
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png")
    except Exception:
        return None
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _form(mime: str, value):
    """A form as JSON: images base64 text, JSON as it is, other forms text."""
    if value is None:
        return None
    if isinstance(value, tuple) and len(value) == 2:  # (data, metadata)
        value = value[0]
    if mime in _BINARY:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return base64.b64encode(bytes(value)).decode("ascii")
        return value.replace("\n", "") if isinstance(value, str) else None
    if mime == "application/json" or mime.endswith("+json"):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def bundle(obj) -> dict:
    """The MIME forms of `obj`, text/plain first."""
    data: dict = {}
    method = _method(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            found = method(obj, include=None, exclude=None)
        except TypeError:
            try:
                found = method(obj)
            except Exception:
                found = None
        except Exception:
            found = None
        if isinstance(found, tuple):
            found = found[0]
        if isinstance(found, dict):
            for mime, value in found.items():
                if isinstance(mime, str):
                    data[mime] = _form(mime, value)
    for mime, name in _METHODS:
        method = _method(obj, name)
        if mime in data or method is None:
            continue
        try:
            data[mime] = _form(mime, method(obj))
        except Exception:  # IPython too shows what the other methods give
            continue
    if "image/png" not in data and _is_figure(obj):
        data["image/png"] = _figure_png(obj)
    plain = data.pop("text/plain", None)
    forms = {"text/plain": plain if isinstance(plain, str) else _text(obj)}
    forms.update((mime, value) for mime, value in data.items() if value is not None)
    return forms


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, default=str)


def _size(value) -> int:
    """Bytes of the form's JSON, -1 when it has none (it is left out)."""
    try:
        return len(_json(value).encode("utf-8", "backslashreplace"))
    except (ValueError, TypeError, RecursionError):
        return -1


def _blob(mime: str, value) -> str | None:
    try:
        if mime in _BINARY:
            data = base64.b64decode(value)
        elif isinstance(value, str):
            data = value.encode("utf-8", "backslashreplace")
        else:
            data = _json(value).encode("utf-8", "backslashreplace")
        return _wasmrun.blob_write(data, mime)
    except Exception:  # the blob budget spent, say: the form is left out
        return None


def send(forms: dict, main: bool = False) -> None:
    """Hand one display to the host (at most MAX_DISPLAYS a run; the rest are counted)."""
    global _sent, _dropped
    if _sent >= MAX_DISPLAYS:
        _dropped += 1
        return
    _sent += 1
    data: dict = {}
    blobs: dict = {}
    room = INLINE_BYTES
    for mime, value in forms.items():
        size = _size(value)
        if size < 0:
            continue
        if size <= room:
            data[mime] = value
            room -= size
        else:
            blob_id = _blob(mime, value)
            if blob_id is not None:
                blobs[mime] = blob_id
    frame = _json({"data": data, "main": main, "blobs": blobs})
    _stdio.flush()  # the display lands after what the code printed before it
    # A lone surrogate has no UTF-8: written as its escape's text.
    _wasmrun.log(DISPLAY_LEVEL, frame.encode("utf-8", "backslashreplace").decode("utf-8"))


def display(*objs, include=None, exclude=None, metadata=None, transient=None, display_id=None, raw=False,
            clear=False, **kwargs) -> None:
    """IPython's display(): each object as a display result, in order."""
    for obj in objs:
        if raw and isinstance(obj, dict):
            send({k: _form(k, v) for k, v in obj.items() if isinstance(k, str) and _form(k, v) is not None})
        else:
            send(_safe_bundle(obj))


def _safe_bundle(obj) -> dict:
    """bundle(), or the object's text alone when its display methods fail in ways
    bundle() does not expect: showing a value never fails the run."""
    try:
        return bundle(obj)
    except Exception:
        return {"text/plain": _text(obj)}


def result(value) -> None:
    """A script's last expression, as a notebook's cell result (main)."""
    if value is not None:
        send(_safe_bundle(value), main=True)


def end_run() -> list[str]:
    """Reset the run's count; a warning when displays were dropped."""
    global _sent, _dropped
    if not _sent:  # most runs show nothing: their page of globals stays untouched
        return []
    dropped, _sent, _dropped = _dropped, 0, 0
    if not dropped:
        return []
    return [f"{dropped} display{'s' if dropped != 1 else ''} past the limit of {MAX_DISPLAYS} a run were dropped"]


# --- IPython.display, for code written in a notebook --------------------------------------


class _Data:
    mime = "text/plain"

    def __init__(self, data=None, url=None, filename=None, **kwargs) -> None:
        if data is None and filename is not None:
            with open(filename, "rb" if self.mime in _BINARY else "r") as f:
                data = f.read()
        self.data = data if data is not None else (url or "")

    def __repr__(self) -> str:
        return f"<IPython.core.display.{type(self).__name__} object>"


class HTML(_Data):
    mime = "text/html"

    def _repr_html_(self):
        return self.data


class Markdown(_Data):
    mime = "text/markdown"

    def _repr_markdown_(self):
        return self.data


class SVG(_Data):
    mime = "image/svg+xml"

    def _repr_svg_(self):
        return self.data


class Latex(_Data):
    mime = "text/latex"

    def _repr_latex_(self):
        return self.data


class JSON(_Data):
    mime = "application/json"

    def _repr_json_(self):
        return self.data


class Image(_Data):
    mime = "image/png"

    def __init__(self, data=None, url=None, filename=None, format=None, **kwargs) -> None:
        name = (filename or "").lower()
        if (format or "").lower() in ("jpeg", "jpg") or name.endswith((".jpg", ".jpeg")):
            self.mime = "image/jpeg"
        super().__init__(data, url, filename)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {self.mime: self.data}


def _shim(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "wasmrun's stand-in for IPython's display functions (no IPython here)")
    if name == "IPython":
        module.get_ipython = lambda: None  # code asking "am I in a notebook?" hears no
        module.display = display
        return module
    module.display = display
    module.clear_output = lambda wait=False: None
    for cls in (HTML, Markdown, SVG, Latex, JSON, Image):
        setattr(module, cls.__name__, cls)
    return module


class _ShimFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: found only when no real IPython is installed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in ("IPython", "IPython.display"):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname == "IPython")
        return None

    def create_module(self, spec):
        return _shim(spec.name)

    def exec_module(self, module) -> None:
        if module.__name__ == "IPython":
            module.__path__ = []


def install() -> None:
    builtins.display = display
    sys.meta_path.append(_ShimFinder())
