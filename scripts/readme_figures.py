"""Measure the README's figures and write them between its markers
(`<!-- figures:begin -->` ... `<!-- figures:end -->`): sizes and start times are never typed
by hand. Rows this run does not measure keep their last value.

    python scripts/readme_figures.py [--wheel] [--onefile] [--clean-clone] [--check]

--wheel        the wheel's size (builds it with `python -m build --wheel` into a temp folder)
--onefile      the one-file executable's size and start times (builds it: scripts/onefile.py);
               run from an empty folder with `env -i`, an empty cache for the first start
--clean-clone  `python -m build --wheel` from a clean clone with an empty guest cache (slow)
--check        only check that the markers are there (exit 1 if not)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
HEADER = "| figure | value |\n|---|---:|"
HELLO = "def main(args):\n    return 1 + 1\n"


def read_rows(text: str) -> dict[str, str]:
    """The figures now between the markers, by name."""
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("figure", "---") and not cells[0].startswith("-"):
            rows[cells[0]] = cells[1]
    return rows


def write_rows(text: str, rows: dict[str, str]) -> str:
    """`text` with the block between the markers replaced by `rows` (nothing else changes)."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"README.md must hold {BEGIN} once, then {END} once")
    body = "\n".join(f"| {name} | {value} |" for name, value in rows.items())
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    return f"{before}{BEGIN}\n{HEADER}\n{body}\n{END}{after}"


def _mb(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB"


def _timed(cmd: list[str], **kwargs: object) -> float:
    start = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, timeout=1800, **kwargs)  # type: ignore[call-overload]
    return time.monotonic() - start


def measure_wheel(rows: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _timed([sys.executable, "-m", "build", "--wheel", "--outdir", tmp, str(ROOT)])
        (wheel,) = Path(tmp).glob("wasmrun-*.whl")
        rows["wheel size (py3-none-any, guest and skills inside)"] = _mb(wheel)


def measure_clean_clone(rows: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clone, cache = Path(tmp) / "clone", Path(tmp) / "cache"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WASMRUN_")} | {"WASMRUN_CACHE_DIR": str(cache)}
        took = _timed([sys.executable, "-m", "build", "--wheel", "--outdir", str(Path(tmp) / "dist"), str(clone)], env=env)
        rows["`python -m build --wheel`, clean clone, empty guest cache"] = f"{took:.0f} s"


def measure_onefile(rows: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "onefile.py"), "--out", tmp],
                             check=True, capture_output=True, text=True).stdout
        exe = Path(out.strip().splitlines()[-1])
        home, cwd = Path(tmp) / "home", Path(tmp) / "empty"
        home.mkdir()
        cwd.mkdir()
        (cwd / "hello.py").write_text(HELLO)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
        run = [str(exe), "run", "hello.py"]
        first = _timed(run, cwd=cwd, env=env)
        later = [_timed(run, cwd=cwd, env=env) for _ in range(5)]
        rows[f"one-file executable size ({sys.platform}-{platform.machine()})"] = _mb(exe)
        rows["one-file: first `run hello.py` from an empty folder and cache"] = f"{first:.2f} s"
        rows["one-file: later `run hello.py` (median of 5)"] = f"{statistics.median(later):.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--wheel", "--onefile", "--clean-clone", "--check"):
        parser.add_argument(flag, action="store_true")
    args = parser.parse_args()
    text = README.read_text()
    if args.check:
        write_rows(text, {})  # raises without both markers
        return 0
    rows = read_rows(text)
    rows.pop("measured", None)
    before = dict(rows)
    if args.wheel:
        measure_wheel(rows)
    if args.clean_clone:
        measure_clean_clone(rows)
    if args.onefile:
        measure_onefile(rows)
    rows["machine"] = f"{os.cpu_count()} CPUs, {platform.machine()}; shared, so each figure says its load average"
    stamp = f"({datetime.now(UTC):%Y-%m-%d}, load {os.getloadavg()[0]:.1f})"
    for name, value in rows.items():
        if name != "machine" and before.get(name) != value:
            rows[name] = f"{value} {stamp}"
    README.write_text(write_rows(text, rows))
    print("\n".join(f"{k}: {v}" for k, v in rows.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
