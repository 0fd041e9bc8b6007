"""`wasmrun packages add|list|remove`: the operator's side of the package layer."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from wasmrun.cli.help import command
from wasmrun.packages import layer, names, resolve, wheels
from wasmrun.packages.policy import MODES

POLICY_HELP = """

Packages on demand: runs may also ask for packages themselves (`packages` on create_session,
run_code and run_command), resolved by pip on this host from
the index pip is configured with, wheels only, and cached once per server as a read-only set.
The operator's policy, `wasmrun serve --packages MODE` (WASMRUN_PACKAGES) or the policy
file's [packages] table:
  mode = "pure-python"   (default) any package with a pure-Python wheel
  mode = "allowlist"     only `allow = ["humanize", "types-*"]` (--packages-allow)
  mode = "off"           none
  max_set_bytes = 67108864, max_sets_per_tenant = 32, max_tenant_bytes = 536870912,
  download_timeout_s = 60, max_packages = 64
See docs/packages.md."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    packages = command(
        commands, "packages", "pure-Python packages every run can import (a read-only layer in the data dir)",
        "wasmrun packages add defusedxml tabulate",
    )
    packages.epilog = (packages.epilog or "") + POLICY_HELP
    sub = packages.add_subparsers(dest="packages_command", required=True)
    add = command(
        sub, "add", "resolve NAME... and their dependencies with pip and add them to the layer",
        "wasmrun packages add 'tabulate>=0.9' PyYAML",
    )
    add.add_argument("names", nargs="+", metavar="NAME", help="a package name or specifier, e.g. 'tabulate>=0.9'")
    add.add_argument(
        "--max-packages", type=int, default=resolve.MAX_PACKAGES, metavar="N",
        help=f"refuse a layer of more than N packages, dependencies included (default {resolve.MAX_PACKAGES})",
    )
    listing = command(sub, "list", "list the packages in the layer", "wasmrun packages list")
    remove = command(
        sub, "remove", "remove NAME... (and dependencies only they needed) from the layer",
        "wasmrun packages remove tabulate",
    )
    remove.add_argument("names", nargs="+", metavar="NAME", help="a package name in the layer")
    for parser in (add, listing, remove):
        parser.add_argument(
            "--data-dir", type=Path, help="the server's data dir (WASMRUN_DATA_DIR; default ~/.local/share/wasmrun)"
        )
        parser.add_argument(
            "--image", choices=sorted(layer.IMAGE_TAGS),
            help="the guest image whose layer to change, as `serve --image` names it (WASMRUN_IMAGE;"
            " default auto: data when it is built, else stdlib)",
        )
        parser.add_argument(
            "--python", metavar="TAG",
            help=f"the guest Python whose layer to change, instead of --image ({layer.DEFAULT_TAG}: stdlib,"
            f" {layer.DATA_TAG}: data; default: the one --image names)",
        )


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """`serve --packages MODE --packages-allow NAMES`: packages runs may ask for (ondemand.py)."""
    serve.add_argument(
        "--packages", choices=MODES,
        help="packages runs may ask for (`packages` params): any with a pure wheel on the index pip is configured"
        " with, only --packages-allow's, or none (WASMRUN_PACKAGES; default pure-python; caps: the policy file's"
        " [packages]; docs/packages.md)",
    )
    serve.add_argument(
        "--packages-allow", metavar="NAMES",
        help="with --packages allowlist: names or glob patterns, comma-separated, e.g. 'humanize,types-*'"
        " (WASMRUN_PACKAGES_ALLOW; default: none, the policy file's [packages] allow)",
    )


def _say(message: str) -> None:
    print(f"wasmrun: {message}", file=sys.stderr)


def layer_tag(args: argparse.Namespace) -> str:
    """--python, else the layer of --image (else WASMRUN_IMAGE, as `serve` reads it)."""
    if args.python:
        return str(args.python)
    image = args.image or os.environ.get("WASMRUN_IMAGE") or "auto"  # serve's default (settings.py)
    if image == "auto":
        from wasmrun.sandbox import image_state

        image = "data" if image_state() is None else "stdlib"
    if image not in layer.IMAGE_TAGS:
        raise resolve.PackageError(f"unknown image {image[:40]!r} (WASMRUN_IMAGE): one of stdlib, data, auto")
    return layer.IMAGE_TAGS[image]


def main(args: argparse.Namespace, data_dir: Path) -> int:
    try:
        args.python = layer_tag(args)
        if args.packages_command == "list":
            return _list(data_dir, args.python)
        if args.packages_command == "add":
            info = layer.add(data_dir, args.names, args.python, say=_say, max_packages=args.max_packages)
        else:
            info = layer.remove(data_dir, args.names, args.python, say=_say)
    except (names.RequirementRefused, resolve.PackageError, wheels.UnsafeWheel) as exc:
        print(f"wasmrun: {exc}", file=sys.stderr)
        return 2
    _say(f"layer {args.python}: {len(info.packages)} packages; runs of servers on {data_dir} see it from their next run")
    return _list(data_dir, args.python)


def _list(data_dir: Path, tag: str) -> int:
    info = layer.read_info(layer.tag_root(data_dir, tag))
    for package in info.packages if info else []:
        print(f"{package.name}=={package.version}" + ("" if package.requested else "  (dependency)"))
    return 0
