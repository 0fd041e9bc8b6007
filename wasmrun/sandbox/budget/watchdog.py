"""A run's CPU and wall-clock budgets, and the thread that stops a run over either.

The CPU a run uses is its own thread's CPU clock, as the kernel keeps it
(wasm and the host calls it makes; not time spent sleeping or waiting).
wasmtime's fuel would count instructions instead, but every basic block then
pays for a counter update: measured here, 20-30% of a compute-bound run's time.

How a run is stopped: every running store's epoch deadline is one epoch
ahead, and an epoch-deadline callback is installed on it. A watchdog thread
looks at each run in flight every `TICK_S` once it could be over a budget (its
thread's CPU clock, read from outside with `pthread_getcpuclockid`, and the
wall clock; a run that ends sooner never wakes the thread); when one is over a
budget it marks that run with the limit and advances the engine's epoch.
Several stores can share one engine (in-process slots, the skill-image
thread), and the epoch is engine-wide: each store's callback, on its own run
thread, lets a run that is not marked go on to the next epoch and stops the
marked one. The epoch only advances when some run must stop, so a run within
its budgets never leaves its wasm code while it computes.

A streamed run (its caller wants the output as it is written) also gets an
`on_tick`: while one is in flight the watchdog advances the epoch every
`STREAM_POLL_TICKS` ticks, and the run's callback, on its own thread while
its wasm is stopped at a safe point, calls `on_tick` (which looks at the
guest's output buffer). Runs that do not stream pay nothing for it.

Where Python cannot read another thread's CPU clock (no
`pthread_getcpuclockid`, or the kernel refuses that clock), the watchdog advances the epoch on every tick while
such a run is in flight, and the callback reads the run thread's own clock.

The callback goes through wasmtime-py's C bindings (no public API for it:
wasmtime_internals.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import wasmtime

from wasmrun.sandbox.budget.alarm import Alarm
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.types import RunError
from wasmrun.sandbox.guest import wasmtime_internals

logger = logging.getLogger("wasmrun.sandbox")

TICK_S = 0.005
STREAM_POLL_TICKS = 1  # a streamed run's output is looked at every tick (5 ms; measured: 25 ms gave 50 ms p50 under load)

_thread_cpu_clock: Callable[[int], int] | None = getattr(time, "pthread_getcpuclockid", None)


def _outside_clock() -> int | None:
    """The calling thread's CPU clock as other threads can read it, if they can."""
    if _thread_cpu_clock is None:
        return None
    try:
        clock = _thread_cpu_clock(threading.get_ident())
        time.clock_gettime(clock)
    except (OSError, ValueError, OverflowError):  # a kernel or sandbox that refuses it
        return None
    return clock


# After a run is asked to stop (see `RunWatch.stopping`), how long it has to unwind
# before it is stopped hard: 50 ms of its own CPU time (a loaded machine that does
# not schedule the run's thread does not cost it its traceback), and at most 250 ms
# of wall-clock time not spent waiting for a CPU (where the kernel says how long the
# thread waited: two cores shared by a test run's workers kept a run's thread off the
# CPU past 250 ms), 2 s of wall-clock time whatever happens.
GRACE_S = 0.05
GRACE_WALL_S = 0.25
GRACE_WALL_MAX_S = 2.0
_SCHEDSTAT = "/proc/thread-self/schedstat"


def _waited_for_cpu_s() -> float:
    """How long the calling thread has waited on a run queue since it started (Linux's
    schedstat, its second field, in ns); 0 where the kernel does not say."""
    try:
        with open(_SCHEDSTAT, "rb") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class RunWatch:
    """One run's budgets, started on the thread that runs it."""

    def __init__(
        self, cpu_ms: int, timeout_ms: int, interrupt: Callable[[object], None] | None = None, run_id: str = "",
    ) -> None:
        self._interrupt = interrupt
        self.run_id = run_id
        # Set when the run is interrupted from outside (`interrupt`): wakes a sleep in host code.
        self.woken = threading.Event()
        self._stop_at: float | None = None  # when the run was asked to stop (wall clock)
        self._stop_waited_s = 0.0  # the thread's wait for a CPU until then
        self._stop_cpu_ms = 0.0  # the CPU time at which its grace ends
        self.cpu_ms_limit = cpu_ms
        self.timeout_ms = timeout_ms
        self._cpu_budget_ms = float(cpu_ms)
        self._start = time.thread_time()
        # The same thread's clock, for the watchdog's thread (each reader measures from its own start).
        self._clock = _outside_clock()
        self._start_outside = time.clock_gettime(self._clock) if self._clock is not None else 0.0
        self.deadline = time.monotonic() + timeout_ms / 1000
        self.fired: str | None = None  # errors.CPU_LIMIT, errors.TIMEOUT or errors.INTERRUPTED once it must stop
        # Called on the run's thread at each epoch it reaches (streamed runs), with the store's context.
        self.on_tick: Callable[[object], None] | None = None

    @property
    def readable_from_outside(self) -> bool:
        return self._clock is not None

    def cpu_ms(self) -> float:
        """CPU used so far; on the run's own thread."""
        return (time.thread_time() - self._start) * 1000

    def _cpu_ms_from_outside(self) -> float | None:
        if self._clock is None:
            return None
        try:
            return (time.clock_gettime(self._clock) - self._start_outside) * 1000
        except OSError:  # from now on the run's callback reads its own clock (every tick)
            self._clock = None
            return None

    def interrupt(self) -> None:
        """From another thread: the run must stop as if over a budget (errors.INTERRUPTED);
        the watchdog's next tick stops it. A run already over a budget keeps that reason."""
        if self.fired is None:
            self.fired = errors.INTERRUPTED
        self.woken.set()

    def sleep(self, seconds: float) -> bool:
        """On the run's thread, in host code: wait `seconds`, or less if the run is
        interrupted meanwhile (True then)."""
        return self.woken.wait(max(0.0, seconds))

    def check(self, outside: bool = False) -> str | None:
        """Which budget the run is over, if any (and it stays marked so).
        From another thread (`outside`) the CPU clock is read only where it can be."""
        if self.fired is None:
            cpu_ms = self._cpu_ms_from_outside() if outside else self.cpu_ms()
            if time.monotonic() >= self.deadline:
                self.fired = errors.TIMEOUT
            elif cpu_ms is not None and cpu_ms >= self._cpu_budget_ms:
                self.fired = errors.CPU_LIMIT
        return self.fired

    def stopping(self, context: object) -> bool:
        """On the run's thread, once it is over a budget: True while it may still
        unwind. The first time, the guest is asked to raise where it is (its
        traceback then says which line ran away); the hard stop comes GRACE_S later,
        whether or not the code caught the exception."""
        if self._interrupt is None:
            return False
        now = time.monotonic()
        if self._stop_at is None:
            self._stop_at = now
            self._stop_waited_s = _waited_for_cpu_s()
            self._stop_cpu_ms = self.cpu_ms() + GRACE_S * 1000
            self._interrupt(context)
            return True
        elapsed = now - self._stop_at
        scheduled = elapsed - (_waited_for_cpu_s() - self._stop_waited_s)
        return elapsed < GRACE_WALL_MAX_S and scheduled < GRACE_WALL_S and self.cpu_ms() < self._stop_cpu_ms

    def error_message(self) -> str:
        if self.fired == errors.CPU_LIMIT:
            return errors.cpu_limit(self.cpu_ms_limit)
        if self.fired == errors.INTERRUPTED:
            return errors.interrupted()
        return errors.timed_out(self.timeout_ms)

    def error(self) -> RunError | None:
        """The run's error if it was marked over a budget."""
        return RunError(self.fired, self.error_message()) if self.fired is not None else None

    def hard_stop_error(self) -> RunError | None:
        """The error of a run stopped hard (trapped) once over a budget: why there is no traceback."""
        error = self.error()
        if error is None or self._stop_at is None:
            return error
        return RunError(error.type, (
            f"{error.message}; it did not stop within {GRACE_S * 1000:.0f} ms of being asked, so no"
            " traceback (a long call into C code, or code that caught the exception)"
        ))


_local = threading.local()


def current_watch() -> RunWatch | None:
    """The watch of the run on this thread, if one is in flight."""
    watch: RunWatch | None = getattr(_local, "watch", None)
    return watch


_current = current_watch


def _on_epoch(context: object) -> str | None:
    """On the run's thread, when the engine's epoch reached the store's deadline:
    the message that stops the run, or None to let it go on to the next epoch."""
    watch = _current()
    if watch is not None and watch.check() is not None and not watch.stopping(context):
        return watch.error_message()
    if watch is not None and watch.on_tick is not None:
        try:
            watch.on_tick(context)
        except Exception:  # streaming is a view of the run: its failure must not stop the run
            logger.exception("streaming a run's output failed; it goes on unstreamed")
            watch.on_tick = None
    return None


_EPOCH_CALLBACK = wasmtime_internals.EpochCallback(_on_epoch)


class Watchdog:
    """Stops runs over their CPU or wall-clock budget (see the module docstring).

    The thread sleeps until the earliest moment some run could be over a
    budget: a run's CPU time never exceeds the wall-clock time since it
    started, so no run needs a look before min(cpu_ms, timeout_ms) has passed
    since its start, and every TICK_S after that. A run that ends before then
    (most do) never wakes the thread (alarm.py)."""

    def __init__(self, engine: wasmtime.Engine, interval: float = TICK_S) -> None:
        self._engine = engine
        self._interval = interval
        self._runs: dict[RunWatch, float] = {}  # each run in flight -> when to look at it next
        self._lock = threading.Lock()
        self._alarm = Alarm()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="wasmrun-watchdog", daemon=True)
        self._thread.start()

    @staticmethod
    def arm(store: wasmtime.Store) -> None:
        """Before a store runs: the epoch callback, the deadline one epoch ahead."""
        _EPOCH_CALLBACK.arm(store)

    def start(
        self, cpu_ms: int, timeout_ms: int, interrupt: Callable[[object], None] | None = None,
        on_tick: Callable[[object], None] | None = None, run_id: str = "",
    ) -> RunWatch:
        """On the run's thread, just before it enters wasm. `interrupt` asks the
        guest to raise where it is (instances.Fresh.interrupt_caller), before a hard stop; `on_tick`
        runs at each epoch the run reaches (streamed runs)."""
        watch = RunWatch(cpu_ms, timeout_ms, interrupt, run_id)
        watch.on_tick = on_tick
        _local.watch = watch
        due = time.monotonic() + min(cpu_ms, timeout_ms) / 1000
        if not watch.readable_from_outside:
            due = time.monotonic() + self._interval  # its callback reads its clock: bump every tick
        elif on_tick is not None:
            due = time.monotonic() + self._interval * STREAM_POLL_TICKS  # its output is looked at every poll
        with self._lock:
            self._runs[watch] = due
            self._alarm.set(due)
        return watch

    def interrupt(self, run_id: str) -> bool:
        """Stop the run `run_id` if it is in flight here (True), as a budget would: its
        guest is asked to raise where it is, then stopped hard after the grace."""
        with self._lock:
            watch = next((w for w in self._runs if w.run_id == run_id), None) if run_id else None
            if watch is None:
                return False
            watch.interrupt()
            now = time.monotonic()
            self._runs[watch] = now  # looked at on the next tick: marked, so the epoch moves
            self._alarm.set(now)
        return True

    def finish(self, watch: RunWatch) -> None:
        """On the run's thread, once it left wasm (its clock is read no more after this)."""
        with self._lock:
            # The alarm stays set: one wake-up at that run's earliest possible end
            # (seconds away) costs less than a syscall on every run to unset it.
            self._runs.pop(watch, None)
        _local.watch = None

    def _loop(self) -> None:
        while True:
            self._alarm.wait()
            with self._lock:
                self._alarm.woke()
                if self._closed:
                    return
                try:
                    self._tick()
                except Exception:  # this thread must outlive any fault: every deadline depends on it
                    logger.exception("watchdog tick failed")
                    self._engine.increment_epoch()  # each run's callback checks its own budgets
                    for watch in self._runs:
                        self._runs[watch] = time.monotonic() + self._interval
                if self._runs:
                    self._alarm.set(min(self._runs.values()))

    def _tick(self) -> None:
        # Under the lock: a run's clock is read only while it is registered.
        # A bump on every tick while some run is marked and still registered, not only
        # when it is first marked: a bump can land while that run's callback is moving
        # its deadline one epoch ahead (it was under budget when it looked), and then it
        # needs another. Other runs only pass through their callback.
        now = time.monotonic()
        due = [watch for watch, at in self._runs.items() if at <= now]
        over = [watch for watch in due if watch.check(outside=True) is not None]
        for watch in due:  # past its earliest possible end (or streamed): looked at every tick from now on
            self._runs[watch] = now + self._interval * (STREAM_POLL_TICKS if watch.on_tick is not None else 1)
        poll = any(watch.on_tick is not None for watch in due)
        if over or poll or any(not watch.readable_from_outside for watch in due):
            self._engine.increment_epoch()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._alarm.set(0.0)
        self._thread.join()
        self._alarm.close()
