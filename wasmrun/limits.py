"""Every limit, declared once: its name, unit, default, ceiling, per-tenant cap and
what it bounds.

Two kinds:

- `RUN_LIMITS`: what one run may use (the sandbox's `Limits`). Those with
  `requestable` are members of a request's `limits` (in the request's unit, e.g.
  `memory_mb`); the server's ceiling is `WASMRUN_MAX_<NAME>`, and a tenant's
  `cap` (e.g. `max_memory_mb`) may lower it further.
- `TENANT_LIMITS`: what one tenant may use on a server (quotas, concurrency,
  rates), the run limits' caps included; `wasmrun tenants set NAME --limit
  name=N` or the policy file's `[limits]` sets them.

Everything else is derived from these two tuples, never written again: the
sandbox's `Limits` defaults and ceilings (sandbox/contract/limits.py), the request check
(protocol/running.py: -32602 naming the member), the tool schemas' minimum, maximum
and descriptions (capabilities.py), `WASMRUN_MAX_*` (settings.py), the tenant
limits and their check (tenants/limits.py), `wasmrun run --limit` and
`--timeout-ms`/`--memory-mb` and the `--help` tables (cli/limits.py, cli/help.py),
and the tables in docs/protocol-server.md and docs/hosting.md (`python -m
wasmrun.limits` rewrites them; tests/tenants/test_limit_declarations.py fails when they drift).

This module imports nothing of wasmrun's: every layer may read it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20


@dataclass(frozen=True)
class TenantCap:
    """A tenant limit that lowers one run limit's ceiling for that tenant."""

    name: str  # the tenant limit, e.g. "max_memory_mb"
    default: int  # in the run limit's unit


@dataclass(frozen=True)
class RunLimit:
    """One limit of a run. Numbers are in `unit`; `scale` of the sandbox's unit make one."""

    name: str  # as a request names it ("memory_mb"), or the sandbox field when not requestable
    field: str  # the sandbox's Limits field ("memory_bytes")
    unit: str  # "milliseconds", "MiB", "bytes", "count"
    scale: int  # sandbox units per request unit (MiB for "memory_mb" -> "memory_bytes")
    default: int
    ceiling: int  # the server's built-in ceiling (WASMRUN_MAX_<NAME> sets another)
    help: str  # what it bounds, in words a model and an operator read
    when_hit: str  # how a run that reaches it ends
    minimum: int = 1  # the least a request may ask for
    absolute_max: int | None = None  # the most any ceiling may be (None: no bound)
    requestable: bool = True  # a member of a request's `limits`
    extension: bool = True  # not in the spec (only timeout_ms is)
    cap: TenantCap | None = None  # the tenant limit that may lower the ceiling
    option: bool = False  # `wasmrun run` has --NAME besides --limit NAME=N

    @property
    def env(self) -> str:
        """The variable that sets the server's ceiling."""
        return f"WASMRUN_MAX_{self.name.upper()}"


@dataclass(frozen=True)
class TenantLimit:
    """One limit of a tenant on a server."""

    name: str
    unit: str
    default: int
    help: str
    zero_allowed: bool = False  # 0 means something (off, or "refused at once") rather than nothing allowed


RUN_LIMITS: tuple[RunLimit, ...] = (
    RunLimit(
        "timeout_ms", "timeout_ms", "milliseconds", 1, 30_000, 15 * 60_000,
        "wall-clock time of the run, in milliseconds", "`Timeout`",
        extension=False, cap=TenantCap("max_timeout_ms", 15 * 60_000), option=True,
    ),
    RunLimit(
        "memory_mb", "memory_bytes", "MiB", MiB, 256, 2048,
        "the interpreter's memory, in MiB",
        "`MemoryLimitExceeded` (a trap at the limit); the guest's own `MemoryError` when Python could"
        " refuse the allocation (its message names the limit)",
        # The snapshot's memory alone is about 21 MiB: below 48 no run can start;
        # a wasm32 linear memory cannot grow past 4 GiB.
        minimum=48, absolute_max=4096, cap=TenantCap("max_memory_mb", 2048), option=True,
    ),
    RunLimit(
        "cpu_ms", "cpu_ms", "milliseconds", 1, 20_000, 1_000_000,
        "CPU time of the run (not sleeps or waits), in milliseconds", "`CPULimitExceeded`",
        cap=TenantCap("max_cpu_ms", 15 * 60_000),
    ),
    RunLimit(
        "workspace_mb", "workspace_bytes", "MiB", MiB, 64, 1024,
        "total size of the files in /workspace, in MiB", "`WorkspaceQuotaExceeded`",
    ),
    RunLimit(
        "output_bytes", "output_bytes", "bytes", 1, 64 * 1024, 1 * MiB,
        "printed output kept (stdout, stderr, logs), in bytes", "output cut (head and tail kept)",
    ),
    # The operator's alone (WASMRUN_MAX_* does not set them; a request cannot ask).
    RunLimit(
        "workspace_files", "workspace_files", "count", 1, 1_000, 100_000,
        "/workspace entries (files, dirs, links)", "`WorkspaceQuotaExceeded`", requestable=False,
    ),
    RunLimit(
        "blob_io_bytes", "blob_io_bytes", "bytes", 1, 256 * MiB, 4096 * MiB,
        "bytes moved through blob host calls", "`BlobBudgetExceeded`", requestable=False,
    ),
    RunLimit(
        "result_bytes", "result_bytes", "bytes", 1, 32 * MiB, 256 * MiB,
        "the JSON of the return value", "`InvalidOutput`", requestable=False,
    ),
)
REQUESTABLE: tuple[RunLimit, ...] = tuple(limit for limit in RUN_LIMITS if limit.requestable)
RUN_LIMIT = {limit.name: limit for limit in RUN_LIMITS}
BY_FIELD = {limit.field: limit for limit in RUN_LIMITS}


def _cap(run_limit: str, help: str) -> TenantLimit:
    cap = RUN_LIMIT[run_limit].cap
    assert cap is not None
    return TenantLimit(cap.name, RUN_LIMIT[run_limit].unit, cap.default, help)


TENANT_LIMITS: tuple[TenantLimit, ...] = (
    TenantLimit("concurrent_runs", "count", 4, "runs in a sandbox at once"),
    TenantLimit("queued_runs", "count", 32, "runs waiting for a sandbox at once, beyond those"),
    TenantLimit("runs_per_minute", "per minute", 600, "runs started per minute"),
    TenantLimit("blob_bytes", "bytes", 1024 * MiB, "total stored, each blob counted at least BLOB_MIN_CHARGE"),
    TenantLimit("blob_count", "count", 10_000, "blobs stored at once"),
    TenantLimit("blobs_per_run", "count", 1_000, "blobs one run may write"),
    TenantLimit("skills", "count", 100, "skill versions created over the protocol"),
    TenantLimit("skill_bytes", "bytes", 64 * MiB, "files of those created skills, all versions together"),
    _cap("timeout_ms", "the most `timeout_ms` a request may ask for"),
    _cap("memory_mb", "the most guest memory a request may ask for"),
    _cap("cpu_ms", "the most CPU time a request may ask for"),
    TenantLimit("blob_ttl_s", "seconds", 0, "blobs older than this are deleted; 0: kept until deleted", zero_allowed=True),
    TenantLimit("concurrent_calls", "count", 8, "other methods' calls (read_blob, list_skills, ...) in flight at once"),
    TenantLimit(
        "queued_calls", "count", 128, "such calls waiting, beyond those (a whole batch of 100 waits; 0: refused at once)",
        zero_allowed=True,
    ),
    TenantLimit("mcp_sessions", "count", 16, "MCP sessions open at once over /mcp"),
    TenantLimit(
        "concurrent_requests", "count", 64, "HTTP requests (/rpc, /mcp, /e2b) in flight at once, bodies being received included"
    ),
    TenantLimit(
        "call_bytes_per_s", "bytes per second", 64 * MiB, "bytes those other calls move (params in, content out), per second"
    ),
    TenantLimit("sessions", "count", 8, "sessions open at once"),
    TenantLimit("session_bytes", "bytes", 2048 * MiB, "their pages and files on disk, together"),
)
TENANT_LIMIT = {limit.name: limit for limit in TENANT_LIMITS}
# The tenant limit that lowers each run limit's ceiling, by the sandbox field it lowers.
TENANT_CAPS = {limit.field: limit.cap.name for limit in RUN_LIMITS if limit.cap is not None}


# -- the docs' tables ------------------------------------------------------------


def run_limits_markdown() -> str:
    """The table of a request's `limits` members (docs/protocol-server.md)."""
    lines = [
        "| member | unit | default | range (default ceiling) | tenant cap (default) | run ends with |",
        "|---|---|---|---|---|---|",
    ]
    for limit in REQUESTABLE:
        name = f"`{limit.name}`" + (" (extension)" if limit.extension else "")
        cap = f"`{limit.cap.name}` ({limit.cap.default})" if limit.cap else "none"
        lines.append(
            f"| {name} | {limit.unit} | {limit.default} | {limit.minimum} to {limit.ceiling} | {cap} | {limit.when_hit} |"
        )
    return "\n".join(lines)


def tenant_limits_markdown() -> str:
    """The table of every tenant limit (docs/hosting.md)."""
    lines = ["| limit | unit | default | what it bounds |", "|---|---|---|---|"]
    for limit in TENANT_LIMITS:
        lines.append(f"| `{limit.name}` | {limit.unit} | {limit.default} | {limit.help} |")
    return "\n".join(lines)


def _markers(what: str) -> tuple[str, str]:
    return (f"<!-- limits: {what} (generated from wasmrun/limits.py by `python -m wasmrun.limits`) -->",
            f"<!-- limits: {what} end -->")


DOC_TABLES = {
    "docs/protocol-server.md": ("run limits", run_limits_markdown),
    "docs/hosting.md": ("tenant limits", tenant_limits_markdown),
}


def with_table(text: str, what: str, table: str) -> str:
    """`text` with the part between `what`'s markers replaced by `table`; ValueError without markers."""
    start, end = _markers(what)
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ValueError(f"no {start!r} ... {end!r} markers")
    return pattern.sub(lambda _: f"{start}\n{table}\n{end}", text, count=1)


def rewrite_docs(root: Path) -> list[Path]:
    """Rewrite the generated tables under `root` (a source checkout); the files changed."""
    changed = []
    for relative, (what, render) in DOC_TABLES.items():
        path = root / relative
        text = path.read_text(encoding="utf-8")
        new = with_table(text, what, render())
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


if __name__ == "__main__":
    for changed_path in rewrite_docs(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(f"rewrote {changed_path}")
