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
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
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
