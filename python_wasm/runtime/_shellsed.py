"""`sed -i.bak` for the sandbox's shell: just-bash's sed, with the backup suffix kept.

just-bash's sed takes `-iSUFFIX` and `--in-place=SUFFIX` as `-i` and drops the suffix,
so `sed -i.bak 's/a/b/' f` left no `f.bak`. Here each file operand is copied to its
backup name first (as GNU sed does), then the library's sed edits it in place.
"""

from __future__ import annotations

from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.commands.sed.sed import SedCommand
from just_bash.types import ExecResult
# isort: on


def _backup_and_files(args: list[str]) -> tuple[str | None, list[str], list[str]]:
    """(backup suffix or None, the args with the suffix taken off, the file operands)."""
    suffix = None
    out: list[str] = []
    files: list[str] = []
    script_given = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest = args[i + 1:]
            out += args[i:]
            files += rest if script_given else rest[1:]
            break
        if arg.startswith("-i") and len(arg) > 2 and not arg.startswith("--"):
            suffix = arg[2:]
            out.append("-i")
        elif arg.startswith("--in-place="):
            suffix = arg.split("=", 1)[1]
            out.append("-i")
        elif arg in ("-e", "-f", "--expression", "--file", "-l"):
            script_given = script_given or arg != "-l"
            out += args[i:i + 2]
            i += 1
        elif arg.startswith(("--expression=", "--file=")) or (arg[:2] in ("-e", "-f") and len(arg) > 2):
            script_given = True
            out.append(arg)
        elif arg.startswith("-") and arg != "-":
            out.append(arg)
        elif not script_given:
            script_given = True
            out.append(arg)
        else:
            files.append(arg)
            out.append(arg)
        i += 1
    return suffix, out, files


class SandboxSed(SedCommand):
    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        suffix, args, files = _backup_and_files(args)
        if suffix:
            for name in files:
                path = ctx.fs.resolve_path(ctx.cwd, name)
                try:
                    data = await ctx.fs.read_file_bytes(path)
                except OSError:
                    continue  # sed's own error, below
                await ctx.fs.write_file(f"{path}{suffix}" if "*" not in suffix else
                                        ctx.fs.resolve_path(ctx.cwd, suffix.replace("*", name.rsplit("/", 1)[-1])),
                                        data)
        result: ExecResult = await super().execute(args, ctx)
        return result
