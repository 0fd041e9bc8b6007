"""The guest's reply to a run, decoded: it is the guest's word, never trusted.

b"C" + the output's JSON, or b"F" + {"type", "message"} as JSON; before a b"C",
b"W" + a JSON list of warnings + b"\n" when the guest runtime has any
(python_wasm/runtime/_contract.py). Anything else is a crash, never a host error.
The prefixes and shapes are the contract's (wasmrun/abi.py).
"""

from __future__ import annotations

import msgspec

from wasmrun.abi import (
    GUEST_MODULE,
    REPLY_COMPLETED,
    REPLY_FAILED,
    REPLY_WARNINGS,
    RUN_STOPPED,
    RUN_STOPPED_MESSAGE,
    decode_failure,
)
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.types import RunError, RunResult
from wasmrun.sandbox.guest import jsontext

STOPPED_TYPE = RUN_STOPPED  # the guest's exception for a stop request (bridge.c)


def stopped_here(stopped: RunError, response: bytes | None) -> RunError:
    """A run over a limit that replied within the grace: the limit's error, with the
    guest's traceback of where the code was when it was asked to stop. (The type and
    the first line are the host's own; only the traceback is the guest's word.)"""
    failure = None
    if response is not None and response[:1] == REPLY_FAILED:
        try:
            failure = decode_failure(response[1:])
        except (msgspec.DecodeError, ValueError, RecursionError):
            failure = None
    if failure is None or failure.type != STOPPED_TYPE:
        return RunError(stopped.type, f"{stopped.message}; the code caught the request to stop (`except BaseException`?)")
    where = failure.message.rstrip().removesuffix(f"{GUEST_MODULE}.{STOPPED_TYPE}: {RUN_STOPPED_MESSAGE}").rstrip()
    if not where.startswith("Traceback"):  # no frame of the code's own: the runtime's work after it
        return RunError(stopped.type, f"{stopped.message}; it was stopped after the code returned (writing its output)")
    return RunError(stopped.type, f"{stopped.message}; it was stopped here:\n{where}")


def apply(result: RunResult, response: bytes) -> None:
    """Decode the guest's reply: b"C" + output JSON, or b"F" + error JSON,
    after b"W" + warnings JSON + b"\n" when the guest has warnings.
    The guest is untrusted: its output is checked, never trusted (see
    jsontext), and anything else is a crash, never a host error."""
    if response[:1] == REPLY_WARNINGS:
        result.warnings, response = jsontext.guest_warnings(response)
    if response[:1] == REPLY_COMPLETED:
        output = response[1:]
        problem = jsontext.output_problem(output)
        if problem is None:
            result.output_json = output
            return
        result.status = "failed"
        result.error = RunError(errors.INVALID_OUTPUT, f"the return value cannot be passed on: {problem}")
        return
    if response[:1] == REPLY_FAILED:
        try:
            err = decode_failure(response[1:])
        except (msgspec.DecodeError, ValueError, RecursionError):
            pass
        else:
            result.status = "failed"
            result.error = RunError(errors.guest_type(err.type), err.message)
            return
    result.status = "failed"
    result.error = RunError(errors.GUEST_CRASH, "the interpreter sent a malformed reply")
