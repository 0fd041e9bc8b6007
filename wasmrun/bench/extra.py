"""The sections a run adds after its interleaved rows, when asked: the cold rows (`--cold`,
cold.py) and time-to-interactive (`--tti N`, tti.py). Each answers rows in the report's
shape (schema.py's ROW), merged into report["rows"]."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Extra:
    cold: bool = False
    tti: int = 0  # sandboxes in a row, and at once; 0: off
    data_peers: bool = True


def measure(extra: Extra, report: dict[str, Any], tmp: Path, quick: bool, progress: Callable[[str], None]) -> None:
    if extra.tti:
        from wasmrun.bench import tti

        progress(f"time to interactive: {extra.tti} in a row, {extra.tti} at once ...")
        rows, notes = tti.measure(extra.tti, tmp / "tti")
        report["rows"].update(rows)
        report.setdefault("section_notes", {})["tti"] = notes
        report["published"] = tti.published()
    if extra.data_peers:
        from wasmrun.bench import datapeers

        progress("data stack beside its peers ...")
        rows, notes = datapeers.measure(samples=2 if quick else 10)
        report["rows"].update(rows)
        report.setdefault("section_notes", {})["data-peers"] = notes
    if extra.cold:
        from wasmrun.bench import cold

        progress("cold rows ...")
        rows, notes = cold.measure(tmp / "cold", samples=2 if quick else 5, progress=progress)
        report["rows"].update(rows)
        report.setdefault("section_notes", {})["cold"] = notes
