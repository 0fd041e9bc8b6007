"""Where one in-process hello run's time goes, phase by phase (medians).

    python scripts/hello_phases.py [--runs 150] [--image stdlib|data] [--skill]

Each phase is timed by wrapping the engine's own functions for this process
only (nothing is changed for real runs): taking the spare instance, the run's
WASI set-up, the watchdog, the guest itself (entry to return, in wasm),
capturing its output, checking its result, and handing the instance back.
"Other host" is what engine.run spends outside these. For the bench command to
show as a row, so that the next start-up regression shows where it is.
`--skill`: the bench's `execute_skill text.stats` from its skill's pages instead
(naming the skill's version, and writing its pages in when no spare has them).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wasmrun import phases
from wasmrun.bench.rows import text_stats_request
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import RunRequest, SandboxEngine, make_engine, outcome, redaction
from wasmrun.sandbox import engine as engine_module
from wasmrun.sandbox.budget import wasi_guard
from wasmrun.sandbox.guest import door, guestrequest, hostcalls
from wasmrun.sandbox.guest.wasmtime_internals import FastFunc
from wasmrun.sandbox.images import dataimage, datastart
from wasmrun.sandbox.memory import skillpages

HELLO = "def main(args):\n    print('hello')\n    return 1\n"
steps = phases.StepTimes()
spent, timed = steps.spent, steps.timed


def instrument(engine: SandboxEngine) -> None:
    supply = engine.loop.supply
    supply.take = timed("instance: take a spare", supply.take)  # type: ignore[method-assign]
    image = engine.image
    image.preopens = timed("instance: WASI set-up (preopens)", image.preopens)  # type: ignore[method-assign]
    guestrequest.encode = timed("guest request: encode", guestrequest.encode)
    watchdog = engine.loop.watchdog
    watchdog.start = timed("watchdog: start", watchdog.start)  # type: ignore[method-assign]
    watchdog.finish = timed("watchdog: finish", watchdog.finish)  # type: ignore[method-assign]
    if isinstance(engine.image, dataimage.DataImage):
        # The turn holds the door's host calls and the guarded WASI calls (print) the guest makes.
        datastart.DoorTurn.__call__ = timed(  # type: ignore[method-assign]
            "guest: turn (wasm, door and WASI calls)", datastart.DoorTurn.__call__
        )
        door.answer = timed("guest: door frames (host side)", door.answer)
        wasi_guard._capture = timed("guest: print captured (host side)", wasi_guard._capture)
        dataimage.add_figures = timed("result: figures in /workspace", dataimage.add_figures)
    else:
        FastFunc.__call__ = timed("guest: entry to return (wasm)", FastFunc.__call__)  # type: ignore[method-assign]
    hostcalls.RunContext.drain_guest_output = timed(  # type: ignore[method-assign]
        "capture: guest output", hostcalls.RunContext.drain_guest_output
    )
    outcome.result = timed("result: check the output", outcome.result)
    redaction.redact_result = timed("result: redact secrets", redaction.redact_result)
    supply.retire = timed("teardown: hand back", supply.retire)  # type: ignore[method-assign]
    skillpages.SkillPages.apply = timed("skill: its pages written in", skillpages.SkillPages.apply)  # type: ignore[method-assign]
    engine._skill_pages_for = timed("skill: its pages looked up (key)", engine._skill_pages_for)  # type: ignore[method-assign]
    engine_module.stamp_skills = timed("skill: its files stamped (once a run)", engine_module.stamp_skills)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=150)
    parser.add_argument("--image", choices=("stdlib", "data"), default="stdlib")
    parser.add_argument("--skill", action="store_true", help="text.stats from its skill's pages, not hello")
    args = parser.parse_args()
    rows: dict[str, list[float]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp, make_engine(args.image, FileBlobStore(Path(tmp))) as engine:
        request = RunRequest(kind="code", code=HELLO)
        if args.skill:
            request = text_stats_request()
            engine.run(request)
            engine.skill_pages.wait_ready(120)
        instrument(engine)
        for _ in range(args.runs):
            engine.wait_idle()
            spent.clear()
            start = time.perf_counter()
            result = engine.run(request)
            total = (time.perf_counter() - start) * 1000
            assert result.status == "completed", result.error
            for name, ms in spent.items():
                rows[name].append(ms)
            rows["other host"].append(total - sum(spent.values()))
            rows["total (engine.run)"].append(total)
    for name, values in rows.items():
        print(f"{name:36} {statistics.median(values):7.3f} ms")


if __name__ == "__main__":
    main()
