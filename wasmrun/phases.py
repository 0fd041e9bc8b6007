"""Timestamps at the stages of one run, for `wasmrun bench`'s phase breakdown.

Off unless a recorder is installed (`recording()`), which only the bench does:
then `mark` costs one global load and a comparison (tens of nanoseconds; the
bench measures hello with and without the marks in place). With a recorder,
each mark appends (stage, perf_counter_ns) from whichever thread reaches it,
so it is meant for one run at a time, in one process (the in-process path:
dispatcher, admission, sandbox, audit).

The stages, in the order a run_code call passes them:
  call       the dispatcher has the call (params still raw)
  admitted   params decoded, skills found, the tenant's run admitted
  sandbox    the sandbox thread has the request
  instance   a fresh instance taken (a spare, or made on the spot)
  entry      workspace, WASI and the request written in: the guest is entered
  guest      the guest returned
  captured   the guest's stdout/stderr drained into the result
  result     the host's result built (logs, redaction, usage)
  answered   the protocol's result made (an output blob if too large)
  audited    the call recorded (audit log, metrics)
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_marks: list[tuple[str, int]] | None = None


def mark(stage: str) -> None:
    if _marks is not None:
        _marks.append((stage, time.perf_counter_ns()))


@contextmanager
def recording() -> Iterator[list[tuple[str, int]]]:
    """Collect the marks made until the block ends."""
    global _marks
    marks: list[tuple[str, int]] = []
    _marks = marks
    try:
        yield marks
    finally:
        _marks = None


class StepTimes:
    """Milliseconds spent per named step of a run, by wrapping the functions that do the steps
    (scripts/hello_phases.py and session_phases.py: where a run's host time goes)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = collections.defaultdict(float)

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, adding the time each call takes to `spent[name]`."""
        spent = self.spent

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += (time.perf_counter() - start) * 1000

        return wrapper
