"""Which guest image serves new runs now, and who is told when that changes.

A server started with `--image auto` before the data image is made serves the stdlib
image, makes the data image in the background (sandbox/pool/warmup.py) and then moves to it:
the one change of a running server's image. Its tool texts, guide and MCP tool list
describe the image served (capabilities.py, imagefacts.py), so they are read from here
at each call, and the MCP server is told of the change (`notifications/tools/list_changed`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from wasmrun.imagefacts import ImageFacts, image_facts

logger = logging.getLogger("wasmrun.served")


class ServedImage:
    def __init__(self, name: str = "stdlib", package_layers: Path | None = None) -> None:
        self._name = name
        self.package_layers = package_layers  # <data_dir>/packages: the operator's added packages
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        # The background make's progress (sandbox/pool/warmup.py), when one was started: None once over.
        self.warming: Callable[[], Any] | None = None

    @property
    def name(self) -> str:
        return self._name

    def facts(self) -> ImageFacts:
        """The served image's facts, the operator's added packages read now."""
        return image_facts(self._name, self.package_layers)

    def status(self) -> dict[str, Any]:
        """The image served and the warm-up's progress, as /healthz and the playground show them."""
        progress = self.warming() if self.warming is not None else None
        status: dict[str, Any] = {"serving": self._name}
        if progress is not None:
            status["warming_up"] = msgspec.to_builtins(progress)
        return status

    def on_switch(self, listener: Callable[[str], None]) -> None:
        """Call `listener(image)` (on the switching thread) each time the served image changes."""
        with self._lock:
            self._listeners.append(listener)

    def switch(self, name: str) -> None:
        with self._lock:
            if name == self._name:
                return
            self._name = name
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(name)
            except Exception:  # one listener's failure must not keep the others from hearing
                logger.exception("a listener of the served image's change failed")
