"""`seq` for the sandbox's shell (runtime/commands.py), as GNU coreutils' seq.

just-bash's seq stops after 100,000 numbers without a word (`seq 3000000 | wc -l` says
100000): a wrong answer, not a limit. This one prints every number asked for; the run's
own time and memory limits bound it, as they bound any loop. Integers are made by
`range` (millions a second); a decimal sequence computes each number as FIRST + i *
INCREMENT, as GNU's does, so the steps do not drift.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation

from just_bash.types import CommandContext, ExecResult

# One printf conversion for a floating-point number, as GNU's -f takes (%% elsewhere).
_FORMAT = re.compile(r"%[-+ #0']*\d*(?:\.\d*)?[aAeEfFgG]")


class SeqCommand:
    name = "seq"

    async def execute(self, args: list[str], ctx: CommandContext) -> ExecResult:
        try:
            separator, width, fmt, operands = _options(args)
            first, step, last = _operands(operands)
            if fmt is not None:
                _check_format(fmt)
        except _Usage as problem:
            tail = "" if problem.args[1:] == ("format",) else "Try 'seq --help' for more information.\n"
            return ExecResult(stderr=f"seq: {problem.args[0]}\n{tail}", exit_code=1)
        return ExecResult(stdout=_text(_numbers(first, step, last, operands, fmt, width), separator))


class _Usage(Exception):
    pass


def _options(args: list[str]) -> tuple[str, bool, str | None, list[str]]:
    separator, width, fmt = "\n", False, None
    operands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if operands or arg == "-" or not arg.startswith("-") or _is_number(arg):
            operands.append(arg)
        elif arg == "--":
            operands.extend(args[i + 1:])
            break
        elif arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in ("separator", "format") and not eq:
                if i + 1 >= len(args):
                    raise _Usage(f"option '--{name}' requires an argument")
                i += 1
                value = args[i]
            if name == "separator":
                separator = value
            elif name == "format":
                fmt = value
            elif name == "equal-width" and not eq:
                width = True
            else:
                raise _Usage(f"unrecognized option '{arg}'")
        else:
            j = 1
            while j < len(arg):
                letter = arg[j]
                if letter == "w":
                    width = True
                    j += 1
                    continue
                if letter not in "sf":
                    raise _Usage(f"invalid option -- '{letter}'")
                value = arg[j + 1:]
                if not value:
                    if i + 1 >= len(args):
                        raise _Usage(f"option requires an argument -- '{letter}'")
                    i += 1
                    value = args[i]
                if letter == "s":
                    separator = value
                else:
                    fmt = value
                break
        i += 1
    if width and fmt is not None:
        raise _Usage("format string may not be specified when printing equal width strings")
    return separator, width, fmt, operands


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _operands(operands: list[str]) -> tuple[Decimal, Decimal, Decimal]:
    if not operands:
        raise _Usage("missing operand")
    if len(operands) > 3:
        raise _Usage(f"extra operand \u2018{operands[3]}\u2019")
    values: list[Decimal] = []
    for word in operands:
        try:
            value = Decimal(word.strip())
        except InvalidOperation:
            raise _Usage(f"invalid floating point argument: \u2018{word}\u2019") from None
        if value.is_nan():
            raise _Usage(f"invalid \u2018not-a-number\u2019 argument: \u2018{word}\u2019")
        values.append(value)
    if len(values) == 1:
        return Decimal(1), Decimal(1), values[0]
    if len(values) == 2:
        return values[0], Decimal(1), values[1]
    if values[1] == 0:
        raise _Usage(f"invalid Zero increment value: \u2018{operands[1]}\u2019")
    return values[0], values[1], values[2]


def _check_format(fmt: str) -> None:
    """GNU's checks of -f FORMAT: one floating-point conversion (%% aside)."""
    text = fmt.replace("%%", "")
    quoted = f"\u2018{fmt}\u2019"
    if "%" not in text:
        raise _Usage(f"format {quoted} has no % directive", "format")
    found = _FORMAT.match(text, text.index("%"))
    if found is None:
        directive = re.match(r"%[-+ #0']*\d*(?:\.\d*)?(.?)", text[text.index("%"):])
        raise _Usage(f"format {quoted} has unknown %{directive.group(1) if directive else ''} directive", "format")
    if "%" in text[found.end():]:
        raise _Usage(f"format {quoted} has too many % directives", "format")


def _precision(word: str) -> int | None:
    """Digits after the point as written (`0.10` has 2), moved by an exponent (`1e-2` has 2,
    `1.5e1` none), as GNU's seq counts them; None for inf, which GNU prints with %g."""
    text = word.strip().lower()
    if "inf" in text or "n" in text:
        return None
    mantissa, _, exponent = text.partition("e")
    places = len(mantissa.partition(".")[2])
    if exponent:
        power = int(exponent)
        places += -power if power < 0 else -min(places, power)
    return places


def _numbers(first: Decimal, step: Decimal, last: Decimal, operands: list[str], fmt: str | None,
             width: bool) -> Iterator[str]:
    """Each number as GNU's seq writes it. The default format is %.Nf with N the most digits
    after the point of FIRST and INCREMENT (LAST's do not count), or %g where one of the
    three is infinite. -w pads to the widest, which is at one end (the sign counts)."""
    if (step > 0 and first > last) or (step < 0 and first < last):
        return iter(())
    words = ([operands[0]] if len(operands) > 1 else []) + ([operands[1]] if len(operands) == 3 else [])
    precisions = [_precision(w) for w in [*words, operands[-1]]]
    places = None if None in precisions else max([0, *(p for p in precisions[:-1] if p is not None)])
    if fmt is None and places == 0 and first.is_finite() and last.is_finite():
        stop = int(math.floor(last)) if step > 0 else int(math.ceil(last))
        numbers: Iterator[str] = map(str, range(int(first), stop + (1 if step > 0 else -1), int(step)))
        ends = [str(int(first)), str(int(first) + (stop - int(first)) // int(step) * int(step))]
    else:
        pattern = fmt.replace("%%", "\0") if fmt is not None else ("%g" if places is None else f"%.{places}f")

        def formatted(value: Decimal) -> str:
            return (pattern % float(value)).replace("\0", "%")

        numbers = map(formatted, _values(first, step, last))
        ends = [formatted(first)]
        if first.is_finite() and last.is_finite():
            ends.append(formatted(first + int((last - first) / step) * step))
    if not width:
        return numbers
    widest = max(len(n) for n in ends)
    return (n.zfill(widest) for n in numbers)


def _values(first: Decimal, step: Decimal, last: Decimal) -> Iterator[Decimal]:
    """FIRST + i * INCREMENT up to LAST: no drift. `seq 1 inf` goes on until the run's limits
    end it, as GNU's until it is killed."""
    if not first.is_finite():
        yield first
        return
    i = 0
    while True:
        value = first + i * step
        if (step > 0 and value > last) or (step < 0 and value < last):
            return
        yield value
        i += 1


def _text(numbers: Iterator[str], separator: str) -> str:
    """The numbers joined, 64k at a time: millions of them are never a list of millions of
    strings (3,000,000 would be ~200 MB of objects for a 23 MB text)."""
    blocks: list[str] = []
    while block := list(itertools.islice(numbers, 65536)):
        blocks.append(separator.join(block))
    return separator.join(blocks) + "\n" if blocks else ""
