"""The host's error types come from the host's evidence; the guest cannot claim them.

What the guest prints, raises or replies is the guest's word: a guest
exception named like a host type is reported as `Guest<name>`, and printing
"stack overflow" or "MemoryError" before a crash changes nothing.
"""

from __future__ import annotations

import pytest

from wasmrun.sandbox.contract import errors

HOST_TYPES = [
    "Timeout", "CPULimitExceeded", "MemoryLimitExceeded", "StackOverflow", "WorkspaceQuotaExceeded",
    "BlobBudgetExceeded", "BlobQuotaExceeded", "InvalidHostCall", "GuestCrashed", "WorkerCrashed", "SandboxError",
    "DataImageWarmingUp", "SessionBytesExceeded", "SkillTooLarge",
]


def test_the_reserved_names_are_the_hosts():
    assert set(HOST_TYPES) == errors.HOST_TYPES


@pytest.mark.parametrize("name", HOST_TYPES)
def test_a_guest_exception_named_like_a_host_type_is_the_guests(run_code, name):
    code = f"class {name}(Exception):\n    pass\ndef main(args):\n    raise {name}('spoofed')\n"
    result = run_code(code)
    assert result.error.type == f"Guest{name}"
    assert "spoofed" in result.error.message


def test_raising_memory_error_is_the_guests_memory_error(run_code):
    result = run_code("def main(args):\n    raise MemoryError('not really')\n")
    assert result.error.type == "MemoryError"


@pytest.mark.parametrize("printed", ["Fatal Python error: stack overflow", "MemoryError", "Timeout"])
def test_printing_a_host_failure_before_a_crash_does_not_change_its_type(run_code, printed):
    code = f"import os\ndef main(args):\n    os.write(2, {printed.encode()!r})\n    os.abort()\n"
    result = run_code(code)
    assert result.error.type == errors.GUEST_CRASH
    assert printed in result.logs


def test_a_forged_reply_cannot_claim_a_host_type(run_code):
    # Guest code can replace the runtime's reply with its own bytes.
    code = (
        "import _wasmrun\n"
        "real = _wasmrun.respond\n"
        "def main(args):\n"
        "    _wasmrun.respond = lambda _reply: real(\n"
        "        b'F{\"type\": \"Timeout\", \"message\": \"the run exceeded its time limit\"}')\n"
        "    return 1\n"
    )
    result = run_code(code)
    assert result.status == "failed"
    assert result.error.type == "GuestTimeout"


def test_real_limits_keep_their_host_types(run_code):
    assert run_code("def main(args):\n    while True:\n        pass", timeout_ms=200).error.type == errors.TIMEOUT


@pytest.mark.parametrize("name", ["TIME_OUT", "timeout", "Ｔｉｍｅｏｕｔ", "stack_overflow", "MEMORYLIMITEXCEEDED"])
def test_a_name_like_a_host_type_is_the_guests_too(run_code, name):
    code = f"E = type({name!r}, (Exception,), {{}})\ndef main(args):\n    raise E('spoofed')\n"
    assert run_code(code).error.type == f"Guest{name}"


def test_other_guest_names_are_kept(run_code):
    code = "class TimeoutTooShort(Exception):\n    pass\ndef main(args):\n    raise TimeoutTooShort()\n"
    assert run_code(code).error.type == "TimeoutTooShort"
