"""Sessions (issue 22), side by side in one run: `python scripts/bench.py --sessions`.

Rows, interleaved round by round so that machine noise falls on all alike:
  - a small run (`x = 1`) in-process: a fresh instance (SandboxEngine.run) against
    the same code in a warm session (its instance kept by the worker), and the
    difference of their medians: the session's own cost per run;
  - the same over HTTP (a real `wasmrun serve`): run_code against run_code with
    a session_id;
  - fork_session of a session holding ~100 MB (in-process SessionStore fork,
    and over HTTP);
  - resume of a paused session (the small one, and one of ~100 MB): its first
    run on an instance that is not warm (its image read from disk), against the
    same run warm;
  - a paused session's size on disk against its linear memory, for a session
    that touched little and one that holds 100 MB.

Each on one image: `rows(rounds, "data")` for the data image (bench.py --sessions runs
both when the data image is built; `python scripts/bench_sessions.py data` alone).
On the data image the small session also imports pandas and keeps a DataFrame.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from liveserver import LiveServer, wasmrun_env

from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import Limits, RunRequest, SandboxEngine, SessionRun, make_engine
from wasmrun.sessionstore.store import SessionStore

SMALL = "x = 1"
HUNDRED_MB = "data = bytearray(100 << 20)\nfor i in range(0, len(data), 4096):\n    data[i] = 1\nlen(data)"
LIMITS = Limits(memory_bytes=512 << 20, timeout_ms=60_000)


class InProcessSession:
    """A session driven straight through the engine, as a worker does, with a SessionStore's folders."""

    def __init__(self, engine: SandboxEngine, store: SessionStore, owner: str = "bench") -> None:
        self.engine, self.store = engine, store
        self.session_id, self.meta = store.create(owner, idle_timeout_s=3600, limits={}, skills=[], max_sessions=100)

    def run(self, code: str) -> float:
        meta = self.meta
        request = RunRequest(kind="code", code=code, limits=LIMITS, session=SessionRun(
            folder=str(self.store.folder(meta)), version=meta.version, reseed=meta.reseed))
        t = time.perf_counter()
        result = self.engine.run(request)
        self.store.finish_run(meta, result.session)
        elapsed = time.perf_counter() - t
        assert result.status == "completed", result.error
        return elapsed


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 3)


def _interleave(rows: dict[str, Callable[[], float]], rounds: int, burst: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, sample in rows.items():
            sample()  # warm-up, not recorded
            samples[name] += [sample() for _ in range(burst)]
    return {name: _median_ms(values) for name, values in samples.items()}


# What the small session holds before its timed runs: a notebook's first cell.
FIRST_CELL = {
    "stdlib": "import json",
    "data": "import json, numpy as np, pandas as pd\ndf = pd.DataFrame({'k': np.arange(10_000) % 7, 'v': np.arange(10_000)})",
}


def in_process(rounds: int, image: str = "stdlib") -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="wasmrun-bench-sessions-"))
    engine = make_engine(image, FileBlobStore(tmp / "blobs"), workspace_root=tmp / "work")
    try:
        store = SessionStore(tmp / "sessions")
        small = InProcessSession(engine, store)
        small.run(FIRST_CELL[image])

        def fresh() -> float:
            t = time.perf_counter()
            result = engine.run(RunRequest(kind="code", code=SMALL, limits=LIMITS))
            assert result.status == "completed"
            return time.perf_counter() - t

        figures = _interleave({"fresh run, in-process": fresh, "warm session run, in-process": lambda: small.run(SMALL)},
                              rounds, 10)
        figures["session cost per small run (ms)"] = round(
            figures["warm session run, in-process"] - figures["fresh run, in-process"], 3)
        cold = []
        for _ in range(max(3, rounds // 2)):
            engine.close_warm_sessions()  # paused: only its image on disk
            cold.append(small.run(SMALL))
        figures["resumed run of the small session (ms)"] = _median_ms(cold)
        figures["small session: memory MB"] = round(small.meta.memory_bytes / 2**20, 1)
        figures["small session: paused on disk MB"] = round(small.meta.disk_bytes / 2**20, 2)
        big = InProcessSession(engine, store)
        big.run(HUNDRED_MB)
        figures["100 MB session: memory MB"] = round(big.meta.memory_bytes / 2**20, 1)
        figures["100 MB session: paused on disk MB"] = round(big.meta.disk_bytes / 2**20, 1)
        figures.update(_fork_and_resume(engine, store, big, rounds))
        return figures
    finally:
        engine.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _fork_and_resume(engine: SandboxEngine, store: SessionStore, big: InProcessSession, rounds: int) -> dict[str, float]:
    forks: list[float] = []
    for _ in range(max(5, rounds)):
        t = time.perf_counter()
        store.acquire(big.meta)
        try:
            _, forked = store.create("bench", idle_timeout_s=60, limits={}, skills=[], max_sessions=100, source=big.meta)
        finally:
            store.release(big.meta)
        forks.append(time.perf_counter() - t)
        shutil.rmtree(store.folder(forked))
    cold: list[float] = []
    warm: list[float] = []
    for _ in range(max(3, rounds // 2)):
        engine.close_warm_sessions()  # paused: only its image on disk
        cold.append(big.run("len(data)"))
        warm.append(big.run("len(data)"))
    return {
        "fork of the 100 MB session, in-process (ms)": _median_ms(forks),
        "resumed run of the 100 MB session (ms)": _median_ms(cold),
        "warm run of the 100 MB session (ms)": _median_ms(warm),
    }


def over_http(rounds: int, image: str = "stdlib") -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="wasmrun-bench-sessions-http-"))
    server = LiveServer(tmp / "data", env={**wasmrun_env(), "WASMRUN_IMAGE": image})
    try:
        with httpx2.Client(timeout=120) as client:
            def call(method: str, **params: object) -> dict:
                body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
                answer: dict = client.post(server.endpoint, json=body).json()
                assert "result" in answer, answer
                return answer

            sid = call("create_session", language="python", limits={"memory_mb": 512})["result"]["session_id"]
            call("run_code", language="python", code=FIRST_CELL[image], session_id=sid)

            def timed(method: str, **params: object) -> Callable[[], float]:
                def sample() -> float:
                    t = time.perf_counter()
                    call(method, **params)
                    return time.perf_counter() - t
                return sample

            figures = _interleave({
                "run_code over HTTP": timed("run_code", language="python", code=SMALL),
                "run_code in a session over HTTP": timed("run_code", language="python", code=SMALL, session_id=sid),
            }, rounds, 10)
            figures["session cost per small run over HTTP (ms)"] = round(
                figures["run_code in a session over HTTP"] - figures["run_code over HTTP"], 3)
            call("run_code", language="python", code=HUNDRED_MB, session_id=sid)
            forks = []
            for _ in range(max(5, rounds)):
                t = time.perf_counter()
                forked = call("fork_session", session_id=sid)["result"]["session_id"]
                forks.append(time.perf_counter() - t)
                call("close_session", session_id=forked)
            figures["fork_session of a 100 MB session over HTTP (ms)"] = _median_ms(forks)
            return figures
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def rows(rounds: int, image: str = "stdlib") -> dict[str, float]:
    return {**in_process(rounds, image), **over_http(rounds, image)}


def render(figures: dict[str, float], image: str = "stdlib") -> list[str]:
    width = max(len(name) for name in figures)
    return [f"sessions on the {image} image (medians, ms unless named)"] + [
        f"  {name:<{width}}  {value:>9}" for name, value in figures.items()]


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "stdlib"
    print("\n".join(render(rows(5 if "--quick" in sys.argv else 15, chosen), chosen)))
