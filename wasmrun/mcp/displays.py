"""A run's display results as MCP content: each display's text (its text/plain, else
the text of its HTML or Markdown) as text content, and its PNG as image content, in
the order the run showed them. The structured result keeps every form."""

from __future__ import annotations

import html
import re

import msgspec
from mcp import types

from wasmrun.protocol.types import Display, ExecutionResult

MAX_DISPLAY_TEXT = 4000  # characters of one display's text content
MAX_DISPLAY_BLOCKS = 16  # displays given as content (all of them stay in the structured result)
_NAME_CHAR = re.compile(r"\w")
HIDDEN = ("script", "style")  # elements whose content is not text


def html_text(markup: str) -> str:
    """The text of HTML: each tag a space, script and style elements gone, entities
    decoded. One pass (a guest's HTML is hostile: a regex with a lazy `.*?` or a
    `<[^>]*>` rescans the rest of the text for every unclosed `<`, hours for 1 MB)."""
    lower = markup.lower()
    parts: list[str] = []
    at = 0
    while (start := markup.find("<", at)) >= 0:
        parts.append(markup[at:start])
        end = start
        for name in HIDDEN:
            after = start + 1 + len(name)
            if lower.startswith(name, start + 1) and not _NAME_CHAR.match(markup, after):
                end = lower.find("</" + name, after)
                break
        close = markup.find(">", end) if end >= 0 else -1
        if close < 0:  # unclosed: the rest is inside the tag
            at = len(markup)
            break
        parts.append(" ")
        at = close + 1
    parts.append(markup[at:])
    return html.unescape("".join(parts))


def display_text(display: Display) -> str:
    data = display.data
    for mime in ("text/plain", "text/markdown", "text/html"):
        value = data.get(mime)
        if isinstance(value, str):
            text = html_text(value) if mime == "text/html" else value
            break
    else:
        text = ""
    if len(text) > MAX_DISPLAY_TEXT:
        text = text[:MAX_DISPLAY_TEXT] + f"… ({len(text)} chars; all of it is in the structured result)"
    forms = sorted(set(data) - {"text/plain"}) + sorted(f"{m} in blob {b}" for m, b in display.blobs.items())
    head = "result" if display.main else "display"
    return f"{head}:\n{text}" + (f"\n[forms: {', '.join(forms)}]" if forms else "")


def display_content(result: ExecutionResult, max_pictures: int) -> tuple[list[types.ContentBlock], set[str]]:
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
