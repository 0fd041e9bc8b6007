"""How a run ended, from the host's evidence: its error type and its result.

A trap is classified by its code and how close the guest's memory is to its
limit; a watchdog stop wins over whatever else raced it; the guest's reply
(reply.py) counts only when nothing stopped the run. Nothing the guest
printed counts (it could print anything).
"""

from __future__ import annotations

import logging

import wasmtime

from wasmrun.sandbox.budget.watchdog import RunWatch
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.limits import CEILING_LIMITS, Limits
from wasmrun.sandbox.contract.types import RunError, RunResult, Usage
from wasmrun.sandbox.guest import reply
from wasmrun.sandbox.guest.hostcalls import RunContext

logger = logging.getLogger("wasmrun.sandbox")
# The interpreter aborts when an allocation fails that it cannot turn into
# MemoryError: its memory is then within one growth step of the limit.
MEMORY_LIMIT_MARGIN = 1 << 20
# A trap, so no traceback: say what usually causes it and what to change (a model's next try).
STACK_OVERFLOW_MESSAGE = (
    "the guest's call stack overflowed: recursion deeper than the sandbox's stack holds, usually a"
    " raised sys.setrecursionlimit or C code (json, pickle, repr, copy, lru_cache) walking a"
    " structure nested thousands deep; make the code iterative or the data shallower"
)


def classify_trap(trap: wasmtime.Trap, memory_len: int, limits: Limits) -> RunError:
    """The error type of a trap: its code, and how close the guest's memory is to its limit."""
    code = trap.trap_code
    if code == wasmtime.TrapCode.STACK_OVERFLOW:
        return RunError(errors.STACK_OVERFLOW, STACK_OVERFLOW_MESSAGE)
    if memory_len + MEMORY_LIMIT_MARGIN >= limits.memory_bytes:
        return RunError(errors.MEMORY_LIMIT, f"the run exceeded its memory limit of {limits.memory_bytes} bytes")
    name = code.name.lower().replace("_", " ") if code is not None else "trap"
    return RunError(errors.GUEST_CRASH, f"the interpreter stopped: {name}")


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


def raised(exc: Exception, watch: RunWatch, memory_len: int, limits: Limits, run_id: str) -> RunError:
    """The error of a run whose call into the guest raised `exc` (call it in the except block)."""
    if isinstance(exc, errors.RunAborted):  # a host call refused, a quota
        return RunError(exc.error_type, exc.message)
    # A run marked over a budget was stopped by the watchdog (an error from
    # its epoch callback), whatever else raced it.
    if isinstance(exc, wasmtime.Trap):
        return watch.hard_stop_error() or classify_trap(exc, memory_len, limits)
    if isinstance(exc, wasmtime.WasmtimeError):
        return watch.hard_stop_error() or RunError(errors.GUEST_CRASH, f"the sandbox failed: {first_line(str(exc))}")
    # A bug on our side of a host call: keep the details in the server log only.
    logger.exception("host call failed in run %s", run_id)
    return RunError(errors.INTERNAL, "the sandbox host failed; the run was stopped")


def returned(stopped: RunError | None, response: bytes | None, limits: Limits) -> RunError | None:
    """The error of a run whose guest returned (None: its reply stands)."""
    if stopped is not None:  # asked to stop, it replied within the grace
        return reply.stopped_here(stopped, response)
    if response is None:
        return RunError(errors.GUEST_CRASH, "the interpreter failed to run the request")
    if len(response) > limits.result_bytes:
        return RunError(errors.INVALID_OUTPUT, errors.result_too_large(limits.result_bytes))
    return None


def result(run_id: str, ctx: RunContext, usage: Usage, error: RunError | None) -> RunResult:
    """The run's result: the guest's reply decoded, or `error`; its usage and logs."""
    usage.blob_io_bytes = ctx.blob_io
    usage.http_requests = ctx.egress.usage.requests
    usage.http_bytes_out = ctx.egress.usage.bytes_out
    usage.http_bytes_in = ctx.egress.usage.bytes_in
    found = RunResult(run_id=run_id, status="completed", output_blobs=ctx.output_blobs, usage=usage)
    if error is None:
        assert ctx.response is not None
        reply.apply(found, ctx.response)
    else:
        found.status = "failed"
        found.error = error
    if found.error is not None and found.error.type in (errors.MEMORY_LIMIT, "MemoryError"):
        # The limit and how to ask for more (for the guest's own MemoryError
        # too: the host has no evidence it came from the limit, but says what the limit is).
        hint = errors.memory_hint(ctx.limits.memory_bytes, CEILING_LIMITS.memory_bytes)
        found.error = RunError(found.error.type, f"{found.error.message}\n{hint}")
    found.displays = ctx.displays.shown
    found.warnings = found.warnings + ctx.displays.warnings()
    found.logs = ctx.logs.text()
    found.logs_cut_bytes = ctx.logs.cut
    return found
