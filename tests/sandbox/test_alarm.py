"""The alarm that wakes the sandbox's helper threads only when something is due."""

from __future__ import annotations

import threading
import time

import pytest

from wasmrun.sandbox.budget import alarm as alarm_module
from wasmrun.sandbox.budget.alarm import Alarm


@pytest.fixture(autouse=True, params=["timerfd", "condition"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test on Linux's timerfd and on the Condition used where there is none."""
    if request.param == "condition":
        monkeypatch.setattr(alarm_module, "_CALLS", None)
    elif alarm_module._CALLS is None:
        pytest.skip("no timerfd here")


def _sleeper(alarm: Alarm, woke: threading.Event) -> threading.Thread:
    def sleep() -> None:
        alarm.wait()
        alarm.woke()
        woke.set()

    thread = threading.Thread(target=sleep, daemon=True)
    thread.start()
    return thread


def test_a_time_set_wakes_the_sleeper_once_it_is_due() -> None:
    alarm, woke = Alarm(), threading.Event()
    _sleeper(alarm, woke)
    alarm.set(time.monotonic() + 0.05)
    assert woke.wait(10)
    alarm.close()


def test_an_earlier_time_replaces_a_later_one() -> None:
    alarm, woke = Alarm(), threading.Event()
    _sleeper(alarm, woke)
    alarm.set(time.monotonic() + 3600)
    alarm.set(time.monotonic())
    assert woke.wait(10)
    alarm.close()


def test_a_later_time_does_not_postpone_an_earlier_one() -> None:
    alarm, woke = Alarm(), threading.Event()
    _sleeper(alarm, woke)
    alarm.set(time.monotonic() + 0.01)
    alarm.set(time.monotonic() + 3600)
    assert woke.wait(10)
    alarm.close()


def test_the_sleeper_can_be_woken_again_after_it_woke() -> None:
    alarm, woke = Alarm(), threading.Event()
    _sleeper(alarm, woke)
    alarm.set(time.monotonic())
    assert woke.wait(10)
    again = threading.Event()
    _sleeper(alarm, again)
    alarm.set(time.monotonic() + 0.01)
    assert again.wait(10)
    alarm.close()
