"""`wasmrun bench --code FILE`: a user's snippet timed on the stdlib image, the data image
(when built) and native CPython, with one method for all three.

Each sample is a fresh interpreter (a new sandbox instance; a new `python3 -I` process)
running the snippet as a module, and gives two figures: the whole call, as a caller waits
for it (start-up included), and the snippet alone (`time.perf_counter` around `exec` of it,
inside the interpreter). The systems alternate their order sample by sample (A B C, C B A),
so machine noise falls on all alike. A system the snippet fails on is noted with the error,
not timed.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wasmrun.bench.stats import summary
from wasmrun.bench.systems import COMPUTE_LIMITS, InProcess, as_run_code
from wasmrun.sandbox import RunRequest

MAX_BYTES = 1 << 20  # a snippet, not a program: what a run_code request carries
STDLIB = "wasmrun stdlib image, in-process"
DATA = "wasmrun data image, in-process"
NATIVE = "native CPython subprocess (python3 -I)"


def read_snippet(path: Path) -> str:
    """The snippet's text, or a ValueError saying what is wrong with the file."""
    if not path.is_file():
        raise ValueError(f"--code {path}: not a file")
    if path.stat().st_size > MAX_BYTES:
        raise ValueError(f"--code {path}: larger than {MAX_BYTES // 1024} KiB")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"--code {path}: not UTF-8 (byte {exc.start})") from None
    if "\x00" in text:
        raise ValueError(f"--code {path}: contains a NUL character")
    try:
        compile(text, str(path.name), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ValueError(f"--code {path}: not Python: line {exc.lineno}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"--code {path}: cannot be compiled ({type(exc).__name__})") from None
    return text


def timed_module(snippet: str) -> str:
    """The snippet run by `exec` with the clock around it (its own __future__ imports and
    globals kept apart); ELAPSED holds its seconds."""
    return (f"import time as _bench_time\n_bench_code = compile({snippet!r}, '<snippet>', 'exec')\n"
            "_bench_t0 = _bench_time.perf_counter()\nexec(_bench_code, {'__name__': '__main__'})\n"
            "ELAPSED = _bench_time.perf_counter() - _bench_t0\n")


class _Sandbox:
    def __init__(self, engine: InProcess) -> None:
        self.engine = engine

    def __call__(self, module: str) -> tuple[float, float]:
        request = RunRequest(kind="code", code=as_run_code(module, "ELAPSED"), limits=COMPUTE_LIMITS)
        self.engine.settle()
        t = time.perf_counter()
        result = self.engine.engine.run(request)
        call = time.perf_counter() - t
        if result.status != "completed":
            error = result.error
            raise RuntimeError(f"{error.type}: {error.message}"[:300] if error else result.status)
        return call, float(result.output)


def _native(module: str) -> tuple[float, float]:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-I", "-c", module + "\nprint(repr(ELAPSED))\n"],
                          capture_output=True, text=True, timeout=600)
    call = time.perf_counter() - t
    if done.returncode != 0:
        last = [line for line in done.stderr.splitlines() if line.strip()]
        raise RuntimeError(last[-1][:300] if last else f"exit code {done.returncode}")
    return call, float(done.stdout.strip().splitlines()[-1])


def _systems(tmp: Path, stack: list[Callable[[], None]], notes: list[str]) -> list[tuple[str, Any]]:
    from wasmrun.bench import datarows

    stdlib = InProcess(tmp / "blobs")
    stack.append(stdlib.close)
    systems: list[tuple[str, Any]] = [(STDLIB, _Sandbox(stdlib))]
    why = datarows.not_built()
    if why is None:
        data = datarows.DataInProcess(tmp / "data-blobs")
        stack.append(data.close)
        systems.append((DATA, _Sandbox(data)))
    else:
        notes.append(f"{DATA}: absent ({why})")
    systems.append((NATIVE, _native))
    return systems


def measure(snippet: str, samples: int, name: str) -> tuple[dict[str, Any], list[str]]:
    """Rows `code:call` and `code:inside`, and the notes (absent systems, failures)."""
    module = timed_module(snippet)
    notes: list[str] = []
    closers: list[Callable[[], None]] = []
    calls: dict[str, list[float]] = {}
    inside: dict[str, list[float]] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="wasmrun-bench-code-") as tmp:
        try:
            systems = _systems(Path(tmp), closers, notes)
            for i in range(samples + 1):  # the first is a warm-up (first faults, caches)
                for label, run in systems if i % 2 else reversed(systems):
                    if label in failed:
                        continue
                    try:
                        call, own = run(module)
                    except (RuntimeError, subprocess.SubprocessError, ValueError) as exc:
                        failed[label] = str(exc)
                        continue
                    if i:
                        calls.setdefault(label, []).append(call)
                        inside.setdefault(label, []).append(own)
        finally:
            for close in reversed(closers):
                close()
    notes += [f"{label}: the snippet failed ({why}); not timed" for label, why in failed.items()]
    rows = {}
    for key, what, per in (("code:call", "a fresh interpreter running the snippet, as its caller waits", calls),
                           ("code:inside", "the snippet alone, timed inside the interpreter", inside)):
        rows[key] = _row(f"{name}: {'whole call' if key == 'code:call' else 'the snippet alone'}", what, per)
    return rows, notes


def _row(label: str, what: str, per: dict[str, list[float]]) -> dict[str, Any]:
    base = summary(per[NATIVE])["p50_ms"] if per.get(NATIVE) else None
    systems = {}
    for system, values in per.items():
        fig = summary(values)
        fig["ratio"] = fig["p50_ms"] / base if base else None
        systems[system] = fig
    return {"label": label, "section": "code", "what": what, "baseline": NATIVE, "systems": systems,
            "samples_ms": {k: [v * 1000 for v in vs] for k, vs in per.items()}}
