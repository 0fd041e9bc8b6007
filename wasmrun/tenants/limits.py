"""What one tenant may use. Each limit has a server default (the policy file's
`[limits]` table over the values below), and `wasmrun tenants set NAME --limit
name=value` overrides it for one tenant."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MiB = 1 << 20


def _limit(default: int, doc: str) -> Any:
    """A limit's default and what it bounds (`wasmrun tenants --help` lists them)."""
    return dataclasses.field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class TenantLimits:
    concurrent_runs: int = _limit(4, 'runs in a sandbox at once')
    queued_runs: int = _limit(32, 'runs waiting for a sandbox at once, beyond those')
    runs_per_minute: int = _limit(600, 'runs started per minute')
    blob_bytes: int = _limit(1024 * MiB, 'total stored, each blob counted at least BLOB_MIN_CHARGE')
    blob_count: int = _limit(10_000, 'blobs stored at once')
    blobs_per_run: int = _limit(1_000, 'blobs one run may write')
    skills: int = _limit(100, 'skill versions created over the protocol')
    skill_bytes: int = _limit(64 * MiB, 'files of those created skills, all versions together')
    max_timeout_ms: int = _limit(15 * 60_000, 'the most `timeout_ms` a request may ask for')
    max_memory_mb: int = _limit(2048, 'the most guest memory a request may ask for')
    max_cpu_ms: int = _limit(15 * 60_000, 'the most CPU time a request may ask for')
    blob_ttl_s: int = _limit(0, 'blobs older than this are deleted; 0: kept until deleted')
    concurrent_calls: int = _limit(8, "other methods' calls (read_blob, list_skills, ...) in flight at once")
    queued_calls: int = _limit(128, 'such calls waiting, beyond those (a whole batch of 100 waits; 0: refused at once)')
    mcp_sessions: int = _limit(16, 'MCP sessions open at once over /mcp')
    concurrent_requests: int = _limit(64, 'HTTP requests (/rpc, /mcp) in flight at once, bodies being received included')
    call_bytes_per_s: int = _limit(64 * MiB, 'bytes those other calls move (params in, content out), per second')
    sessions: int = _limit(8, 'sessions open at once')
    session_bytes: int = _limit(2048 * MiB, 'their memory images and files on disk, together')

    def with_values(self, values: Mapping[str, int]) -> TenantLimits:
        return dataclasses.replace(self, **check_limits(values))


@dataclass(frozen=True)
class SessionPolicy:
    """The operator's bounds on sessions' lifetime (settings: WASMRUN_SESSION_*)."""

    idle_timeout_s: int = 600  # when create_session names none
    max_idle_timeout_s: int = 3600  # the most it may name
    max_age_s: int = 24 * 3600  # from creation, however busy


NAMES = tuple(f.name for f in dataclasses.fields(TenantLimits))

# A limit's unit, from how its name ends (the names say their unit).
_UNITS = (("_bytes_per_s", "bytes per second"), ("per_minute", "per minute"), ("_ms", "milliseconds"), ("_mb", "MiB"),
          ("_bytes", "bytes"), ("_s", "seconds"))


def unit_of(name: str) -> str:
    return next((unit for suffix, unit in _UNITS if name.endswith(suffix)), "count")


def describe() -> list[tuple[str, str, int, str]]:
    """(name, unit, default, what it bounds) for every tenant limit."""
    return [(f.name, unit_of(f.name), int(f.default), f.metadata["doc"])  # type: ignore[arg-type]
            for f in dataclasses.fields(TenantLimits)]


def check_limits(values: Mapping[str, object]) -> dict[str, int]:
    """`values` as limits, or ValueError naming what is wrong."""
    checked: dict[str, int] = {}
    for name, value in values.items():
        if name not in NAMES:
            raise ValueError(f"unknown limit {name!r} (known: {', '.join(NAMES)})")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
            raise ValueError(f"limit {name} must be a whole number from 0, not {value!r}")
        if value == 0 and name not in ("blob_ttl_s", "queued_calls"):
            raise ValueError(f"limit {name} must be at least 1")
        checked[name] = value
    return checked


def parse_limit(text: str) -> tuple[str, int]:
    """"name=value" from the command line."""
    name, sep, value = text.partition("=")
    if not sep or not (value.strip().isascii() and value.strip().isdigit()):
        raise ValueError(f"--limit takes NAME=NUMBER, not {text!r}")
    return name.strip(), int(value)
