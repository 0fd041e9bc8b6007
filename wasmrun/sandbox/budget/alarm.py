"""Wake a sleeping thread at a chosen time, without waking it to say so.

The sandbox's helper threads (the watchdog, the instance housekeeper) sleep
until something is due. Telling a sleeping thread "something is due at t"
through a `threading.Condition` wakes it at once: on a busy machine the woken
thread preempts or contends with the run that told it (measured here: that
wake-up cost a hello run more than the work it announced). A Linux timerfd
takes the new time with one syscall and wakes the thread only when it is
due, so a run that ends first never wakes anyone.

Elsewhere (no timerfd) the same interface falls back to a Condition.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

_CLOCK_MONOTONIC = 1  # time.monotonic() reads this clock on Linux
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1
_NEVER = float("inf")


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _timerfd_calls() -> tuple[object, object] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes = [ctypes.c_int, ctypes.c_int]
    create.restype = ctypes.c_int
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    settime.restype = ctypes.c_int
    return create, settime


_CALLS = _timerfd_calls()


class Alarm:
    """One sleeper, any number of setters. `set(at)` makes the sleeper's
    `wait()` return by `at` (time.monotonic()) at the latest. Times only move earlier until the sleeper wakes: after a
    wake-up it sets the next one itself. Callers hold their own lock."""

    def __init__(self) -> None:
        self.at = _NEVER  # the time the sleeper will wake, as far as setters know
        self._fd = -1
        self._spec = _Itimerspec()
        if _CALLS is not None:
            create, _ = _CALLS
            self._fd = create(_CLOCK_MONOTONIC, _TFD_CLOEXEC)  # type: ignore[operator]
        self._cond = threading.Condition() if self._fd < 0 else None

    def set(self, at: float) -> None:
        """Wake the sleeper by `at` (no-op if it will wake earlier anyway)."""
        if at >= self.at:
            return
        self.at = at
        self._arm(max(at, 1e-9))

    def _arm(self, at: float) -> None:
        if self._cond is not None:
            with self._cond:  # the sleeper looks at `self.at` again
                self._cond.notify()
            return
        seconds = int(at)
        self._spec.it_value.tv_sec = seconds
        self._spec.it_value.tv_nsec = int((at - seconds) * 1e9) if at else 0
        _, settime = _CALLS  # type: ignore[misc]
        if settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:  # type: ignore[operator]
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def wait(self) -> None:
        """Sleep until the time set (or a spurious wake-up: callers look again).
        The caller must not hold the lock its setters take."""
        if self._cond is None:
            try:
                os.read(self._fd, 8)
            except BlockingIOError:
                pass
            return
        with self._cond:
            while (left := self.at - time.monotonic()) > 0:
                self._cond.wait(None if left == _NEVER else left)

    def woke(self) -> None:
        """Called by the sleeper once awake, before it looks for what is due:
        the next `set` arms again."""
        self.at = _NEVER

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
