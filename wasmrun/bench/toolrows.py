"""Code mode (docs/code-mode.md) in `wasmrun bench`: what a tool round trip costs the server.

A run that calls one of the client's tools takes two JSON-RPC calls: `run_code` (answered
`requires_action` with the call) and `submit_tool_results` (the run goes on and ends). The
client answers at once (its own tool takes no time), so what is left beyond two plain calls is
the server's: pausing the run in its worker, the call up the worker's pipe, the answer down its
control pipe, the run going on. The row sets that beside a `run_code` hello followed by one
cheap call (`list_sessions`), two requests over the same keep-alive connection: the issue's
goal is that the round trip adds at most 1 ms to the client's own time.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from wasmrun.bench.interleave import alternating
from wasmrun.bench.systems import HELLO, as_run_code

if TYPE_CHECKING:
    from wasmrun.bench.run import Bench

ECHO = {"name": "echo", "description": "Answer the arguments", "parameters": {"type": "object"}}
CALLS_A_TOOL = "from runtime import tools\nanswer = tools.echo(n=1)\nprint('hello')\n"
WITH_TOOL = "wasmrun, HTTP: run_code calling one tool + submit_tool_results"
TWO_CALLS = "wasmrun, HTTP: run_code hello + one list_sessions (two calls)"
TARGET_MS = 1.0  # the issue's: a tool round trip adds at most this, server-side


def tool_round_trip(bench: Bench) -> float:
    """run_code with one tool, its requires_action answered at once, until the run's result."""
    http = bench.http
    start = time.perf_counter()
    first = http.run_code({"language": "python", "code": as_run_code(CALLS_A_TOOL), "tools": [ECHO]})
    calls = first.get("tool_calls") or []
    if first.get("status") != "requires_action" or len(calls) != 1:
        raise RuntimeError(f"run_code with a tool answered {str(first)[:300]}")
    done = http.call("submit_tool_results", {
        "run_id": first["run_id"], "results": [{"call_id": calls[0]["call_id"], "result": calls[0]["arguments"]}],
    })
    seconds = time.perf_counter() - start
    if done.get("status") != "completed":
        raise RuntimeError(f"submit_tool_results answered {str(done)[:300]}")
    return seconds


def two_calls(bench: Bench) -> float:
    hello: dict[str, Any] = {"language": "python", "code": as_run_code(HELLO)}
    start = time.perf_counter()
    bench.http.call("run_code", hello)
    bench.http.call("list_sessions", {})
    return time.perf_counter() - start


def round_trip(bench: Bench) -> dict[str, float]:
    return alternating(bench, [(WITH_TOOL, lambda: tool_round_trip(bench)), (TWO_CALLS, lambda: two_calls(bench))])


def target_lines(rows: dict[str, Any]) -> list[str]:
    """The round trip's cost beyond two plain calls, against the issue's goal, read off the row."""
    got = rows.get("code-mode", {}).get("systems", {})
    if WITH_TOOL not in got or TWO_CALLS not in got:
        return []
    added = got[WITH_TOOL]["p50_ms"] - got[TWO_CALLS]["p50_ms"]
    return ["", f"Code mode: a tool round trip adds {added:.2f} ms p50 to two plain calls' time "
                f"(goal <= {TARGET_MS:.0f} ms)."]


__all__ = ["TWO_CALLS", "WITH_TOOL", "round_trip", "target_lines"]
