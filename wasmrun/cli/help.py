"""What `wasmrun ... --help` says beyond each option's own line: the defaults,
one example per command, and the limit names with their units, read from their
one declaration (wasmrun/limits.py) rather than copied by hand."""

from __future__ import annotations

import argparse
from typing import Any

from wasmrun.limits import REQUESTABLE, TENANT_LIMITS, MiB


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs kept as written (examples, tables); an option's default shown
    after its help unless the help already says it or there is none to say."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, [], argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


def example(*lines: str) -> str:
    return "example:\n" + "\n".join(f"  {line}" for line in lines)


def tenant_limits_table() -> str:
    """Every tenant limit: name, unit, default and what it bounds."""
    rows = [(limit.name, limit.unit, limit.default, limit.help) for limit in TENANT_LIMITS]
    width = max(len(name) for name, *_ in rows)
    lines = []
    for name, unit, default, doc in rows:
        shown = f"{default // MiB} MiB" if unit.startswith("bytes") and default and default % MiB == 0 else str(default)
        lines.append(f"  {name:<{width}}  {unit:<16}  default {shown:<9}  {doc}")
    return "limits (--limit NAME=N; N in the unit shown, bytes as a plain number):\n" + "\n".join(lines)


def run_limit_fields() -> list[tuple[str, str, int, int]]:
    """(name, unit, default, ceiling) of each member of a request's `limits`."""
    return [(limit.name, limit.unit, limit.default, limit.ceiling) for limit in REQUESTABLE]


def run_limits_table() -> str:
    rows = run_limit_fields()
    width = max(len(name) for name, *_ in rows)
    lines = [
        f"  {name:<{width}}  {unit:<12}  default {default:<8}  server ceiling {ceiling}"
        for name, unit, default, ceiling in rows
    ]
    return "run limits (--limit NAME=N; a tenant's max_* limits and WASMRUN_MAX_* may lower a ceiling):\n" + "\n".join(
        lines
    )


def command(commands: Any, name: str, about: str, *examples: str, more: str = "") -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does, its options' defaults and an example."""
    epilog = example(*examples) + (f"\n\n{more}" if more else "")
    sub: argparse.ArgumentParser = commands.add_parser(
        name, help=about, description=about[:1].upper() + about[1:] + ".", epilog=epilog, formatter_class=Formatter,
    )
    return sub
