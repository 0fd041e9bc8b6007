"""A crash's type in a run result over JSON-RPC, in a run and in a session run: the
host's `GuestCrashed` for what the host saw, `GuestReportedCrash` for the guest's
word (its runtime failing, a class or a reply of that name), never `GuestGuest...`
(issue 42, item 7)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

FORGED = ("import _wasmrun\nreal = _wasmrun.respond\n"
          "_wasmrun.respond = lambda _r: real(b'F{\"type\": \"GuestCrashed\", \"message\": \"it crashed\"}')\n1")
CRASHES = {  # the code, its error type, whether a session run is rolled back
    "its runtime breaks": ("from runtime import _display\n_display.end_run = None\n1", "GuestReportedCrash", False),
    "a class of that name": ("class GuestCrashed(Exception):\n    pass\nraise GuestCrashed('x')", "GuestReportedCrash", False),
    "a forged reply": (FORGED, "GuestReportedCrash", False),
    "a real crash": ("import os\nos.abort()", "GuestCrashed", True),
}
# Those two leave the session's runtime as the code left it (its state is kept): its next
# runs fail the same way, named the same.
BROKEN = {"its runtime breaks", "a forged reply"}


def _checked(answer: dict[str, Any], expected: str) -> dict[str, Any]:
    assert "GuestGuest" not in json.dumps(answer), answer
    result: dict[str, Any] = answer["result"]
    assert result["status"] == "failed"
    assert result["error"]["type"] == expected, result["error"]
    assert result["summary"].startswith(f"Failed: {expected}"), result["summary"]
    return result


@pytest.mark.parametrize("case", CRASHES)
def test_a_crash_is_named_once_in_a_run_and_in_a_session_run(rpc: Callable[..., dict[str, Any]], case: str) -> None:
    code, expected, rolled_back = CRASHES[case]
    _checked(rpc("run_code", {"language": "python", "code": code}), expected)
    session = rpc("create_session", {"language": "python"})["result"]["session_id"]
    rpc("run_code", {"language": "python", "code": "kept = 1", "session_id": session})
    result = _checked(rpc("run_code", {"language": "python", "code": code, "session_id": session}), expected)
    assert result["session_rolled_back"] is rolled_back
    after = rpc("run_code", {"language": "python", "code": "kept", "session_id": session})
    if case in BROKEN:
        _checked(after, expected)
    else:
        assert after["result"]["output"] == 1
    rpc("close_session", {"session_id": session})
