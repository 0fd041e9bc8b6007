"""`wasmrun bench`: its arguments and what it does with them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from wasmrun.cli.help import command

    bench = command(
        commands, "bench", "measure start-up, compute and memory in one interleaved run, side by side with native"
        " CPython subprocesses and the peer sandboxes installed here; print a table, write JSON and HTML if asked",
        "wasmrun bench --quick --json bench.json --html bench.html",
    )
    bench.add_argument("--quick", action="store_true", help="small sizes and few samples (seconds; default off)")
    bench.add_argument("--rounds", type=int, default=12, help="interleaved rounds (default 12)")
    bench.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                       help="workers of the measured server (default: the CPU count)")
    bench.add_argument("--json", type=Path, metavar="FILE",
                       help="write the figures and samples as JSON (schema: `--schema`, docs/bench.md; default none)")
    bench.add_argument("--html", type=Path, metavar="FILE",
                       help="write an HTML report with tables and charts (needs matplotlib: the `bench` extra; "
                       "default none)")
    bench.add_argument("--readme", type=Path, nargs="?", const=Path("README.md"), metavar="README",
                       help="rewrite the summary between the bench markers of README, and every row in "
                       "docs/bench-results.md beside it (default ./README.md)")
    bench.add_argument("--from-json", type=Path, metavar="FILE",
                       help="measure nothing: render the table, --html and --readme from an earlier --json (default off)")
    bench.add_argument("--compare", type=Path, metavar="OLD.json",
                       help="also print the change, row by row, from an earlier --json to this run (default off)")
    bench.add_argument("--schema", action="store_true", help="print the JSON schema of --json's file and exit (default: off)")
    bench.add_argument("--code", type=Path, metavar="FILE",
                       help="measure only FILE, a Python snippet: a fresh run of it on the stdlib image, the data "
                       "image (when built) and native CPython, the call and the snippet alone (default off)")
    bench.add_argument("--samples", type=int, default=20, help="samples per system for --code (default 20)")
    bench.add_argument("--cold", action="store_true",
                       help="add the cold rows: first `serve` to first answer with an empty and a warm cache, "
                       "`wasmrun mcp` to its first tool result, the one-file executable's start, the data image's "
                       "make (minutes; default off)")
    bench.add_argument("--tti", type=int, metavar="N",
                       help="time to interactive as ComputeSDK measures it: N sandboxes in a row and N at once "
                       "(default 100, their shape; 0 with --quick; 0: off)")
    bench.add_argument("--rows", metavar="KEY,...",
                       help="measure only these rows (their keys: fresh, http, jupyter, azure, packages-cached, "
                       "packages-new, compute:nbody...; `--rows list` lists them), none of the other sections "
                       "(default: every row)")
    bench.add_argument("--no-peers", action="store_true", help="leave out pydantic-monty and llm-wasm-sandbox (default off)")
    bench.add_argument("--no-pyodide", action="store_true", help="leave out Pyodide (default off)")


def _check(args: argparse.Namespace) -> None:
    """Before minutes of measuring: say now what would fail at the end (one line each)."""
    from wasmrun.bench import charts, report

    if args.rounds < 1 or args.rounds > 1000:
        raise ValueError("--rounds must be between 1 and 1000")
    if args.workers < 1 or args.workers > 64:
        raise ValueError("--workers must be between 1 and 64")
    if args.samples < 1 or args.samples > 10_000:
        raise ValueError("--samples must be between 1 and 10000")
    if args.tti is not None and not 0 <= args.tti <= 1000:
        raise ValueError("--tti must be between 0 and 1000")
    if args.rows is not None and args.rows != "list":
        from wasmrun.bench.rows import COMPUTE_ROWS, STARTUP

        unknown = set(args.rows.split(",")) - {row.key for row in STARTUP + COMPUTE_ROWS}
        if unknown:
            raise ValueError(f"--rows: no row {', '.join(sorted(unknown))} (`--rows list` lists them)")
    if args.html is not None:
        try:
            charts.pyplot()
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None
    for path in (args.json, args.html):
        if path is not None and not path.parent.is_dir():
            raise ValueError(f"{path.parent} is not a folder")
    if args.readme is not None and report.START not in args.readme.read_text():
        raise ValueError(f"{args.readme} has no bench markers")


def _figures(args: argparse.Namespace) -> dict[str, Any]:
    from wasmrun.bench import code, extra, report
    from wasmrun.bench.run import Options, finish, new_report
    from wasmrun.bench.run import run as measure

    if args.from_json is not None:
        return report.load(args.from_json)
    if args.code is not None:
        snippet = code.read_snippet(args.code)
        samples = 5 if args.quick else args.samples
        figures = new_report(args.quick, samples)  # each sample alternates the systems' order: a round
        figures["rows"], notes = code.measure(snippet, samples, args.code.name)
        figures["section_notes"] = {"code": notes}
        return finish(figures)
    rows = tuple(args.rows.split(",")) if args.rows is not None else None
    figures = measure(Options(quick=args.quick, rounds=args.rounds, workers=args.workers,
                              peers=not args.no_peers, pyodide=not args.no_pyodide, rows=rows),
                      extra=extra.Extra(cold=args.cold, tti=args.tti if args.tti is not None else 0 if args.quick else 100))
    return figures


def run(args: argparse.Namespace) -> int:
    from wasmrun.bench import compare, html, report, schema

    if args.schema:
        print(json.dumps(schema.SCHEMA, indent=1))
        return 0
    if args.rows == "list":
        from wasmrun.bench.rows import COMPUTE_ROWS, STARTUP

        print("\n".join(f"{row.key}\t{row.label}" for row in STARTUP + COMPUTE_ROWS))
        return 0
    _check(args)
    old = report.load(args.compare) if args.compare is not None else None
    figures = _figures(args)
    if args.from_json is None and args.json is not None:
        # Written first: a measurement takes minutes, rendering it must not be able to lose it.
        args.json.write_text(json.dumps(figures, indent=1))
    try:
        text = report.table(figures)
        page = html.render(figures) if args.html is not None else None
        change = compare.table(old, figures) if old is not None else None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, ZeroDivisionError) as exc:
        # Only a hand-made or truncated --from-json gets here: a measured run renders.
        raise ValueError(f"cannot render these figures ({type(exc).__name__}: {exc})") from None
    print(text)
    if change is not None:
        print("\n" + change)
    if args.html is not None and page is not None:
        args.html.write_text(page)
    full = report.rewrite_readme(args.readme, figures) if args.readme is not None else None
    for what, path in (("JSON", args.json), ("HTML", args.html), ("README", args.readme), ("every row", full)):
        if path is not None:
            print(f"wrote {what}: {path}", file=sys.stderr)
    return 0
