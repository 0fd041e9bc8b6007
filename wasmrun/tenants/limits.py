"""What one tenant may use. Each limit has a server default (the policy file's
`[limits]` table over the declared ones, wasmrun/limits.py), and `wasmrun tenants
set NAME --limit name=value` overrides it for one tenant."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wasmrun.limits import TENANT_LIMIT, TENANT_LIMITS


def _limit(name: str) -> Any:
    """The declared limit `name`'s default (wasmrun/limits.py)."""
    return dataclasses.field(default=TENANT_LIMIT[name].default)


@dataclass(frozen=True)
class TenantLimits:
    concurrent_runs: int = _limit("concurrent_runs")
    queued_runs: int = _limit("queued_runs")
    runs_per_minute: int = _limit("runs_per_minute")
    blob_bytes: int = _limit("blob_bytes")
    blob_count: int = _limit("blob_count")
    blobs_per_run: int = _limit("blobs_per_run")
    skills: int = _limit("skills")
    skill_bytes: int = _limit("skill_bytes")
    max_timeout_ms: int = _limit("max_timeout_ms")
    max_memory_mb: int = _limit("max_memory_mb")
    max_cpu_ms: int = _limit("max_cpu_ms")
    blob_ttl_s: int = _limit("blob_ttl_s")
    concurrent_calls: int = _limit("concurrent_calls")
    queued_calls: int = _limit("queued_calls")
    mcp_sessions: int = _limit("mcp_sessions")
    concurrent_requests: int = _limit("concurrent_requests")
    call_bytes_per_s: int = _limit("call_bytes_per_s")
    sessions: int = _limit("sessions")
    session_bytes: int = _limit("session_bytes")

    def with_values(self, values: Mapping[str, int]) -> TenantLimits:
        return dataclasses.replace(self, **check_limits(values))


@dataclass(frozen=True)
class SessionPolicy:
    """The operator's bounds on sessions' lifetime (settings: WASMRUN_SESSION_*)."""

    idle_timeout_s: int = 600  # when create_session names none
    max_idle_timeout_s: int = 3600  # the most it may name
    max_age_s: int = 24 * 3600  # from creation, however busy


NAMES = tuple(limit.name for limit in TENANT_LIMITS)
if set(NAMES) != {f.name for f in dataclasses.fields(TenantLimits)}:
    raise ImportError("TenantLimits and the declared TENANT_LIMITS (wasmrun/limits.py) name different limits")


def _shown(value: object) -> str:
    """A refused value as an error quotes it: short (a huge number by its length)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return "a number of 40 digits or more"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_limits(values: Mapping[str, object]) -> dict[str, int]:
    """`values` as limits, or ValueError naming what is wrong."""
    checked: dict[str, int] = {}
    for name, value in values.items():
        if name not in NAMES:
            raise ValueError(f"unknown limit {name!r} (known: {', '.join(NAMES)})")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
            raise ValueError(f"limit {name} must be a whole number from 0, not {_shown(value)}")
        if value == 0 and not TENANT_LIMIT[name].zero_allowed:
            raise ValueError(f"limit {name} must be at least 1")
        checked[name] = value
    return checked


def parse_limit(text: str) -> tuple[str, int]:
    """"name=value" from the command line."""
    name, sep, value = text.partition("=")
    if not sep or not (value.strip().isascii() and value.strip().isdigit()):
        raise ValueError(f"--limit takes NAME=NUMBER, not {text!r}")
    if len(value.strip().lstrip("0")) > 18:  # past any limit's range (and int()'s digit cap)
        raise ValueError(f"--limit {name.strip()}: {len(value.strip())} digits is past any limit")
    return name.strip(), int(value)
