"""text.stats: counts, averages, reading time and frequent words of a text.

`main(args)` measures the `text` arg or a text blob and returns a small dict.
"""

from __future__ import annotations

import json
from typing import Any

from runtime import log

from .analyze import analyze
from .options import parse_options
from .source import load_text

# The protocol wants `output` under 4 KB; stay below it with room to spare.
OUTPUT_BUDGET_BYTES = 3500
MAX_WORD_CHARS = 40


def main(args: dict[str, Any]) -> dict[str, Any]:
    options = parse_options(args)
    text, size_bytes = load_text(options)
    stats = analyze(text, size_bytes, options)
    stats["top_words"] = [[_clip(word), count] for word, count in stats["top_words"]]
    out = {"summary": _sentence(stats), **stats}
    # Long non-ASCII words can overflow the budget; the rarest of the top words go first.
    while out["top_words"] and len(json.dumps(out, ensure_ascii=False).encode("utf-8")) > OUTPUT_BUDGET_BYTES:
        out["top_words"].pop()
    log.info(out["summary"])
    return out


def _sentence(stats: dict[str, Any]) -> str:
    if not stats["chars"]:
        return "The text is empty."
    if not stats["words"]:
        return f"The text has {_plural(stats['chars'], 'character')} but no words."
    minutes = stats["reading_time_minutes"]
    text = (
        f"{_plural(stats['words'], 'word')}, {_plural(stats['sentences'], 'sentence')}, "
        f"{_plural(stats['lines'], 'line')}; "
        + (f"about {minutes:g} min to read" if minutes >= 1 else "under a minute to read")
    )
    if stats["top_words"]:
        word, count = stats["top_words"][0]
        text += f"; most frequent word: {word!r} ({count}x)"
    return text + "."


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _clip(word: str) -> str:
    return word if len(word) <= MAX_WORD_CHARS else word[: MAX_WORD_CHARS - 1] + "…"
