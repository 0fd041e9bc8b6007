"""A run's display results as MCP content: each display's text (its text/plain, else
the text of its HTML or Markdown) as text content, and its PNG as image content, in
the order the run showed them. The structured result keeps every form."""

from __future__ import annotations

import html
import re

import msgspec
from mcp import types

from wasmrun.protocol.types import Display, RunResult

MAX_DISPLAY_TEXT = 4000  # characters of one display's text content
MAX_DISPLAY_BLOCKS = 16  # displays given as content (all of them stay in the structured result)
_TAG = re.compile(r"<(script|style)\b.*?</\1\s*>|<[^>]*>", re.DOTALL | re.IGNORECASE)


def display_text(display: Display) -> str:
    data = display.data
    for mime in ("text/plain", "text/markdown", "text/html"):
        value = data.get(mime)
        if isinstance(value, str):
            text = html.unescape(_TAG.sub(" ", value)) if mime == "text/html" else value
            break
    else:
        text = ""
    if len(text) > MAX_DISPLAY_TEXT:
        text = text[:MAX_DISPLAY_TEXT] + f"… ({len(text)} chars; all of it is in the structured result)"
    forms = sorted(set(data) - {"text/plain"}) + sorted(f"{m} in blob {b}" for m, b in display.blobs.items())
    head = "result" if display.main else "display"
    return f"{head}:\n{text}" + (f"\n[forms: {', '.join(forms)}]" if forms else "")


def display_content(result: RunResult, max_pictures: int) -> tuple[list[types.ContentBlock], set[str]]:
    """The content blocks of `result`'s displays, and the base64 PNGs among them
    (a picture also saved as a file is not given twice)."""
    blocks: list[types.ContentBlock] = []
    pictures: set[str] = set()
    displays = result.displays if result.displays is not msgspec.UNSET else []
    for display in displays[:MAX_DISPLAY_BLOCKS]:
        blocks.append(types.TextContent(text=display_text(display)))
        png = display.data.get("image/png")
        if isinstance(png, str) and len(pictures) < max_pictures and png not in pictures:
            pictures.add(png)
            blocks.append(types.ImageContent(data=png, mime_type="image/png"))
    return blocks, pictures
