"""What a run may use, with the server's defaults and ceilings.

A request may ask for any value from `LimitPolicy.allowed` (up to the
ceiling, which the operator sets); omitted values take the default. Each
limit, when hit, ends the run with its own error type (see `errors.py`).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from wasmrun.limits import BY_FIELD, RUN_LIMIT, RUN_LIMITS, MiB


def _default(field: str) -> int:
    """The field's default in the sandbox's unit, from its declaration (wasmrun/limits.py)."""
    return BY_FIELD[field].default * BY_FIELD[field].scale


@dataclass(frozen=True)
class Limits:
    timeout_ms: int = _default("timeout_ms")  # wall clock (watchdog.py)
    cpu_ms: int = _default("cpu_ms")  # CPU time of the run's thread: wasm and host calls, not sleeps (watchdog.py)
    memory_bytes: int = _default("memory_bytes")  # guest linear memory
    output_bytes: int = _default("output_bytes")  # captured stdout+stderr+log kept (head and tail)
    workspace_bytes: int = _default("workspace_bytes")  # /workspace total file size
    workspace_files: int = _default("workspace_files")  # /workspace entries (files, dirs, links)
    blob_io_bytes: int = _default("blob_io_bytes")  # bytes moved through blob host calls
    result_bytes: int = _default("result_bytes")  # the JSON of the return value


if {f.name for f in dataclasses.fields(Limits)} != set(BY_FIELD):
    raise ImportError("sandbox Limits and the declared RUN_LIMITS (wasmrun/limits.py) name different fields")

DEFAULT_LIMITS = Limits()
CEILING_LIMITS = Limits(**{limit.field: limit.ceiling * limit.scale for limit in RUN_LIMITS})
# The snapshot's memory alone is about 21 MiB; below this no run can start.
MIN_MEMORY_BYTES = RUN_LIMIT["memory_mb"].minimum * MiB
# wasm32: a linear memory cannot grow past 4 GiB.
MAX_MEMORY_BYTES = (RUN_LIMIT["memory_mb"].absolute_max or 4096) * MiB


@dataclass(frozen=True)
class LimitPolicy:
    """The defaults and ceilings one caller's runs get (the server's, from its settings)."""

    defaults: Limits = DEFAULT_LIMITS
    ceilings: Limits = CEILING_LIMITS

    def allowed(self, name: str) -> tuple[int, int]:
        """The lowest and highest value a request may ask for the Limits field `name`."""
        declared = BY_FIELD[name]
        lowest = declared.minimum * declared.scale
        return lowest, max(lowest, int(getattr(self.ceilings, name)))

    def resolve(self, **requested: int | None) -> Limits:
        """Defaults overlaid with the requested values, each clamped to `allowed`;
        callers refuse a request outside it before they get here (protocol/running.py)."""
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
