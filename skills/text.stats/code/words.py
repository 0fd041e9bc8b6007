"""Words and sentences found by regular expressions: approximate, but language-agnostic."""

from __future__ import annotations

import re

# Letters or digits, joined by inner apostrophes or hyphens ("don't", "well-known");
# a number with separators ("3.14", "1,000") stays one word.
_WORD = re.compile(r"[0-9]+(?:[.,][0-9]+)+|[^\W_]+(?:['’-][^\W_]+)*")
# Terminal punctuation followed by whitespace, a closing quote/bracket or the end;
# or a blank line, so headings and list items without a full stop end a sentence too.
_SENTENCE_END = re.compile(r"[.!?…。！？]+(?=[\s\"'”’)\]]|$)|\n[ \t]*\n")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_HAS_WORD = re.compile(r"[^\W_]")


def find_words(text: str) -> list[str]:
    return _WORD.findall(text)


def normalize(word: str) -> str:
    """The form words are counted under: case-folded, curly apostrophes made straight."""
    return word.casefold().replace("’", "'")


def count_sentences(text: str) -> int:
    return sum(1 for piece in _SENTENCE_END.split(text) if _HAS_WORD.search(piece))


def count_paragraphs(text: str) -> int:
    """Blocks of text separated by blank lines."""
    return sum(1 for block in _PARAGRAPH_BREAK.split(text) if block.strip())
