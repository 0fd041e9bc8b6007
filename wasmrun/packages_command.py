"""`wasmrun packages add|list|remove`: the operator's side of the package layer."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from wasmrun.cli_help import command
from wasmrun.packages import layer, names, resolve, wheels


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    packages = command(
        commands, "packages", "pure-Python packages every run can import (a read-only layer in the data dir)",
        "wasmrun packages add defusedxml tabulate",
    )
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
