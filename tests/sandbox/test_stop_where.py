"""A run over its time or CPU limit says which line was running, on every image: the
host asks the guest to raise where the code is (bridge.c's export on the stdlib image,
CPython's own PyErr_SetInterruptEx exported by the data image's making) and stops it
hard when it does not unwind within the grace. Runs on the data image with
both images (tests/images.py)."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

SPIN_AT_LINE_4 = "def main(args):\n    n = 0\n    while True:\n        n += 1\n"


def test_a_timeout_says_the_line_that_was_running(run_code) -> None:
    result = run_code(SPIN_AT_LINE_4, timeout_ms=300)
    assert result.error.type == "Timeout"
    assert result.error.message.startswith("the run exceeded its time limit of 300 ms; it was stopped here:")
    assert 'File "<run_code>", line 4, in main' in result.error.message or (
        'File "<run_code>", line 3, in main' in result.error.message  # the loop's back edge
    )
    assert "RunStopped" not in result.error.message  # the host's own words, not the mechanism


def test_a_cpu_limit_says_the_line_in_the_function_that_ran_away(run_code) -> None:
    code = ("def ok():\n    return 1\ndef spin():\n    n = 0\n    while True:\n        n += 1\n"
            "def main(args):\n    ok()\n    spin()\n")
    result = run_code(code, cpu_ms=200, timeout_ms=60_000)
    assert result.error.type == "CPULimitExceeded"
    assert result.error.message.startswith("the run exceeded its CPU limit of 200 ms; it was stopped here:")
    assert "line 9, in main" in result.error.message
    assert "line 5, in spin" in result.error.message or "line 6, in spin" in result.error.message  # the loop


def test_a_sleep_past_the_timeout_says_where(run_code) -> None:
    result = run_code("import time\ndef main(args):\n    time.sleep(30)\n", timeout_ms=300)
    assert result.error.type == "Timeout"
    assert "line 3, in main" in result.error.message and "time.sleep(30)" in result.error.message


def test_code_that_swallows_the_stop_is_stopped_hard(run_code) -> None:
    start = time.monotonic()
    code = ("def main(args):\n    n = 0\n    while True:\n        try:\n            while True:\n"
            "                n += 1\n        except BaseException:\n            pass\n")
    result = run_code(code, cpu_ms=200, timeout_ms=20_000)
    assert result.error.type == "CPULimitExceeded"
    assert "did not stop within 50 ms of being asked" in result.error.message
    assert result.usage.cpu_ms < 2_000  # stopped within the grace, not at the timeout
    assert time.monotonic() - start < 15  # a hang guard only
    keyboard = run_code(
        "def main(args):\n    while True:\n        try:\n            while True:\n                pass\n"
        "        except KeyboardInterrupt:\n            pass\n", timeout_ms=300)
    assert keyboard.error.type == "Timeout" and "stopped here" in keyboard.error.message


def test_code_that_returns_after_catching_the_stop_still_fails(run_code) -> None:
    result = run_code(
        "def main(args):\n    n = 0\n    try:\n        while True:\n            n += 1\n"
        "    except BaseException:\n        return 'escaped'\n", cpu_ms=200)
    assert result.status == "failed" and result.error.type == "CPULimitExceeded"
    assert "caught the request to stop" in result.error.message


def test_code_stuck_in_c_is_stopped_hard(run_code) -> None:
    # One call into C that never reaches a bytecode boundary nor checks for signals.
    start = time.monotonic()
    result = run_code("def main(args):\n    return sum(range(10**12))\n", cpu_ms=300, timeout_ms=60_000)
    assert result.error.type == "CPULimitExceeded"
    assert "no traceback" in result.error.message
    assert time.monotonic() - start < 15  # a hang guard only


def test_catastrophic_backtracking_stops(run_code) -> None:
    # 3.15's `re` looks for signals while it backtracks (the data image: the stop raises
    # there, with the line); 3.11's engine does not see the stdlib guest's request (a hard stop).
    code = "import re\ndef main(args):\n    return bool(re.match(r'(a+)+$', 'a' * 40 + 'b'))\n"
    result = run_code(code, cpu_ms=300, timeout_ms=60_000)
    assert result.error.type == "CPULimitExceeded"
    assert "line 3, in main" in result.error.message or "no traceback" in result.error.message


def test_the_next_run_is_not_stopped_by_an_earlier_request(run_code) -> None:
    assert run_code(SPIN_AT_LINE_4, cpu_ms=100).error.type == "CPULimitExceeded"
    result = run_code("def main(args):\n    return sum(range(10**6))\n")
    assert result.output == sum(range(10**6)), result.error
