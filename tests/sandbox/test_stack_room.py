"""A guest entered from a thread with a small stack: wasmtime runs wasm on the caller's
stack, so on such a thread a deep guest would crash the whole process (SIGSEGV at the
guard page) instead of stopping with RecursionError or StackOverflow. The run is handed
to a thread with room (wasmrun/sandbox/budget/stackroom.py); a crash here ends pytest."""

from __future__ import annotations

import threading

import pytest

from wasmrun.sandbox.budget import stackroom
from wasmrun.sandbox.contract.types import RunResult

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

DEEP = (
    "import ast, json, sys\n"
    "def main(args):\n"
    "    sys.setrecursionlimit(100_000)\n"
    "    nested = []\n"
    "    for _ in range(200_000):\n"
    "        nested = [nested]\n"
    "    seen = []\n"
    "    for f in (json.dumps, repr, lambda v: ast.parse('+'.join(['a'] * 100_000))):\n"
    "        try:\n"
    "            f(nested)\n"
    "        except RecursionError:\n"
    "            seen.append('RecursionError')\n"
    "    return seen\n"
)


def _on_thread_with_stack(stack_bytes: int, call) -> tuple[RunResult, str]:
    got: list = []
    previous = threading.stack_size(stack_bytes)
    try:
        worker = threading.Thread(target=lambda: got.append((call(), threading.current_thread().name)))
        worker.start()
    finally:
        threading.stack_size(previous)
    worker.join(120)
    return got[0]


def test_a_deep_guest_from_a_thread_with_a_small_stack_stops_cleanly(run_code) -> None:
    here = run_code(DEEP)
    (there, _name) = _on_thread_with_stack(4 << 20, lambda: run_code(DEEP))
    # the same outcome as on a roomy thread (RecursionErrors, or a StackOverflow), never a crash
    assert there.status == here.status and there.output == here.output
    assert (there.error and there.error.type) == (here.error and here.error.type)
    assert here.status == "completed" or here.error.type == "StackOverflow"
    assert run_code("def main(args):\n    return 1\n").output == 1


def test_a_small_stack_is_measured_and_a_roomy_one_needs_no_handoff() -> None:
    small, _ = _on_thread_with_stack(4 << 20, stackroom.thread_stack_bytes)
    roomy, _ = _on_thread_with_stack(stackroom.RUN_THREAD_STACK_BYTES, stackroom.thread_stack_bytes)
    assert 0 < small < 8 << 20 and roomy >= stackroom.RUN_THREAD_STACK_BYTES
    ran_on, _ = _on_thread_with_stack(4 << 20, lambda: stackroom.call_with_room(
        32 << 20, lambda: threading.current_thread().name))
    assert ran_on.startswith("wasmrun-guest")
    stayed, _ = _on_thread_with_stack(stackroom.RUN_THREAD_STACK_BYTES, lambda: stackroom.call_with_room(
        32 << 20, lambda: threading.current_thread().name))
    assert not stayed.startswith("wasmrun-guest")


def test_threads_started_after_several_engines_still_have_room() -> None:
    # threading.stack_size() with no argument sets the default back: asking twice
    # (a second engine in the process) once left every later thread with 8 MiB.
    for _ in range(3):
        stackroom.roomy_thread_stacks()
    measured: list[int] = []
    worker = threading.Thread(target=lambda: measured.append(stackroom.thread_stack_bytes()))
    worker.start()
    worker.join()
    assert measured[0] >= stackroom.RUN_THREAD_STACK_BYTES
