"""The text to measure: the `text` arg, or a blob decoded with the given encoding."""

from __future__ import annotations

from runtime import blobs

from .options import Options


def load_text(options: Options) -> tuple[str, int]:
    """The text and its size in bytes (as stored, or UTF-8 for an inline text)."""
    if options.text is not None:
        return options.text, len(options.text.encode("utf-8"))
    try:
        raw = blobs.read_bytes(options.blob_id)
    except KeyError:
        # The runtime only lets a run read blobs it was given.
        raise ValueError(
            f"blob {options.blob_id} was not found or not mounted in this run; list it in input_blobs"
        ) from None
    # A UTF-8 byte-order mark is not part of the text.
    codec = "utf-8-sig" if options.encoding == "utf-8" else options.encoding
    try:
        return raw.decode(codec), len(raw)
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"blob {options.blob_id} is not valid {options.encoding} text (bad byte at {exc.start}); "
            'pass "encoding" (e.g. "latin-1")'
        ) from None
