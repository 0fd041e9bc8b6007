"""The statistics of one text, as a JSON-ready dict."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from .options import Options
from .stopwords import STOPWORDS
from .words import count_paragraphs, count_sentences, find_words, normalize

HISTOGRAM_BIN_WIDTH = 20
HISTOGRAM_BINS = 10  # 1-20 ... 181-200, then one open-ended bin for longer lines


def analyze(text: str, size_bytes: int, options: Options) -> dict[str, Any]:
    tokens = find_words(text)
    counts = Counter(normalize(token) for token in tokens)
    lines = split_lines(text)
    lengths = [len(line) for line in lines]
    sentences = count_sentences(text)
    stats: dict[str, Any] = {
        "chars": len(text),
        "bytes": size_bytes,
        "lines": len(lines),
        "blank_lines": sum(1 for line in lines if not line.strip()),
        "max_line_length": max(lengths, default=0),
        "paragraphs": count_paragraphs(text),
        "sentences": sentences,
        "words": len(tokens),
        "unique_words": len(counts),
        "avg_word_length": round(sum(map(len, tokens)) / len(tokens), 2) if tokens else 0.0,
        "avg_sentence_words": round(len(tokens) / sentences, 1) if sentences else 0.0,
        "reading_time_minutes": round(len(tokens) / options.words_per_minute, 1),
        "words_per_minute": options.words_per_minute,
        "stopwords_excluded": options.exclude_stopwords,
        "top_words": top_words(counts, options.top_n, options.exclude_stopwords),
    }
    if options.histogram:
        stats["line_length_histogram"] = histogram(lengths)
    return stats


def split_lines(text: str) -> list[str]:
    """Lines as `wc -l` sees them, plus a last line lacking its newline; no line ends.

    Only "\\n" ends a line (and a "\\r" before it is dropped), unlike
    str.splitlines, which also breaks on form feeds and Unicode separators.
    """
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def top_words(counts: Counter[str], top_n: int, exclude_stopwords: bool) -> list[list[Any]]:
    """The most frequent words as [word, count], most frequent first.

    Numbers are skipped: they rarely say what a text is about.
    """
    ranked = (
        [word, count]
        for word, count in counts.most_common()
        if any(ch.isalpha() for ch in word) and not (exclude_stopwords and word in STOPWORDS)
    )
    return list(itertools.islice(ranked, top_n))


def histogram(lengths: list[int]) -> dict[str, int]:
    """Lines per length range, from "0" up to the range of the longest line."""
    bins = Counter(min(-(-length // HISTOGRAM_BIN_WIDTH), HISTOGRAM_BINS + 1) for length in lengths)
    return {_bin_label(index): bins[index] for index in range(max(bins, default=-1) + 1)}


def _bin_label(index: int) -> str:
    if index == 0:
        return "0"
    low = (index - 1) * HISTOGRAM_BIN_WIDTH + 1
    if index > HISTOGRAM_BINS:
        return f"{low}+"
    return f"{low}-{index * HISTOGRAM_BIN_WIDTH}"
