"""`wasmrun cache list|prune`: the cache of built guests, images and compiled modules.

The rule (what is an entry, what is in use, what goes first) is the server's own:
wasmrun/sandbox/images/cachebound.py. A server prunes to its `cache_max_bytes` on
start; this command prunes on demand.
"""

from __future__ import annotations

import argparse
import time

from wasmrun.sandbox import cachebound


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from wasmrun.cli.help import command

    cache = command(
        commands, "cache", "list the cache's image versions and compiled modules with their sizes and what uses"
        " them, or remove those no server of this version uses",
        "wasmrun cache list", "wasmrun cache prune", "wasmrun cache prune --max-bytes 4G",
        more="The cache is $WASMRUN_CACHE_DIR, else $XDG_CACHE_HOME/wasmrun, else ~/.cache/wasmrun. Kept always:"
        " the version this install runs, and whatever a live server's lease (<cache>/leases) holds.",
    )
    sub = cache.add_subparsers(dest="cache_command", required=True)
    command(sub, "list", "each entry, its size, when last used, and why it is kept", "wasmrun cache list")
    prune = command(
        sub, "prune", "remove the image versions and compiled modules nothing uses (with --max-bytes: the"
        " least recently used first, only until the cache fits)", "wasmrun cache prune --max-bytes 8G",
    )
    prune.add_argument("--max-bytes", type=parse_bytes, default=None,
                       help=f"the cap, e.g. 8G, 500M or 123456 (the server's default: {cachebound.DEFAULT_MAX_BYTES // 2**30}G)")
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing (default: remove)")


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_bytes(text: str) -> int:
    """`8G`, `500M`, `123456` (binary units, an optional trailing B or iB)."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in _UNITS and value[-1:] else ""
    number = value[: len(value) - len(unit)]
    try:
        amount = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text[:40]!r} (e.g. 8G, 500M, 123456)") from None
    if not 0 <= amount < 2**63 / _UNITS[unit]:
        raise argparse.ArgumentTypeError(f"not a size: {text[:40]!r}")
    return int(amount * _UNITS[unit])


def human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _age(used: float) -> str:
    seconds = max(0.0, time.time() - used)
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f} {unit} ago"
    return "just now"


def main(args: argparse.Namespace) -> int:
    from python_wasm import downloads

    root = downloads.cache_root()
    if args.cache_command == "list":
        listed = cachebound.listing(root)
        for item in listed:
            entry = item.entry
            print(f"{human(entry.size):>10}  {_age(entry.used):>12}  {entry.kind:<16} {entry.name}"
                  f"  {('(' + item.why_kept + ')') if item.why_kept else '(unused)'}")
        unused = sum(i.entry.size for i in listed if not i.why_kept and i.entry.kind != "data interpreter")
        print(f"{root}: {human(cachebound.total_bytes(root))} in all, {human(unused)} unused (wasmrun cache prune)")
        return 0
    if args.dry_run:
        chosen = cachebound.plan(cachebound.listing(root), args.max_bytes, cachebound.total_bytes(root))
        for entry in chosen:
            print(f"would remove {entry.name} ({human(entry.size)})")
        print(f"{len(chosen)} entries would be removed")
        return 0
    pruned = cachebound.prune(root, args.max_bytes)
    for entry in pruned.removed:
        print(f"removed {entry.name} ({human(entry.size)})")
    print(f"{root}: {human(pruned.total_before)} -> {human(pruned.total_after)}")
    if args.max_bytes is not None and pruned.total_after > args.max_bytes:
        print(f"still over {human(args.max_bytes)}: the rest is in use or the build's inputs")
    return 0
