"""Where a warm session run's time goes, on both images side by side (medians).

    python scripts/session_phases.py [--runs 80] [--images stdlib,data]          in-process
    python scripts/session_phases.py --http [--runs 80] [--images stdlib,data]   over HTTP

In-process: one engine per image in this process, a session on each (its first run
untimed), then warm runs (`wasmrun bench`'s session row: a hello in the session)
alternating between the images run by run. Each phase is timed by wrapping the
engine's own functions for this process only (nothing changes for real runs):
staging the version's folders, taking the warm instance, the run's WASI set-up,
the guest itself, the run's result, removing the run-only folders, the session's
pages (which pages were written, which differ from the base, the delta written),
keeping the instance, and the store recording the version (the server's half).

--http: one `wasmrun serve`-like server per image (one worker each, uvloop +
httptools), the client alternating between them request by request; each server
records wasmrun/phases.py's marks and the worker pipe (as wasmrun/bench/hops.py
does for a hello), the result's `usage.total_ms` is the worker's engine.run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wasmrun import phases
from wasmrun.bench.systems import HELLO, as_run_code

CODE = as_run_code(HELLO)  # the bench's session row: a hello in the session
steps = phases.StepTimes()
spent, timed = steps.spent, steps.timed


def instrument(engines: list[Any]) -> None:
    """Wrap the session run's steps (module functions once, each engine's own parts)."""
    from wasmrun.sandbox import outcome, redaction
    from wasmrun.sandbox.guest import guestrequest, hostcalls
    from wasmrun.sandbox.sessions import pages
    from wasmrun.sandbox.sessions import run as session_run

    session_run.stage = timed("stage: N+1's folders", session_run.stage)
    session_run.backgroundruns.skill_bytecode = timed("skill bytecode", session_run.backgroundruns.skill_bytecode)

    class Tree:
        remove = staticmethod(timed("run-only folders removed", session_run.dirtree.remove))

    session_run.dirtree = Tree  # type: ignore[assignment]
    session_run.files_size = timed("save: files' size", session_run.files_size)
    pages.written_spans = timed("save: written pages (pagemap)", pages.written_spans)
    pages._span_table = timed("save: base's span table", pages._span_table)
    pages._changed = timed("save: compare with the base", pages._changed)
    pages._write = timed("save: write the delta/base", pages._write)
    pages._link = timed("save: link the base", pages._link)
    pages.load = timed("load: pages into a spare", pages.load)
    session_run.close_instance = timed("close an instance", session_run.close_instance)
    guestrequest.encode = timed("request encoded", guestrequest.encode)
    outcome.result = timed("result: checked", outcome.result)
    redaction.redact_result = timed("result: redacted", redaction.redact_result)
    hostcalls.RunContext.drain_guest_output = timed(  # type: ignore[method-assign]
        "output drained", hostcalls.RunContext.drain_guest_output)
    for engine in engines:
        loop, image, warm = engine.loop, engine.image, engine.warm_sessions
        warm.take = timed("warm instance: take", warm.take)
        warm.keep = timed("warm instance: keep", warm.keep)
        loop._workspace = timed("workspace (measured)", loop._workspace)
        image.preopens = timed("WASI set-up (preopens)", image.preopens)
        image.enter = timed("guest (entry to return)", image.enter)
        image.finish = timed("result: image's finish (figures)", image.finish)
        loop.run_in = timed("run_in (all)", loop.run_in)


def in_process(runs: int, images: list[str]) -> dict[str, dict[str, list[float]]]:
    from wasmrun.blobs.store import FileBlobStore
    from wasmrun.sandbox import Limits, RunRequest, SessionRun, make_engine
    from wasmrun.sessionstore.store import SessionStore

    rows: dict[str, dict[str, list[float]]] = {i: collections.defaultdict(list) for i in images}
    with tempfile.TemporaryDirectory() as tmp:
        engines = {i: make_engine(i, FileBlobStore(Path(tmp) / i / "blobs"), Path(tmp) / i / "work") for i in images}
        stores = {i: SessionStore(Path(tmp) / i / "sessions") for i in images}
        metas = {i: stores[i].create("bench", idle_timeout_s=3600, limits={}, skills=[], max_sessions=9)[1]
                 for i in images}
        finish_run = {i: timed("store: version recorded", stores[i].finish_run) for i in images}

        def one(image: str) -> float:
            meta = metas[image]
            request = RunRequest(kind="code", code=CODE, limits=Limits(timeout_ms=60_000), session=SessionRun(
                folder=str(stores[image].folder(meta)), version=meta.version, reseed=meta.reseed))
            start = time.perf_counter()
            result = engines[image].run(request)
            finish_run[image](meta, result.session)
            total = (time.perf_counter() - start) * 1000
            assert result.status == "completed" and result.session and result.session.committed, result.error
            return total

        try:
            for image in images:
                one(image)  # the session's first run: from a spare
                one(image)
            instrument(list(engines.values()))
            for n in range(runs):
                for image in images if n % 2 == 0 else images[::-1]:
                    time.sleep(0.02)  # housekeeping (the old version's removal) done, as at an agent's pace
                    spent.clear()
                    total = one(image)
                    for name, ms in spent.items():
                        rows[image][name].append(ms)
                    rows[image]["total (engine.run + finish_run)"].append(total)
        finally:
            for engine in engines.values():
                engine.close()
    return rows


# ---------------------------------------------------------------- over HTTP


def serve(image: str, port: int, data_dir: Path) -> None:
    """A server as `wasmrun serve --image IMAGE --workers 1`, its marks written at exit."""
    import wasmrun.settings

    made = wasmrun.settings.Settings
    wasmrun.settings.Settings = lambda **kw: made(**{**kw, "image": image})  # type: ignore[misc,assignment]
    from wasmrun.bench import hops

    hops.serve("lean", port, data_dir, data_dir / "marks.json")


def over_http(runs: int, images: list[str]) -> dict[str, Any]:
    from wasmrun.bench import hops

    with tempfile.TemporaryDirectory() as tmp:
        ports = {i: hops._free_port() for i in images}
        procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for i in images:
                (Path(tmp) / i).mkdir()
                procs[i] = subprocess.Popen(
                    [sys.executable, __file__, "--serve", i, str(ports[i]), f"{tmp}/{i}"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ},
                )
            for i in images:
                hops.wait_up(ports[i], procs[i])
            clients = {i: hops.Client(ports[i]) for i in images}
            sessions = {i: clients[i].call("create_session", {"language": "python"})[2]["session_id"] for i in images}
            params = {i: {"language": "python", "code": CODE, "session_id": sessions[i]} for i in images}
            for _ in range(3):
                for i in images:
                    clients[i].call("run_code", params[i])
            samples: dict[str, list[Any]] = {i: [] for i in images}
            for n in range(runs):
                for i in images if n % 2 == 0 else images[::-1]:
                    time.sleep(0.02)
                    samples[i].append(clients[i].call("run_code", params[i]))
            for c in clients.values():
                c.sock.close()
        finally:
            for p in procs.values():
                p.terminate()
            for p in procs.values():
                p.wait(timeout=30)
        marks = {i: json.loads((Path(tmp) / i / "marks.json").read_text()) for i in images}
    return {i: {"hops_ms": hops.summarise(samples[i], marks[i]), "threads_us": {}} for i in images}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=80)
    parser.add_argument("--images", default="stdlib,data")
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]), Path(args.serve[2]))
        return
    images = args.images.split(",")
    print(f"load average before: {os.getloadavg()}")
    if args.http:
        from wasmrun.bench import hops

        print(hops.table(over_http(args.runs, images)))
    else:
        rows = in_process(args.runs, images)
        names = list(dict.fromkeys(name for i in images for name in rows[i]))
        print(f"{'phase (ms, median)':40}" + "".join(f"{i:>10}" for i in images))
        for name in names:
            cells = [f"{statistics.median(rows[i][name]):10.3f}" if rows[i].get(name) else f"{'-':>10}" for i in images]
            print(f"{name:40}" + "".join(cells))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
