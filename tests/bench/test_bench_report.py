"""`wasmrun bench`'s report, from the figures of a real (small) run: the JSON against its
documented schema, `--code` on the images and natively, `--compare` between two runs, the
one-line message without matplotlib, and the HTML page read in a real headless Chromium
(its tables' cells, its charts drawn). Nothing here asserts how fast anything is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.liveserver import TESTS
from wasmrun.bench import code, datarows, schema
from wasmrun.bench.stats import ms

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("matplotlib")

SNIPPET = "from __future__ import annotations\nimport json\ntotal = sum(len(json.dumps({'i': i})) for i in range(2000))\n"


def _bench(*argv: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmrun", "bench", *argv], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def code_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    tmp = tmp_path_factory.mktemp("bench-code")
    snippet = tmp / "snippet.py"
    snippet.write_text(SNIPPET)
    done = _bench("--code", str(snippet), "--samples", "3", "--json", str(tmp / "code.json"),
                  "--html", str(tmp / "code.html"))
    assert done.returncode == 0, done.stderr[-3000:]
    return done, tmp / "code.json", tmp / "code.html"


def test_code_runs_the_snippet_on_each_image_and_natively(code_run: Any) -> None:
    figures = json.loads(code_run[1].read_text())
    systems = [code.STDLIB, code.NATIVE] + ([code.DATA] if datarows.not_built() is None else [])
    for key in ("code:call", "code:inside"):
        row = figures["rows"][key]
        assert sorted(row["systems"]) == sorted(systems), row["systems"]
        for fig in row["systems"].values():
            assert fig["n"] == 3 and 0 < fig["p50_ms"] <= fig["p90_ms"] <= fig["p99_ms"] <= fig["max_ms"]
        assert row["systems"][code.NATIVE]["ratio"] == 1.0
    # The snippet alone is part of the whole call, on every system.
    for system in systems:
        assert figures["rows"]["code:inside"]["systems"][system]["p50_ms"] < \
            figures["rows"]["code:call"]["systems"][system]["max_ms"]
    table = code_run[0].stdout
    assert "| your code (--code) | system | p50 | p90 | p99 | max | n |" in table
    assert f"| snippet.py: whole call | {code.STDLIB} |" in table


def test_the_json_follows_its_documented_schema(code_run: Any) -> None:
    figures = json.loads(code_run[1].read_text())
    jsonschema.validate(figures, schema.SCHEMA)
    assert figures["schema_version"] == schema.SCHEMA_VERSION
    host = figures["host"]
    assert host["cores"] >= 1 and host["cpu_model"] and len(host["load_before"]) == len(host["load_after"]) == 3
    printed = _bench("--schema")
    assert printed.returncode == 0 and json.loads(printed.stdout) == schema.SCHEMA
    broken = {**figures, "rows": {"x": {**figures["rows"]["code:call"], "systems": {"a": {"n": 1, "p50_ms": 1}}}}}
    with pytest.raises(jsonschema.ValidationError):  # a figure without p90/p99/max is not one
        jsonschema.validate(broken, schema.SCHEMA)


def test_a_snippet_that_fails_on_an_image_is_noted_not_timed(tmp_path: Path) -> None:
    snippet = tmp_path / "pd.py"
    snippet.write_text("import pandas\n")
    done = _bench("--code", str(snippet), "--samples", "1", "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert code.STDLIB not in rows["code:call"]["systems"]  # the stdlib image has no pandas
    assert f"{code.STDLIB}: the snippet failed (ModuleNotFoundError" in done.stdout
    if datarows.not_built() is None:
        assert rows["code:call"]["systems"][code.DATA]["n"] == 1


@pytest.mark.parametrize(("content", "message"), [
    (b"\xff\xfe print(1)", "not UTF-8"), (b"x = 1\x00\n", "NUL"), (b"def f(:\n", "not Python: line 1"),
    (b"(" * 100_000, "--code"), (b"x" * (code.MAX_BYTES + 1), "larger than"),
])
def test_a_bad_snippet_file_is_one_clear_line(tmp_path: Path, content: bytes, message: str) -> None:
    snippet = tmp_path / "bad.py"
    snippet.write_bytes(content)
    done = _bench("--code", str(snippet), timeout=120)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    for path in (tmp_path, tmp_path / "missing.py"):
        done = _bench("--code", str(path), timeout=120)
        assert done.returncode == 2 and "not a file" in done.stderr and "Traceback" not in done.stderr


def test_an_empty_cache_holds_the_built_guest_and_nothing_compiled(tmp_path: Path) -> None:
    """What the cold rows call an empty cache: the guest a wheel ships, nothing else."""
    from python_wasm.downloads import cache_root
    from wasmrun.bench import cold

    folder = cold.empty_cache(tmp_path)
    assert [p.name for p in folder.iterdir()] == ["guest"]
    ours = sorted(p.relative_to(Path(cache_root()) / "guest") for p in (Path(cache_root()) / "guest").rglob("*"))
    assert sorted(p.relative_to(folder / "guest") for p in (folder / "guest").rglob("*")) == ours


def test_compare_prints_the_change_row_by_row(code_run: Any, tmp_path: Path) -> None:
    new = json.loads(code_run[1].read_text())
    old = json.loads(json.dumps(new))
    for fig in old["rows"]["code:call"]["systems"].values():
        fig["p50_ms"] *= 2  # the old run twice as slow: now 50% faster
    old["rows"]["gone"] = {**old["rows"]["code:call"], "label": "a row this run lacks"}
    (tmp_path / "old.json").write_text(json.dumps(old))
    done = _bench("--from-json", str(code_run[1]), "--compare", str(tmp_path / "old.json"), timeout=120)
    assert done.returncode == 0, done.stderr
    change = done.stdout.split("Change from", 1)[1]
    assert f"| snippet.py: whole call | {code.STDLIB} |" in change and "-50% (faster)" in change
    assert f"| snippet.py: the snippet alone | {code.STDLIB} |" in change and "~ (+0.0%)" in change
    assert f"| a row this run lacks | {code.STDLIB} |" in change  # listed, its "now" empty
    (tmp_path / "junk.json").write_text("[1]")
    done = _bench("--from-json", str(code_run[1]), "--compare", str(tmp_path / "junk.json"), timeout=120)
    assert done.returncode == 2 and "not a bench JSON file" in done.stderr and "Traceback" not in done.stderr


def test_html_without_matplotlib_is_one_line(tmp_path: Path) -> None:
    """Without the `bench` extra: one line naming it, before anything is measured."""
    hide = ("import sys; sys.modules['matplotlib'] = None; from wasmrun.cli.main import main; "
            f"sys.exit(main(['bench', '--quick', '--html', {str(tmp_path / 'r.html')!r}]))")
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "wasmrun: " + code_html_missing()
    assert not (tmp_path / "r.html").exists()


def code_html_missing() -> str:
    from wasmrun.bench import charts

    return charts.MISSING


# -- the page in a browser -----------------------------------------------------------


def test_the_report_reads_as_tables_and_charts_in_a_browser(browser: Any, code_run: Any) -> None:
    figures = json.loads(code_run[1].read_text())
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    try:
        page.goto(code_run[2].resolve().as_uri())
        machine = page.locator("table.machine").inner_text()
        assert figures["host"]["cpu_model"] in machine and "before" in machine and "after" in machine
        table = page.locator('table.figures[data-section="your code (--code)"]')
        headers = table.locator("thead th").all_inner_texts()
        assert headers[:7] == ["row", "system", "p50", "p90", "p99", "max", "n"]
        cells = [row.locator("td").all_inner_texts() for row in table.locator("tbody tr").all()]
        by_system = {(c[0], c[1]): c for c in cells}
        fig = figures["rows"]["code:call"]["systems"][code.STDLIB]
        got = by_system[("snippet.py: whole call", code.STDLIB)]
        assert got[2:6] == [ms(fig[k]) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")]
        assert got[6] == "3"
        charts = page.locator('svg[role="img"]')
        assert charts.count() >= 2  # a distribution per row
        for i in range(charts.count()):
            box = charts.nth(i).bounding_box()
            assert box is not None and box["width"] > 300 and box["height"] > 100
        chart_text = page.locator("figure.chart").first.text_content() or ""
        # Values printed beside the marks, and a log axis labelled in plain numbers.
        assert f"p50 {fig['p50_ms']:.2f}" in chart_text or f"p50 {fig['p50_ms']:,.0f}" in chart_text
        assert "ms (log scale" in chart_text and "10^" not in chart_text
        artifacts = TESTS / "artifacts"
        artifacts.mkdir(exist_ok=True)
        page.screenshot(path=str(artifacts / "bench-report.png"), full_page=True)
    finally:
        page.close()
