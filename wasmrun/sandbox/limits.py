"""What a run may use, with the server's defaults and ceilings.

A request may ask for any value from `LimitPolicy.allowed` (up to the
ceiling, which the operator sets); omitted values take the default. Each
limit, when hit, ends the run with its own error type (see `errors.py`).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    timeout_ms: int = 30_000  # wall clock (watchdog.py)
    cpu_ms: int = 20_000  # CPU time of the run's thread: wasm and host calls, not sleeps (watchdog.py)
    memory_bytes: int = 256 * MiB  # guest linear memory
    output_bytes: int = 64 * 1024  # captured stdout+stderr+log kept (head and tail)
    workspace_bytes: int = 64 * MiB  # /workspace total file size
    workspace_files: int = 1_000  # /workspace entries (files, dirs, links)
    blob_io_bytes: int = 256 * MiB  # bytes moved through blob host calls
    result_bytes: int = 32 * MiB  # the JSON of the return value


DEFAULT_LIMITS = Limits()
CEILING_LIMITS = Limits(
    timeout_ms=15 * 60_000,
    cpu_ms=1_000_000,
    memory_bytes=2048 * MiB,
    output_bytes=1 * MiB,
    workspace_bytes=1024 * MiB,
    workspace_files=100_000,
    blob_io_bytes=4096 * MiB,
    result_bytes=256 * MiB,
)
# The snapshot's memory alone is about 21 MiB; below this no run can start.
MIN_MEMORY_BYTES = 48 * MiB
# wasm32: a linear memory cannot grow past 4 GiB.
MAX_MEMORY_BYTES = 4096 * MiB


@dataclass(frozen=True)
class LimitPolicy:
    """The defaults and ceilings one caller's runs get (the server's, from its settings)."""

    defaults: Limits = DEFAULT_LIMITS
    ceilings: Limits = CEILING_LIMITS

    def allowed(self, name: str) -> tuple[int, int]:
        """The lowest and highest value a request may ask for the Limits field `name`."""
        lowest = MIN_MEMORY_BYTES if name == "memory_bytes" else 1
        return lowest, max(lowest, int(getattr(self.ceilings, name)))

    def resolve(self, **requested: int | None) -> Limits:
        """Defaults overlaid with the requested values, each clamped to `allowed`;
        callers refuse a request outside it before they get here (protocol/runs.py)."""
        asked_for = {name: value for name, value in requested.items() if value is not None}
        if not asked_for:
            return self._clamped_defaults  # the common case, on every run: computed once
        return self._resolve(asked_for)

    @functools.cached_property
    def _clamped_defaults(self) -> Limits:
        return self._resolve({})

    def _resolve(self, requested: dict[str, int]) -> Limits:
        values = {}
        for field in dataclasses.fields(Limits):
            asked = requested.pop(field.name, None)
            value = getattr(self.defaults, field.name) if asked is None else asked
            lowest, highest = self.allowed(field.name)
            values[field.name] = max(lowest, min(int(value), highest))
        if requested:
            raise TypeError(f"unknown limits: {sorted(requested)}")
        return Limits(**values)
