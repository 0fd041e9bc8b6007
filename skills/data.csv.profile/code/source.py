"""A blob read as text lines in chunks, so a large CSV is never held whole in memory."""

from __future__ import annotations

import codecs
import csv
import itertools
from collections.abc import Iterator

from runtime import blobs

CHUNK_BYTES = 1 << 20
# Tried in this order; on a tie the earlier one wins, so plain CSV stays ",".
CANDIDATE_DELIMITERS = (",", "\t", ";", "|")


def read_rows(blob_id: str, encoding: str, delimiter: str | None) -> tuple[str, Iterator[list[str]]]:
    """The delimiter used and the blob's CSV records, blank lines skipped."""
    lines = iter_lines(blob_id, encoding)
    # Peek up to the header line; the blank lines before it still go to csv so
    # that its line numbers in error messages stay right.
    leading: list[str] = []
    for line in lines:
        leading.append(line)
        if line.strip():
            break
    chosen = delimiter or detect_delimiter(leading[-1] if leading else "")
    return chosen, _records(itertools.chain(leading, lines), chosen)


def _records(lines: Iterator[str], delimiter: str) -> Iterator[list[str]]:
    reader = csv.reader(lines, delimiter=delimiter)
    try:
        for row in reader:
            if not _is_blank_line(row):
                yield row
    except csv.Error as exc:
        # e.g. a field over csv's size limit, or a stray quote in strict dialects.
        raise ValueError(f"CSV parse error at line {reader.line_num}: {exc}") from None


def _is_blank_line(row: list[str]) -> bool:
    # csv yields [] for an empty line and ["  "] for a whitespace-only one, but
    # [""] for a quoted empty field, which is a real (one-column) record.
    return not row or (len(row) == 1 and row[0] != "" and not row[0].strip())


def iter_lines(blob_id: str, encoding: str) -> Iterator[str]:
    """The blob's lines, each ending in "\\n" except perhaps the last.

    Splitting only on "\\n" (not str.splitlines) keeps exotic line breaks such as
    U+2028 inside their fields; csv itself handles "\\r\\n" and quoted newlines.
    """
    # A UTF-8 byte-order mark would otherwise become part of the first column name.
    decoder = codecs.getincrementaldecoder("utf-8-sig" if encoding == "utf-8" else encoding)()
    offset = 0
    pending = ""
    while True:
        chunk = _read(blob_id, offset)
        try:
            text = pending + decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"blob {blob_id} is not valid {encoding} text near byte {offset + exc.start}; "
                'pass "encoding" (e.g. "latin-1")'
            ) from None
        offset += len(chunk)
        lines = text.split("\n")
        pending = lines.pop()
        for line in lines:
            yield line + "\n"
        if not chunk:
            break
    if pending:
        yield pending


def _read(blob_id: str, offset: int) -> bytes:
    try:
        return blobs.read_bytes(blob_id, offset, CHUNK_BYTES)
    except KeyError:
        # The runtime only lets a run read blobs it was given.
        raise ValueError(
            f"blob {blob_id} was not found or not mounted in this run; list it in input_blobs"
        ) from None


def detect_delimiter(header_line: str) -> str:
    """The candidate that occurs most often in the header line ("," if none does)."""
    counts = [(header_line.count(c), -i, c) for i, c in enumerate(CANDIDATE_DELIMITERS)]
    count, _, best = max(counts)
    return best if count else ","
