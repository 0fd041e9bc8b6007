"""What a sandbox lacks fails with the same clear words on every image (runtime/_compat.py).
Runs on both images (tests/images.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

THREADS_UNAVAILABLE = "threads are not available in the sandbox (WebAssembly/WASI has none)"


@pytest.mark.parametrize("start", [
    "threading.Thread(target=print).start()",
    "_thread.start_new_thread(print, ())",
    "concurrent.futures.ThreadPoolExecutor(2).submit(print).result()",
])
def test_starting_a_thread_says_threads_are_not_available(run_code, start: str) -> None:
    code = f"import threading, _thread, concurrent.futures\ndef main(args):\n    {start}\n"
    result = run_code(code)
    assert result.error.type == "RuntimeError"
    assert THREADS_UNAVAILABLE in result.error.message
    assert "line 3, in main" in result.error.message


def test_code_that_falls_back_when_threads_fail_still_runs(run_code) -> None:
    code = ("import threading\ndef main(args):\n    try:\n        threading.Thread(target=print).start()\n"
            "    except RuntimeError:\n        return 'sequential'\n")
    assert run_code(code).output == "sequential"


@pytest.mark.parametrize("attempt", [
    "import subprocess; subprocess.run(['ls'])",
    "import os; os.fork()",
    "import multiprocessing; multiprocessing.Pool(2)",
    "import socket; socket.create_connection(('example.com', 80))",
])
def test_processes_and_sockets_fail_as_python_errors(run_code, attempt: str) -> None:
    # Each image's CPython says it in its own words; what holds on both: a Python error at
    # the user's line, never a crash of the sandbox.
    result = run_code(f"def main(args):\n    {attempt}\n")
    assert result.status == "failed"
    assert result.error.type not in ("GuestCrashed", "StackOverflow", "Timeout", "CPULimitExceeded"), result.error
    assert "line 2, in main" in result.error.message, result.error.message
