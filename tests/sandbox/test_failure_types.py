"""The host's error types come from the host's evidence; the guest cannot claim them.

What the guest prints, raises or replies is the guest's word: a guest
exception named like a host type is reported as `Guest<name>` (`GuestCrashed`,
which has the prefix already, as `GuestReportedCrash`: never `GuestGuest...`),
and printing "stack overflow" or "MemoryError" before a crash changes nothing.
"""

from __future__ import annotations

import unicodedata

import pytest

from wasmrun.sandbox.contract import errors

HOST_TYPES = [
    "Timeout", "CPULimitExceeded", "MemoryLimitExceeded", "StackOverflow", "WorkspaceQuotaExceeded",
    "BlobBudgetExceeded", "BlobQuotaExceeded", "InvalidHostCall", "GuestCrashed", "WorkerCrashed", "SandboxError",
    "DataImageWarmingUp", "SessionBytesExceeded", "SkillTooLarge", "Interrupted",
    "ToolWaitTimeout", "ToolCallLimitExceeded",
]


def test_the_reserved_names_are_the_hosts():
    assert set(HOST_TYPES) == errors.HOST_TYPES


def _as_the_guests(name: str) -> str:
    return "GuestReportedCrash" if name == "GuestCrashed" else f"Guest{name}"


@pytest.mark.parametrize("name", HOST_TYPES)
def test_a_guest_exception_named_like_a_host_type_is_the_guests(run_code, name):
    code = f"class {name}(Exception):\n    pass\ndef main(args):\n    raise {name}('spoofed')\n"
    result = run_code(code)
    assert result.error.type == _as_the_guests(name)
    assert "spoofed" in result.error.message


@pytest.mark.parametrize("code", [
    # the runtime's own work after the code (its `finally`) fails: it replies GuestCrashed itself
    "from runtime import _display\ndef main(args):\n    _display.end_run = None\n    return 1\n",
    "import sys\nsys.modules['runtime._display'].end_run = None\n1",
], ids=["main", "script"])
def test_a_guest_that_breaks_its_runtime_is_named_once(run_code, code):
    result = run_code(code)
    assert result.status == "failed"
    assert result.error.type == "GuestReportedCrash", result.error
    assert result.error.message == "the guest runtime failed: TypeError"


@pytest.mark.parametrize("claimed", ["GuestCrashed", "guest_crashed", "GuestReportedCrash"])
def test_a_forged_crash_reply_is_named_once(run_code, claimed):
    code = (
        "import _wasmrun\n"
        "real = _wasmrun.respond\n"
        "def main(args):\n"
        f"    _wasmrun.respond = lambda _reply: real(b'F{{\"type\": \"{claimed}\", \"message\": \"m\"}}')\n"
        "    return 1\n"
    )
    assert run_code(code).error.type == "GuestReportedCrash"


@pytest.mark.parametrize("reply", [b"X", b'F{"type": 1}'])
def test_the_hosts_own_crashes_stay_guest_crashed(run_code, reply):
    code = (
        "import _wasmrun\n"
        "real = _wasmrun.respond\n"
        "def main(args):\n"
        f"    _wasmrun.respond = lambda _reply: real({reply!r})\n"
        "    return 1\n"
    )
    assert run_code(code).error.type == errors.GUEST_CRASH
    assert run_code("import os\nos.abort()").error.type == errors.GUEST_CRASH


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
    assert run_code(code).error.type == _as_the_guests(name)


def test_other_guest_names_are_kept(run_code):
    code = "class TimeoutTooShort(Exception):\n    pass\ndef main(args):\n    raise TimeoutTooShort()\n"
    assert run_code(code).error.type == "TimeoutTooShort"


NAMED = [
    *HOST_TYPES, "TIME_OUT", "guest_crashed", "ＧｕｅｓｔＣｒａｓｈｅｄ", "Guest Crashed!", "GuestTimeout", "GuestReportedCrash",
    "ValueError", "TimeoutTooShort", "Crashed", "Guest", "", "T" * 300, "Timeout" + "_" * 250, "Guest\u0307Timeout",
]


@pytest.mark.parametrize("name", NAMED)
def test_guest_type_names_a_type_once_and_gives_its_names_back_unchanged(name):
    shown = errors.guest_type(name)
    assert errors.guest_type(shown) == shown
    assert len(shown) <= errors.MAX_GUEST_TYPE
    folded = "".join(ch for ch in unicodedata.normalize("NFKC", shown).casefold() if ch.isalnum())
    assert folded not in {t.casefold() for t in errors.HOST_TYPES}
    assert "guestguest" not in folded


def test_guest_type_keeps_the_guests_spelling_behind_one_prefix():
    assert errors.guest_type("Timeout") == "GuestTimeout"
    assert errors.guest_type("TIME_OUT") == "GuestTIME_OUT"
    assert errors.guest_type("GuestCrashed") == errors.guest_type("guest_crashed") == "GuestReportedCrash"
    assert errors.guest_type("ValueError") == "ValueError"
    assert errors.guest_type("Crashed") == "Crashed"  # not a host type: the guest's own name
