"""The command line's limit options, derived from the declarations (wasmrun/limits.py):
`wasmrun run --limit NAME=N` and its shorthands (`--timeout-ms`, `--memory-mb`),
`wasmrun session create`'s, and `wasmrun tenants add|set --limit NAME=N`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from wasmrun.limits import REQUESTABLE, RUN_LIMIT
from wasmrun.tenants.limits import parse_limit

if TYPE_CHECKING:
    from wasmrun.protocol.types import RunLimits

TENANT_LIMIT_HELP = "override one limit (names and units below); repeatable; default: the server's defaults"


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_run_limit_options(parser: argparse.ArgumentParser) -> None:
    """`--limit NAME=N` for every member of a request's `limits`, and `--NAME N` for
    the declared shorthands, each saying its default."""
    parser.add_argument(
        "--limit", action="append", default=[], metavar="NAME=N",
        help="a run limit (names, units, defaults below); repeatable; default: the server's defaults",
    )
    for limit in REQUESTABLE:
        if limit.option:
            parser.add_argument(
                _option(limit.name), type=int, metavar="N",
                help=f"same as --limit {limit.name}=N (default {limit.default})",
            )


def add_limit_shorthands(parser: argparse.ArgumentParser, names: tuple[str, ...], whose: str) -> None:
    """`--NAME N` for the run limits `names`, their help from the declaration; the
    default is `whose` (e.g. "the server's")."""
    for name in names:
        parser.add_argument(
            _option(name), type=int, metavar="N", help=f"{RUN_LIMIT[name].help} (default: {whose})"
        )


def run_limits(args: argparse.Namespace) -> RunLimits:
    """A request's `limits` from `--limit NAME=N`... and the shorthands (which win);
    the server checks the ranges (-32602 naming the member)."""
    from wasmrun.protocol.types import RunLimits

    known = [limit.name for limit in REQUESTABLE]
    values: dict[str, int] = {}
    for text in args.limit:
        name, value = parse_limit(text)
        if name not in known:
            raise ValueError(f"unknown run limit {name!r} (known: {', '.join(known)})")
        if value < 1:
            raise ValueError(f"run limit {name} must be at least 1")
        values[name] = value
    for limit in REQUESTABLE:
        if limit.option and getattr(args, limit.name, None) is not None:
            values[limit.name] = getattr(args, limit.name)
    return RunLimits(**values)


def add_tenant_limit_option(parser: argparse.ArgumentParser, *, required: bool) -> None:
    if required:
        parser.add_argument(
            "--limit", action="append", required=True, metavar="NAME=N",
            help="one limit (names and units below); repeatable; at least one",
        )
    else:
        parser.add_argument("--limit", action="append", default=[], metavar="NAME=N", help=TENANT_LIMIT_HELP)


def tenant_limits(args: argparse.Namespace) -> dict[str, int]:
    """`--limit NAME=N`... of a tenants command (the store checks names and values)."""
    return dict(parse_limit(text) for text in getattr(args, "limit", None) or [])
