"""`wc` for the sandbox's shell, with GNU wc's column widths (replaces just-bash's).

just-bash's wc pads every count to 7 columns; GNU's width is the digits of the largest
count it could print (the sum of the files' sizes), 7 when it reads a pipe, none for a
single count of a single input (`wc -l f` is `12 f`). Here the shell's stdin is text,
not a file, so `wc < f` is sized as a pipe's (GNU sizes it as f's: docs/commands.md).
"""

from __future__ import annotations

from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.types import ExecResult
# isort: on

_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/+-,:=@%^")
_LONG = {"--lines": "l", "--words": "w", "--bytes": "c", "--chars": "m", "--max-line-length": "L"}


def quoted(name: str) -> str:
    """A file name as GNU's messages show it (shell-quoted when it needs quoting)."""
    if name and all(c in _SAFE for c in name):
        return name
    return "'" + name.replace("'", "'\\''") + "'"


def _width(line: str) -> int:
    col = 0
    for c in line:
        col = col + 8 - col % 8 if c == "\t" else col + (1 if c.isprintable() else 0)
    return col


class WcCommand:
    name = "wc"

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        wanted: set[str] = set()
        files: list[str] = []
        for n, arg in enumerate(args):
            if arg == "--":
                files.extend(args[n + 1:])
                break
            if arg.startswith("--"):
                if arg not in _LONG:
                    return ExecResult(stderr=f"wc: unrecognized option '{arg}'\n"
                                             "Try 'wc --help' for more information.\n", exit_code=1)
                wanted.add(_LONG[arg])
            elif arg.startswith("-") and arg != "-":
                for c in arg[1:]:
                    if c not in "lwcmL":
                        return ExecResult(stderr=f"wc: invalid option -- '{c}'\n"
                                                 "Try 'wc --help' for more information.\n", exit_code=1)
                    wanted.add(c)
            else:
                files.append(arg)
        order = [c for c in "lwmcL" if c in wanted] or ["l", "w", "c"]
        inputs = files or ["-"]
        rows: list[tuple[list[int], str | None]] = []
        errors: list[str] = []
        regular_total = 0
        piped = False
        for name in inputs:
            if name == "-":
                text = ctx.stdin
                piped = True
            else:
                path = ctx.fs.resolve_path(ctx.cwd, name)
                try:
                    if await ctx.fs.is_directory(path):
                        errors.append(f"wc: {quoted(name)}: Is a directory\n")
                        rows.append(([0] * len(order), name))
                        continue
                    text = await ctx.fs.read_file(path)
                except OSError:
                    errors.append(f"wc: {quoted(name)}: No such file or directory\n")
                    continue
            data = text.encode("utf-8", "surrogateescape")
            if name != "-":
                regular_total += len(data)
            counts = {"l": text.count("\n"), "w": len(text.split()), "c": len(data), "m": len(text),
                      "L": max((_width(line) for line in text.split("\n")), default=0)}
            rows.append(([counts[c] for c in order], None if not files else name))
        if len(inputs) > 1:
            totals = [sum(r[0][i] for r in rows) if order[i] != "L" else max((r[0][i] for r in rows), default=0)
                      for i in range(len(order))]
            rows.append((totals, "total"))
        if len(order) == 1 and len(inputs) == 1:
            width = 1
        else:
            width = max(len(str(regular_total)), 7 if piped else 1)
        out = []
        for counts, label in rows:
            line = " ".join(str(c).rjust(width) for c in counts)
            out.append(f"{line} {label}\n" if label is not None else line + "\n")
        return ExecResult(stdout="".join(out), stderr="".join(errors), exit_code=1 if errors else 0)
