"""A notebook cell split per line, as IPython's transforms see it, for every door that runs
cells (the Jupyter kernel's execute_request, E2B's /execute, Azure's code/execute).

A `!cmd` line at the start of a line is a command (the guest's shell, in the same session),
and so are the install lines agents write (`!pip install x`, `%pip install -q x`,
`!{sys.executable} -m pip install x`, `%uv pip install x`); `%matplotlib ...` is nothing
(charts are displays already), any other magic a `CellRefused`; the Python lines between
them are the steps that run as session runs, each knowing the cell line it starts on (so
tracebacks name the cell's lines). Pure: no door, no session."""

from __future__ import annotations

import re
from dataclasses import dataclass

# An install line, `!` or `%` (IPython's %pip magic): run as the shell's command.
PIP_LINE = re.compile(
    r"^\s*[!%]{1,2}\s*((?:pip3?|python3?\s+-m\s+pip|\{sys\.executable\}\s+-m\s+pip|uv\s+pip|conda|mamba)"
    r"\s+install\b.*)$"
)
COMMAND_LINE = re.compile(r"^!(?!=)(.*)$")  # at the start of the line only
# IPython expands `{expr}` in a `!` line; the one agents write is the interpreter's path.
EXECUTABLE = "{sys.executable}"
INDENTED_COMMAND = re.compile(r"^\s+!(?!=)")
NOTHING_MAGIC = re.compile(r"^\s*%matplotlib\b")
MAGIC = re.compile(r"^\s*%")


class CellRefused(Exception):
    """A line this kernel does not run: its message, as the cell's error."""


@dataclass
class Step:
    kind: str  # "python" or "command"
    text: str
    line: int  # the cell's line it starts on, from 1


def split(code: str) -> list[Step]:
    """The cell's steps in order (blank ones dropped)."""
    steps: list[Step] = []
    python: list[str] = []
    start = 1

    def flush(next_line: int) -> None:
        nonlocal python, start
        if any(text.strip() for text in python):
            steps.append(Step("python", "\n".join(python), start))
        python, start = [], next_line

    for number, text in enumerate(code.split("\n"), start=1):
        if (pip := PIP_LINE.match(text)) is not None:
            flush(number + 1)
            steps.append(Step("command", pip.group(1).strip().replace(EXECUTABLE, "python"), number))
        elif (found := COMMAND_LINE.match(text)) is not None:
            flush(number + 1)
            steps.append(Step("command", found.group(1).strip().replace(EXECUTABLE, "python"), number))
        elif INDENTED_COMMAND.match(text):
            raise CellRefused(f"line {number}: a `!` command runs only at the start of a line, not inside a block")
        elif NOTHING_MAGIC.match(text):
            python.append("")
        elif MAGIC.match(text):
            raise CellRefused(
                f"line {number}: IPython magics do not run in a wasmrun kernel (only `!cmd` lines, `%matplotlib` and"
                f" `%pip install`): write the step in Python. {text.strip()[:200]}"
            )
        else:
            python.append(text)
    flush(0)
    return steps
