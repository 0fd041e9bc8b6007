"""`wasmrun images install|status`: the guest images, made ahead of a server."""

from __future__ import annotations

import argparse
import sys
import time


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from wasmrun.cli.help import command

    images = command(
        commands, "images", "make the guest images ahead of a server, or show which are ready",
        "wasmrun images install data", "wasmrun images status",
    )
    sub = images.add_subparsers(dest="images_command", required=True)
    install = command(
        sub, "install", "make IMAGE now, with progress on stderr: fetch or copy its pinned artifacts, make it,"
        " compile it (the data image: minutes, once; cached)", "wasmrun images install data",
    )
    install.add_argument("image", choices=("data", "stdlib"), help="the image to make (data: numpy, pandas, matplotlib...)")
    command(sub, "status", "say which images are ready, being made, or not made", "wasmrun images status")


def main(args: argparse.Namespace) -> int:
    if args.images_command == "status":
        print("stdlib: always there (compiled to machine code at the first start, or now by `wasmrun images install stdlib`)")
        print(f"data: {data_image_state()}")
        return 0
    started = time.monotonic()
    if args.image == "stdlib":
        from wasmrun.sandbox import precompile

        where = precompile()
    else:
        from wasmrun.sandbox import warmup

        try:
            where = warmup.build(quiet=False)
        except (RuntimeError, OSError) as exc:  # a refused artifact, no network, a full disk
            print(f"wasmrun: the data image could not be made: {exc}", file=sys.stderr)
            return 1
    print(f"{args.image} image ready in {time.monotonic() - started:.0f} s: {where}")
    return 0


def data_image_state() -> str:
    """Ready, being made (by whom, how far), or not made and how to make it (status, doctor)."""
    from wasmrun.sandbox import image_state, ready_image_path, warmup

    not_ready = image_state()
    if not_ready is None:
        return f"ready: {ready_image_path()}"
    making = warmup.being_made()
    if making is not None:
        return making
    if warmup.available():
        return f"{not_ready}: a server with --image auto makes it in the background; `wasmrun images install data` now"
    return f"{not_ready}: pip install 'wasmrun[data]' (or `wasmrun images install data`, which downloads it)"
