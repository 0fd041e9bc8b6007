"""`wasmrun run FILE.py`: one run in the sandbox, here and now, on the local data dir (no
server): the run's output on stderr as it comes, then the result as JSON on stdout, and the
pictures it saved written beside (exits 1 if the run failed)."""

from __future__ import annotations

import argparse
import asyncio
import json
import mimetypes
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from wasmrun.cli import help as cli_help
from wasmrun.cli import limits as cli_limits
from wasmrun.settings import Settings

if TYPE_CHECKING:
    from wasmrun.sandbox import OutputChunk


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """`wasmrun run`'s parser, its own options; the caller adds the data and skills folders'."""
    run = cli_help.command(
        commands, "run", "run a Python file in the sandbox: its output on stderr as it comes, then the result as JSON"
        " on stdout (exits 1 if the run failed)",
        "wasmrun run report.py --mount pdf-tools --arg year=2024 --blob data=sales.csv --limit timeout_ms=5000",
        more=cli_help.run_limits_table(),
    )
    run.add_argument("file", type=Path, metavar="FILE.py", help="the code: a main(args) function or a final expression")
    run.add_argument(
        "--mount", action="append", default=[], metavar="SKILL", help="mount a skill at /skills/SKILL; repeatable (default none)"
    )
    run.add_argument(
        "--arg", action="append", default=[], metavar="KEY=VALUE",
        help="an entry of args; VALUE is parsed as JSON when it can be, else taken as a string; repeatable (default none)",
    )
    run.add_argument(
        "--blob", action="append", default=[], metavar="NAME=PATH",
        help="store the file PATH as a blob, pass its id as args[NAME] and list it in input_blobs"
        " (the run reads it with runtime.blobs or as the file /blobs/<id>); repeatable (default none)",
    )
    run.add_argument("--entrypoint", default="main", metavar="NAME", help="function to call")
    cli_limits.add_run_limit_options(run)
    run.add_argument(
        "--no-stream", action="store_true",
        help="do not print the run's output as it comes (the result has it; default: printed on stderr)",
    )
    run.add_argument(
        "--images-dir", type=Path, default=Path("."), metavar="DIR",
        help="where the pictures the run saved (PNG/SVG, the result's images) are written (default: the current folder)",
    )
    return run


def _arg_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _print_output(chunks: list[OutputChunk]) -> None:
    """A streamed run's output, on stderr as it comes: stdout stays the result's JSON alone."""
    for chunk in chunks:
        if chunk.stream == "display":  # a display result: its text form, as a notebook prints it
            sys.stderr.write(_display_text(json.loads(chunk.text)) + "\n")
        else:
            sys.stderr.write(chunk.text)
    sys.stderr.flush()


def _display_text(display: dict[str, Any]) -> str:
    """A display result as text: its text/plain, and what other forms it has."""
    data = display.get("data") or {}
    others = sorted(set(data) - {"text/plain"}) + sorted(f"{m} (blob {b})" for m, b in (display.get("blobs") or {}).items())
    text = str(data.get("text/plain", ""))
    return text + (f"\n[display: {', '.join(others)}]" if others else "")


def main(args: argparse.Namespace) -> int:
    """Run the file once, in-process, on the local data dir; the result as JSON on stdout."""
    from wasmrun.blobs.store import FileBlobStore
    from wasmrun.protocol.errors import RPCError
    from wasmrun.protocol.runs import run_code
    from wasmrun.protocol.streaming import RUN_OUTPUT
    from wasmrun.protocol.types import RunCodeParams
    from wasmrun.server import SandboxOptions, assemble_local, make_local_executor

    run_args = {}
    for item in args.arg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--arg takes KEY=VALUE, not {item!r}")
        run_args[key] = _arg_value(value)
    blob_files: list[tuple[str, Path]] = []
    for item in args.blob:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"--blob takes NAME=PATH, not {item!r}")
        if key in run_args or key in dict(blob_files):
            raise ValueError(f"args[{key!r}] is given twice")
        blob_files.append((key, Path(value)))
    code = args.file.read_text(encoding="utf-8")
    settings = Settings.load(data_dir=args.data_dir, skills_dirs=args.skills_dir, workers=1)
    blobs = FileBlobStore(settings.blobs_dir)
    input_blobs: list[str] = []
    for key, path in blob_files:
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        run_args[key] = blobs.create(path.read_bytes(), kind)
        input_blobs.append(run_args[key])
    # Blobs (given and written) outlive the command: say where they are.
    print(f"wasmrun: data in {settings.data_dir} (blobs in {settings.blobs_dir})", file=sys.stderr)
    params = RunCodeParams(
        language="python",
        code=code,
        entrypoint=args.entrypoint,
        args=run_args,
        mount_skills=args.mount,
        input_blobs=input_blobs,
        limits=cli_limits.run_limits(args),
    )
    executor = make_local_executor(SandboxOptions.of(settings), blobs)
    context = assemble_local(settings, blobs=blobs, executor=executor).context
    # Copied into asyncio.run's task; reset after, so a caller's later calls (main() run twice
    # in one process, as tests do) do not stream to this run's printer.
    listening = None if args.no_stream else RUN_OUTPUT.set(_print_output)
    try:
        result = asyncio.run(run_code(context, params))
    except RPCError as exc:
        print(f"wasmrun: {exc.message}", file=sys.stderr)
        return 2
    finally:
        if listening is not None:
            RUN_OUTPUT.reset(listening)
        context.executor.close()
    print(msgspec.json.format(msgspec.json.encode(result), indent=2).decode())
    if result.images is not msgspec.UNSET:
        _save_images(result.run_id, [(i.name, i.blob_id) for i in result.images], blobs, args.images_dir)
    return 0 if result.status == "completed" else 1


def _save_images(run_id: str, images: list[tuple[str, str]], blobs: Any, folder: Path) -> None:
    """Each picture as `folder/<its name>` (or `<stem>-<run id>` beside an existing file),
    never over an existing file or through a symlink. The names come from the guest:
    only a plain .png/.svg file name is used as it is."""
    for name, blob_id in images:
        safe = Path(name).name == name and name.isprintable() and len(name) <= 200 and not name.startswith(".")
        if not safe or Path(name).suffix.lower() not in (".png", ".svg"):
            name = f"picture-{blob_id.removeprefix('blob:')[:12]}.png"
        data = blobs.read(blob_id, 0, blobs.size(blob_id) or 0)
        for target in (folder / name, folder / f"{Path(name).stem}-{run_id}{Path(name).suffix}"):
            try:
                with open(target, "xb") as f:  # O_EXCL: no overwrite, no symlink followed
                    f.write(data)
            except FileExistsError:
                continue
            print(f"wasmrun: picture {name} written to {target}", file=sys.stderr)
            break
        else:
            print(f"wasmrun: picture {name} not written: {folder / name} exists", file=sys.stderr)
