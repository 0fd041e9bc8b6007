"""Bytes through the shell's text pipes, unchanged: the commands whose data is a file's bytes.

just-bash's pipes, redirections and variables carry `str`. The sandbox's filesystem reads
a file as UTF-8 with `surrogateescape` (runtime/_shellfs.py): a byte that is not part of
valid UTF-8 (0xff, a gzip's header) is the lone surrogate U+DC80+byte, and writing the
text back gives the bytes back. That is the one form data has in the shell; the commands
here keep to it where the library's did not:

- `cat`: the library wrote every line with a newline after it (`printf x | cat` was `x\\n`);
  this one writes the bytes as they are, with -n -b -s -E -T -v -A as GNU's.
- `head -c`, `tail -c`: counted in bytes (the library counted characters).
- `base64` (-d, -w N, -i): of the bytes (the library encoded text, decoded with U+FFFD).
- `od`, `tar`: the library's, which read stdin and write archives as Latin-1 text: what
  they are given and give is converted from and to the shell's form.
- `gzip -c`, `gunzip -c`, `zcat` and the same from stdin: bytes (the library's decoded
  the compressed data with U+FFFD); to and from files the library's, which were bytes.
- `printf '\\377'`, `'\\303\\251'`, `'\\xff'`: the bytes (the library made each escape a
  Latin-1 character: `\\303\\251` was `Ã©`, not `é`).
- `cmp` (-s, -l, -b, -n): as GNU's; the library has none.

`to_bytes` / `from_bytes` convert between the shell's text and bytes.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import zlib
from typing import Any

# Loads just-bash without its network module: before any just_bash import (isort must not move it).
# isort: off
from runtime import _shelljb  # noqa: F401
from just_bash.commands.printf.printf import PrintfCommand
from just_bash.types import ExecResult
# isort: on

ERRORS = "surrogateescape"


def to_bytes(text: str) -> bytes:
    return text.encode("utf-8", ERRORS)


def from_bytes(data: bytes) -> str:
    return data.decode("utf-8", ERRORS)


def canonical(text: str) -> str:
    """Text whose surrogate-escaped bytes together form UTF-8 (`\\303\\251`) as that text."""
    try:
        return from_bytes(to_bytes(text))
    except UnicodeEncodeError:  # a surrogate that is no escaped byte: left as it was
        return text


async def _read(ctx: Any, name: str, file: str) -> bytes | str:
    """A file's bytes (stdin for `-`), or the error line."""
    if file in ("-", "/dev/stdin"):
        return to_bytes(ctx.stdin)
    path = ctx.fs.resolve_path(ctx.cwd, file)
    try:
        data: bytes = await ctx.fs.read_file_bytes(path)
    except IsADirectoryError:
        return f"{name}: {file}: Is a directory\n"
    except FileNotFoundError:
        return f"{name}: {file}: No such file or directory\n"
    except PermissionError:
        return f"{name}: {file}: Permission denied\n"
    except OSError as error:
        return f"{name}: {file}: {error}\n"
    return data


# -- cat ------------------------------------------------------------------------------------

_CAT_LETTERS = {"n": "n", "b": "b", "s": "s", "E": "E", "T": "T", "v": "v", "A": "vET", "e": "vE", "t": "vT", "u": ""}
_CAT_LONG = {"--number": "n", "--number-nonblank": "b", "--squeeze-blank": "s", "--show-ends": "E",
             "--show-tabs": "T", "--show-nonprinting": "v", "--show-all": "vET"}


def _nonprinting(line: bytes, tabs: bool) -> bytes:
    out = bytearray()
    for b in line:
        if b >= 128:
            out += b"M-"
            b -= 128
        if b == 9 and not tabs:
            out.append(9)
        elif b < 32:
            out += b"^" + bytes([b + 64])
        elif b == 127:
            out += b"^?"
        else:
            out.append(b)
    return bytes(out)


class CatCommand:
    name = "cat"

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        flags = ""
        files: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                files += args[i + 1:]
                break
            if arg.startswith("--"):
                if arg not in _CAT_LONG:
                    return ExecResult(stderr=f"cat: unrecognized option '{arg}'\n", exit_code=1)
                flags += _CAT_LONG[arg]
            elif arg.startswith("-") and arg != "-":
                for letter in arg[1:]:
                    if letter not in _CAT_LETTERS:
                        return ExecResult(stderr=f"cat: invalid option -- '{letter}'\n", exit_code=1)
                    flags += _CAT_LETTERS[letter]
            else:
                files.append(arg)
        out = bytearray()
        err = ""
        state = {"number": 1, "blank": False}
        for file in files or ["-"]:
            data = await _read(ctx, "cat", file)
            if isinstance(data, str):
                err += data
                continue
            out += _cat_lines(data, flags, state) if flags else data
        return ExecResult(stdout=from_bytes(bytes(out)), stderr=err, exit_code=1 if err else 0)


def _cat_lines(data: bytes, flags: str, state: dict[str, Any]) -> bytes:
    out = bytearray()
    for line in data.splitlines(keepends=True):
        ended = line.endswith(b"\n")
        body = line[:-1] if ended else line
        blank = not body and ended
        if "s" in flags and blank and state["blank"]:
            continue
        state["blank"] = blank
        if "v" in flags:
            body = _nonprinting(body, tabs="T" in flags)
        elif "T" in flags:
            body = body.replace(b"\t", b"^I")
        if ("b" in flags and not blank) or ("n" in flags and "b" not in flags):
            out += f"{state['number']:6d}\t".encode()
            state["number"] += 1
        out += body
        if ended:
            out += b"$\n" if "E" in flags else b"\n"
    return bytes(out)


# -- head -c / tail -c ----------------------------------------------------------------------

class _Bytes:
    """`head`/`tail`: with -c, counted in bytes here; otherwise the library's."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        count: str | None = None
        quiet = verbose = False
        files: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-c" or arg == "--bytes":
                if i + 1 >= len(args):
                    return ExecResult(stderr=f"{self.name}: option requires an argument -- 'c'\n", exit_code=1)
                count, i = args[i + 1], i + 2
                continue
            if arg.startswith("--bytes="):
                count = arg[len("--bytes="):]
            elif arg.startswith("-c"):
                count = arg[2:]
            elif arg in ("-q", "--quiet", "--silent"):
                quiet = True
            elif arg in ("-v", "--verbose"):
                verbose = True
            elif arg.startswith("-") and arg != "-" and count is None:
                break
            elif arg.startswith("-") and arg != "-":
                break
            else:
                files.append(arg)
            i += 1
        else:
            if count is not None:
                return await self._bytes(count, files, quiet, verbose, ctx)
        result: ExecResult = await self.inner.execute(args, ctx)
        return result

    async def _bytes(self, count: str, files: list[str], quiet: bool, verbose: bool, ctx: Any) -> ExecResult:
        text = count
        from_start = self.name == "tail" and text.startswith("+")
        all_but = self.name == "head" and text.startswith("-")
        digits = text.lstrip("+-")
        if not digits.isdigit():
            return ExecResult(stderr=f"{self.name}: invalid number of bytes: '{count}'\n", exit_code=1)
        n = int(digits)
        out = bytearray()
        err = ""
        names = files or ["-"]
        for index, file in enumerate(names):
            data = await _read(ctx, self.name, file)
            if isinstance(data, str):
                err += data.replace(f"{self.name}: {file}:", f"{self.name}: cannot open '{file}' for reading:")
                continue
            if (len(names) > 1 and not quiet) or verbose:
                shown = "standard input" if file == "-" else file
                out += f"{'' if index == 0 else chr(10)}==> {shown} <==\n".encode()
            if self.name == "head":
                out += data[:len(data) - n] if all_but else data[:n]
            elif from_start:
                out += data[max(n - 1, 0):]
            else:
                out += data[len(data) - n:] if n else b""
        return ExecResult(stdout=from_bytes(bytes(out)), stderr=err, exit_code=1 if err else 0)


# -- base64 ----------------------------------------------------------------------------------

class Base64Command:
    name = "base64"

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        decode = ignore = False
        wrap = 76
        files: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in ("-d", "--decode", "-D"):
                decode = True
            elif arg in ("-i", "--ignore-garbage"):
                ignore = True
            elif arg in ("-w", "--wrap") or (arg.startswith("-w") and len(arg) > 2) or arg.startswith("--wrap="):
                value = arg[2:] if arg.startswith("-w") and len(arg) > 2 else arg.partition("=")[2]
                if arg in ("-w", "--wrap"):
                    i += 1
                    value = args[i] if i < len(args) else ""
                if not value.isdigit():
                    return ExecResult(stderr=f"base64: invalid wrap size: '{value}'\n", exit_code=1)
                wrap = int(value)
            elif arg.startswith("-") and len(arg) > 1 and arg[1] != "-" and set(arg[1:]) <= set("di"):
                decode = decode or "d" in arg
                ignore = ignore or "i" in arg
            elif arg.startswith("-") and arg != "-":
                return ExecResult(stderr=f"base64: invalid option -- '{arg.lstrip('-')}'\n", exit_code=1)
            else:
                files.append(arg)
            i += 1
        if len(files) > 1:
            return ExecResult(stderr=f"base64: extra operand '{files[1]}'\n", exit_code=1)
        data = await _read(ctx, "base64", files[0] if files else "-")
        if isinstance(data, str):
            return ExecResult(stderr=data, exit_code=1)
        if decode:
            alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
            cleaned = bytes(b for b in data if b in alphabet) if ignore else b"".join(data.split())
            try:
                plain = base64.b64decode(cleaned + b"=" * (-len(cleaned) % 4), validate=True)
            except (binascii.Error, ValueError):
                return ExecResult(stderr="base64: invalid input\n", exit_code=1)
            return ExecResult(stdout=from_bytes(plain))
        encoded = base64.b64encode(data).decode("ascii")
        if wrap:
            lines = [encoded[j:j + wrap] for j in range(0, len(encoded), wrap)]
            return ExecResult(stdout="".join(line + "\n" for line in lines))
        return ExecResult(stdout=encoded)  # -w 0: one line, no newline after it (GNU)


# -- od, tar: the library's, in Latin-1 -------------------------------------------------------

def _latin1(text: str) -> str:
    return to_bytes(text).decode("latin-1")


def _tar_to_stdout(args: list[str]) -> bool:
    """Does this tar write an archive to stdout (`tar -cf - d`, `tar cz d`)?"""
    create = False
    archive: str | None = None
    for i, arg in enumerate(args):
        if arg in ("--create",):
            create = True
        elif arg.startswith("--file="):
            archive = arg[len("--file="):]
        elif arg == "--file" and i + 1 < len(args):
            archive = args[i + 1]
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            letters = arg[1:]
            create = create or "c" in letters
            if "f" in letters:
                after = letters[letters.index("f") + 1:]
                archive = after or (args[i + 1] if i + 1 < len(args) else None)
    return create and archive in (None, "-")


class _Latin1Command:
    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        import dataclasses

        ctx = dataclasses.replace(ctx, stdin=_latin1(ctx.stdin))
        result: ExecResult = await self.inner.execute(args, ctx)
        if self.name == "od" or (self.name == "tar" and _tar_to_stdout(args)):
            try:
                out = from_bytes(result.stdout.encode("latin-1"))
            except UnicodeEncodeError:
                return result
            return ExecResult(stdout=out, stderr=result.stderr, exit_code=result.exit_code, env=result.env)
        return result


# -- gzip -c ---------------------------------------------------------------------------------

class _Gzip:
    """gzip/gunzip/zcat to stdout (-c, or stdin in): bytes here; to and from files the library's."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        decompress = self.name in ("gunzip", "zcat")
        stdout = self.name == "zcat"
        level = 6
        files: list[str] = []
        for arg in args:
            if arg.startswith("--"):
                if arg in ("--stdout", "--to-stdout"):
                    stdout = True
                elif arg in ("--decompress", "--uncompress"):
                    decompress = True
                elif arg not in ("--keep", "--force", "--quiet", "--no-name", "--name"):
                    return await self.inner.execute(args, ctx)  # type: ignore[no-any-return]
            elif arg.startswith("-") and arg != "-":
                for letter in arg[1:]:
                    if letter == "c":
                        stdout = True
                    elif letter == "d":
                        decompress = True
                    elif letter.isdigit():
                        level = int(letter)
                    elif letter not in "kfqnN":
                        return await self.inner.execute(args, ctx)  # type: ignore[no-any-return]
            else:
                files.append(arg)
        if files and not stdout and files != ["-"]:
            return await self.inner.execute(args, ctx)  # type: ignore[no-any-return]
        out = bytearray()
        err = ""
        for file in files or ["-"]:
            data = await _read(ctx, self.name, file)
            if isinstance(data, str):
                err += data
                continue
            if not decompress:
                out += gzip.compress(data, compresslevel=max(level, 1), mtime=0)
                continue
            try:
                out += gzip.decompress(data)
            except (OSError, EOFError, zlib.error):
                err += f"{self.name}: {'stdin' if file == '-' else file}: not in gzip format\n"
        return ExecResult(stdout=from_bytes(bytes(out)), stderr=err, exit_code=1 if err else 0)


# -- printf -----------------------------------------------------------------------------------

class SandboxPrintf(PrintfCommand):  # type: ignore[misc]
    """The library's printf, its `\\NNN` and `\\xHH` bytes as bytes (see the module's text)."""

    def _process_escape(self, s: str, i: int) -> tuple[str, int]:
        if i + 1 < len(s) and (s[i + 1] in "01234567" or s[i + 1] == "x"):
            j = i + 2
            digits = ""
            if s[i + 1] == "x":
                while j < len(s) and len(digits) < 2 and s[j] in "0123456789abcdefABCDEF":
                    digits += s[j]
                    j += 1
                if not digits:
                    return ("\\x", 2)
                value = int(digits, 16)
            else:
                digits = s[i + 1]
                while j < len(s) and len(digits) < 3 and s[j] in "01234567":
                    digits += s[j]
                    j += 1
                value = int(digits, 8) & 0xFF
            return (chr(value) if value < 0x80 else chr(0xDC00 + value), j - i)
        result: tuple[str, int] = super()._process_escape(s, i)
        return result

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        result: ExecResult = await super().execute(args, ctx)
        return ExecResult(stdout=canonical(result.stdout), stderr=result.stderr, exit_code=result.exit_code,
                          env=result.env)


# -- cmp ----------------------------------------------------------------------------------------

class CmpCommand:
    name = "cmp"

    async def execute(self, args: list[str], ctx: Any) -> ExecResult:
        silent = verbose = show = False
        limit: int | None = None
        files: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in ("-s", "--quiet", "--silent"):
                silent = True
            elif arg in ("-l", "--verbose"):
                verbose = True
            elif arg in ("-b", "--print-bytes"):
                show = True
            elif arg == "-n" or arg.startswith("--bytes="):
                value = args[i + 1] if arg == "-n" and i + 1 < len(args) else arg.partition("=")[2]
                i += 1 if arg == "-n" else 0
                if not value.isdigit():
                    return ExecResult(stderr=f"cmp: invalid --bytes value '{value}'\n", exit_code=2)
                limit = int(value)
            elif arg.startswith("-") and arg != "-":
                return ExecResult(stderr=f"cmp: invalid option -- '{arg[1:]}'\n", exit_code=2)
            else:
                files.append(arg)
            i += 1
        if not files or len(files) > 2:
            message = "missing operand after 'cmp'" if not files else f"invalid --ignore-initial value '{files[2]}'"
            return ExecResult(stderr=f"cmp: {message}\ncmp: Try 'cmp --help' for more information.\n", exit_code=2)
        if len(files) == 1:
            files.append("-")
        datas: list[bytes] = []
        for file in files:
            data = await _read(ctx, "cmp", file)
            if isinstance(data, str):
                return ExecResult(stderr="" if silent else data, exit_code=2)
            datas.append(data[:limit] if limit is not None else data)
        a, b = datas
        if a == b:
            return ExecResult()
        if silent:
            return ExecResult(exit_code=1)
        shown = ["-" if f == "-" else f for f in files]
        common = min(len(a), len(b))
        out = ""
        first = next((k for k in range(common) if a[k] != b[k]), None)
        if verbose:
            out = "".join(f"{k + 1} {a[k]:o} {b[k]:o}\n" for k in range(common) if a[k] != b[k])
        elif first is not None:
            line = a[:first].count(b"\n") + 1
            extra = f" is {a[first]:3o} {_printable(a[first])} {b[first]:3o} {_printable(b[first])}" if show else ""
            return ExecResult(stdout=f"{shown[0]} {shown[1]} differ: byte {first + 1}, line {line}{extra}\n",
                              exit_code=1)
        if len(a) != len(b):
            shorter, data = (shown[0], a) if len(a) < len(b) else (shown[1], b)
            if data:
                lines = data.count(b"\n") + 1
                where = f"after byte {len(data)}" if verbose else f"after byte {len(data)}, in line {lines}"
            else:
                where = "which is empty"
            return ExecResult(stdout=out, stderr=f"cmp: EOF on {shorter} {where}\n", exit_code=1)
        return ExecResult(stdout=out, exit_code=1)


def _printable(byte: int) -> str:
    return _nonprinting(bytes([byte]), tabs=True).decode("ascii", "replace")


def commands(library: dict[str, Any]) -> dict[str, Any]:
    """The commands above, in place of (or around) the library's in `library`."""
    out: dict[str, Any] = {"cat": CatCommand(), "base64": Base64Command(), "cmp": CmpCommand(),
                           "printf": SandboxPrintf()}
    for name in ("head", "tail"):
        out[name] = _Bytes(library[name], name)
    for name in ("od", "tar"):
        out[name] = _Latin1Command(library[name], name)
    for name in ("gzip", "gunzip", "zcat"):
        if name in library:
            out[name] = _Gzip(library[name], name)
    return out
