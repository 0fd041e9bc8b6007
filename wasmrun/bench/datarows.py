"""The data image's rows of `wasmrun bench`: hello in-process and over HTTP, a run importing
numpy, pandas and matplotlib.pyplot, a pandas job, and a data server's RSS per worker.

Measured beside the stdlib rows when the data image is built (`python -m
wasmrun.sandbox.images` or `make guest`); otherwise each row is listed as absent
with that line, never built here (minutes). The in-process engine and the
`wasmrun serve --image data` server (one worker: each holds ~450 MB) are made
on the first sample and closed with the run.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmrun.bench.interleave import alternating, paced
from wasmrun.bench.systems import (
    HELLO,
    TEXT_STATS_CALL,
    Http,
    InProcess,
    Native,
    new_session,
    server,
    session_hello,
    text_stats_request,
)

if TYPE_CHECKING:
    from wasmrun.bench.run import Bench

IMPORTS = "import numpy, pandas, matplotlib.pyplot"
PANDAS_JOB = (
    "import numpy as np, pandas as pd\n"
    "frame = pd.DataFrame({'k': np.arange(20_000) % 7, 'v': np.linspace(0.0, 1.0, 20_000)})\n"
    "summary = frame.groupby('k')['v'].describe()"
)
DATA_INPROC = "wasmrun data image, in-process"
DATA_HTTP = "wasmrun data image, HTTP keep-alive"
DATA_HELLO = "data image hello in-process (for scale)"
DATA_PACED = "wasmrun data image, HTTP, 50-200 ms gaps"
DATA_SESSION_NEXT = "wasmrun data image, HTTP, a session's next run"
DATA_SESSION_LS = "wasmrun data image, HTTP, `ls` in a session (run_command)"
DATA_SESSION_PYTHON = "wasmrun data image, HTTP, `python -c 'print(1)'` in a session (run_command)"
TARGETS_MS = {"data-fresh": 2.0, "data-http": 5.0, "data-imports": 5.0}  # issue #21's


@functools.cache
def not_built() -> str | None:
    """Why the data rows cannot run here (None: they can). Never builds the image."""
    from wasmrun.sandbox import image_state

    why = image_state()
    if why is None:
        return None
    return f"the data image is not built ({why}); `python -m wasmrun.sandbox.images` or `make guest` builds it"


class DataInProcess(InProcess):
    """The data image's engine in this process: a fresh instance per run."""

    label = DATA_INPROC
    isolates = "CPython 3.15 + numpy, pandas, matplotlib in wasm (wasmtime): as the stdlib image"

    def __init__(self, blob_dir: Path) -> None:
        from wasmrun.blobs.store import FileBlobStore
        from wasmrun.sandbox import DataSandboxEngine

        self.blobs = FileBlobStore(blob_dir)
        self.engine = DataSandboxEngine(self.blobs)


class DataSide:
    """The data image's systems for one bench run, each made when first used."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self._stack = contextlib.ExitStack()
        self._inproc: DataInProcess | None = None
        self._http: Http | None = None
        self.session_id: str | None = None  # the data session row's, created on its first sample

    @property
    def inproc(self) -> DataInProcess:
        if self._inproc is None:
            self._inproc = DataInProcess(self.tmp / "blobs")
            self._stack.callback(self._inproc.close)
        return self._inproc

    @property
    def http(self) -> Http:
        if self._http is None:
            port, _proc = self._stack.enter_context(server(1, self.tmp / "serve", image="data"))
            self._http = Http(port)
            self._stack.callback(self._http.close)
        return self._http

    def settle(self) -> None:
        if self._inproc is not None:
            self._inproc.settle()

    def close(self) -> None:
        self._stack.close()


def open_side(tmp: Path) -> DataSide | None:
    return DataSide(tmp / "data-image") if not_built() is None else None


def _side(bench: Bench) -> DataSide:
    if bench.data is None:
        raise RuntimeError(not_built() or "the data image's systems are not open")
    return bench.data


def absent(bench: Bench) -> str | None:
    return not_built() if bench.data is None else None


def fresh_hello(bench: Bench) -> dict[str, float]:
    data = _side(bench)
    return alternating(bench, [
        (DATA_INPROC, lambda: data.inproc.sample(HELLO)),
        (InProcess.label, lambda: bench.inproc.sample(HELLO)),
        (Native.label, lambda: bench.native.sample(HELLO)),
    ])


def http_hello(bench: Bench) -> dict[str, float]:
    data = _side(bench)
    return alternating(bench, [
        (DATA_HTTP, lambda: data.http.sample(HELLO)),
        ("wasmrun, HTTP keep-alive", lambda: bench.http.sample(HELLO)),
        (Native.label, lambda: bench.native.sample(HELLO)),
    ])


def _with_hello(bench: Bench, label: str, source: str) -> dict[str, float]:
    data = _side(bench)
    return alternating(bench, [
        (label, lambda: data.inproc.sample(source)),
        (DATA_HELLO, lambda: data.inproc.sample(HELLO)),
    ])


def imports(bench: Bench) -> dict[str, float]:
    return _with_hello(bench, DATA_INPROC, IMPORTS)


def pandas_job(bench: Bench) -> dict[str, float]:
    return _with_hello(bench, DATA_INPROC, PANDAS_JOB)


def agent_pace(bench: Bench) -> dict[str, float]:
    data = _side(bench)
    return paced(bench, DATA_PACED, lambda: data.http.sample(HELLO), Native.label,
                 lambda: bench.native.sample(HELLO))


def skill_run(bench: Bench) -> dict[str, float]:
    data = _side(bench)
    request = text_stats_request()
    return alternating(bench, [
        (DATA_INPROC, lambda: data.inproc.run(request)),
        (DATA_HTTP, lambda: data.http.timed_call("execute_skill", TEXT_STATS_CALL)),
        (DATA_HELLO, lambda: data.inproc.sample(HELLO)),
    ])


def session_resume(bench: Bench) -> dict[str, float]:
    data = _side(bench)
    if data.session_id is None:
        data.session_id = new_session(data.http)
    params = session_hello(data.session_id)
    return alternating(bench, [
        (DATA_SESSION_NEXT, lambda: data.http.timed_call("run_code", params)),
        (DATA_HTTP, lambda: data.http.sample(HELLO)),
    ])


def session_commands(bench: Bench) -> dict[str, float]:
    """Issue #43's rows: `ls` and `python -c 'print(1)'` as commands in a session (the guest's
    shell, its files), beside a session's next run_code hello; the target is within 2x of it."""
    data = _side(bench)
    if data.session_id is None:
        data.session_id = new_session(data.http)
    hello = session_hello(data.session_id)
    ls = {"command": "ls", "session_id": data.session_id}
    python = {"command": "python -c 'print(1)'", "session_id": data.session_id}
    return alternating(bench, [
        (DATA_SESSION_LS, lambda: data.http.timed_call("run_command", ls)),
        (DATA_SESSION_PYTHON, lambda: data.http.timed_call("run_command", python)),
        (DATA_SESSION_NEXT, lambda: data.http.timed_call("run_code", hello)),
    ])


def by_workers(tmp: Path, counts: tuple[int, ...]) -> dict[str, Any]:
    """RSS and PSS of `serve --image data` with each worker count, after every worker ran hellos."""
    from wasmrun.bench import memory

    return memory.by_workers(tmp, counts, image="data", calls_per_client=10, label="data-mem")


def target_lines(rows: dict[str, Any]) -> list[str]:
    """Issue #21's start-up targets for the data image, read off its rows."""
    got = {key: rows.get(key, {}).get("systems", {}).get(label, {}).get("p50_ms")
           for key, label in (("data-fresh", DATA_INPROC), ("data-http", DATA_HTTP), ("data-imports", DATA_INPROC))}
    if None in got.values():
        return []
    parts = [f"{what} {got[key]:.2f} ms p50 (goal <= {TARGETS_MS[key]:.0f} ms)" for key, what in
             (("data-fresh", "hello in-process"), ("data-http", "hello over HTTP"),
              ("data-imports", "a run importing numpy, pandas and matplotlib.pyplot"))]
    return ["", "Data image: " + "; ".join(parts) + "."]


def memory_lines(mem: dict[str, Any]) -> list[str]:
    lines = ["", "| memory, data image | server | per worker (RSS / PSS) | total RSS | total PSS |",
             "|---|---:|---|---:|---:|"]
    for workers, m in mem.items():
        per = ", ".join(f"{w['rss_mb']:.0f} / {w['pss_mb']:.0f} MB" for w in m["workers"])
        lines.append(f"| {workers} worker(s) | {m['server']['rss_mb']:.0f} MB | {per} | {m['total_rss_mb']:.0f} MB "
                     f"| {m['total_pss_mb']:.0f} MB |")
    return lines


__all__ = ["DataSide", "open_side"]
