"""A skill run against a hello, in-process, on both images, interleaved (medians).

    python scripts/skill_vs_hello.py [--runs 60] [--images stdlib,data]

For each image: one engine; `execute_skill text.stats` (the bench's skill row
request) and a hello run, taken in ABBA order so neither always runs right
after the other, with the skill's pages on (made first, as a server
does after the skill's first run) and off (`skill_pages.enabled = False`: the
skill imports in each run). Reports each median (usage.total_ms and the
caller's wall time) and the skill/hello ratio the issue's bar is on (2x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wasmrun.bench.rows import text_stats_request
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import RunRequest, SandboxEngine, make_engine

HELLO = RunRequest(kind="code", code="def main(args):\n    print('hello')\n    return 1\n")


def _timed(engine: SandboxEngine, request: RunRequest) -> tuple[float, float]:
    start = time.perf_counter()
    result = engine.run(request)
    wall = (time.perf_counter() - start) * 1000
    if result.status != "completed":
        raise SystemExit(f"run failed: {result.error}")
    return result.usage.total_ms, wall


def measure(engine: SandboxEngine, runs: int, pages_on: bool) -> dict[str, list[float]]:
    engine.skill_pages.enabled = pages_on
    skill = text_stats_request()
    engine.run(skill)  # its first run: asks for its pages
    engine.skill_pages.wait_ready(120)
    out: dict[str, list[float]] = {"skill": [], "hello": [], "skill wall": [], "hello wall": []}
    steps = [("skill", skill), ("hello", HELLO)]
    for i in range(runs):
        for name, request in steps if i % 2 else reversed(steps):
            engine.wait_idle(2.0)  # a spare ready, as between an agent's calls
            total, wall = _timed(engine, request)
            out[name].append(total)
            out[name + " wall"].append(wall)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--images", default="stdlib,data")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        blobs = FileBlobStore(Path(tmp) / "blobs")
        engines = {name: make_engine(name, blobs, Path(tmp) / name) for name in args.images.split(",")}
        try:
            for pages_on in (True, False):
                for name, engine in engines.items():
                    found = measure(engine, args.runs, pages_on)
                    med = {k: statistics.median(v) for k, v in found.items()}
                    print(
                        f"{name:6} pages {'on ' if pages_on else 'off'}: "
                        f"skill {med['skill']:6.2f} ms, hello {med['hello']:5.2f} ms (total_ms), "
                        f"ratio {med['skill'] / med['hello']:4.1f}x; wall {med['skill wall']:6.2f} / "
                        f"{med['hello wall']:5.2f} ms"
                    )
        finally:
            for engine in engines.values():
                engine.close()


if __name__ == "__main__":
    main()
