"""Run logs: these lines join stdout and stderr in the run's `logs_preview`."""

from __future__ import annotations

import _wasmrun
from runtime import _stdio

__all__ = ["debug", "error", "info", "warning"]

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40


def _log(level: int, msg: object) -> None:
    # Flush first so a log line lands after the prints that preceded it.
    _stdio.flush()
    _wasmrun.log(level, str(msg))


def debug(msg: object) -> None:
    _log(DEBUG, msg)


def info(msg: object) -> None:
    _log(INFO, msg)


def warning(msg: object) -> None:
    _log(WARNING, msg)


def error(msg: object) -> None:
    _log(ERROR, msg)
