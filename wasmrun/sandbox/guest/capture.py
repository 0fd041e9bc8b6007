"""Bounded capture of a run's stdout, stderr and runtime.log lines.

A run may print gigabytes; the host keeps the first and last halves of the
limit and counts what it dropped in between.
"""

from __future__ import annotations

from wasmrun.blobs.sampling import utf8_head, utf8_tail


class HeadTail:
    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        head, tail = self.kept(len(data))
        self.write_parts(len(data), data[:head], data[len(data) - tail :])

    def kept(self, total: int) -> tuple[int, int]:
        """How many leading and trailing bytes of a `total`-byte write would be
        kept: a writer need not read (or copy) the rest."""
        head = min(total, max(0, self.head_limit - len(self.head)))
        return head, min(total - head, self.tail_limit)

    def write_parts(self, total: int, head: bytes, tail: bytes) -> None:
        """Record a `total`-byte write given only its first `len(head)` and last
        `len(tail)` bytes, as `kept(total)` asked for."""
        self.total += total
        self.head += head
        if len(head) + len(tail) < total:  # the skipped middle pushed out the old tail
            self.tail = bytearray(tail)
        else:
            self.tail += tail
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def cut(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        if not self.cut:  # head and tail meet: decode them as one (a character may span both)
            return (self.head + self.tail).decode("utf-8", "replace")
        # Cut ends: drop a character split by the cut rather than show it as U+FFFD.
        head = utf8_head(bytes(self.head)).decode("utf-8", "replace")
        tail = utf8_tail(bytes(self.tail)).decode("utf-8", "replace")
        return f"{head}\n[... {self.cut} bytes of output cut ...]\n{tail}"


LEVEL_NAMES = {10: "DEBUG", 20: "INFO", 30: "WARNING", 40: "ERROR"}


def log_line(level: int, message: str) -> bytes:
    name = LEVEL_NAMES.get(level, "INFO")
    return f"[{name}] {message}\n".encode("utf-8", "replace")
