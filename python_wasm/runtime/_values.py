"""The JSON form of a return value that json's own encoder refuses.

A run's output is written by the C encoder first (its fast path: plain JSON
values, numpy arrays without gaps). Only when that fails (a NaN, a pandas
object, a date, a key that is not a string, an object with no JSON form) is
the value walked here, once, into plain JSON that keeps its meaning:

- a DataFrame is {"columns", "index", "data"} (pandas' orient="split"), plus
  "index_names" when its index levels are named;
- a Series is an object keyed by its labels when they are unique scalars, a
  plain list when its index is the default 0..n-1, else {"index", "values"}
  (plus "name" and "index_names" when set); an Index is the list of its labels;
- numpy arrays are lists, numpy scalars numbers; dates and times ISO 8601 text;
  a Decimal a number when a float says it exactly, else its text; Intervals,
  Periods, timedeltas and UUIDs their text; sets sorted lists;
- NaN, infinities, NaT and pandas' NA become null, counted with where they were;
- anything else becomes its text (repr), counted the same way.

The caller turns the counts into the run's warnings. Nothing here imports
numpy or pandas: a value of theirs is recognised by its type's module name.
"""

from __future__ import annotations

import datetime
import decimal
import math
import sys

MAX_DEPTH = 256  # the host's bound too (wasmrun/sandbox/jsontext.py MAX_DEPTH)
MAX_PATHS = 5  # places named per warning
MAX_TEXT = 1000  # characters of a repr kept


class TooDeep(Exception):
    pass


def _path_text(path) -> str:
    parts = []
    while path is not None:
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else '["' + key.replace('"', '\\"') + '"]')
    return "output" + "".join(reversed(parts))


def _module(value) -> str:
    """The module `value`'s type names as its own ("" when asking fails: a metaclass may
    make `__module__` anything, a property that raises included)."""
    try:
        module = type(value).__module__
    except Exception:
        return ""
    return module if isinstance(module, str) else ""


class Plain:
    """One walk of one value: the places where a value was missing or only text."""

    def __init__(self) -> None:
        self.missing: list = []
        self.missing_count = 0
        self.texts: list = []
        self.text_count = 0

    def warnings(self) -> list[str]:
        found = []
        if self.missing_count:
            where = ", ".join(_path_text(p) for p in self.missing)
            more = f" and {self.missing_count - len(self.missing)} more" if self.missing_count > len(self.missing) else ""
            found.append(
                f"the output held {self.missing_count} NaN, infinite or missing value"
                f"{'s' if self.missing_count != 1 else ''} (NaN, inf, NaT, NA), written as null: {where}{more}"
            )
        if self.text_count:
            where = ", ".join(f"{_path_text(p)} ({kind})" for p, kind in self.texts)
            more = f" and {self.text_count - len(self.texts)} more" if self.text_count > len(self.texts) else ""
            found.append(
                f"the output held {self.text_count} value{'s' if self.text_count != 1 else ''} with no JSON form,"
                f" written as {'their' if self.text_count != 1 else 'its'} text (repr): {where}{more}"
            )
        return found

    def _missing(self, path) -> None:
        self.missing_count += 1
        if len(self.missing) < MAX_PATHS:
            self.missing.append(path)
        return None

    def _text(self, value, path) -> str:
        self.text_count += 1
        kind = type(value)
        if len(self.texts) < MAX_PATHS:
            module = _module(value)
            name = kind.__name__ if module == "builtins" else f"{module}.{kind.__qualname__}"
            self.texts.append((path, name))
        try:
            text = repr(value)
            if not isinstance(text, str):
                raise TypeError
        except Exception:
            text = f"<{kind.__name__} object>"
        return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."

    def convert(self, value, path=None, depth: int = 0):
        if depth > MAX_DEPTH:
            raise TooDeep
        if value is None or isinstance(value, (str, int)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else self._missing(path)
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                k = self.key(k)
                out[k] = self.convert(v, (path, k), depth + 1)
            return out
        if isinstance(value, (list, tuple)):
            return [self.convert(v, (path, i), depth + 1) for i, v in enumerate(value)]
        try:
            module = _module(value).partition(".")[0]
            if module == "numpy":
                return self._numpy(value, path, depth)
            if module == "pandas":
                return self._pandas(value, path, depth)
            return self._other(value, path, depth)
        except (TooDeep, RecursionError):
            raise
        except Exception:
            # An object that only says it is numpy's or pandas' (its module name is
            # anyone's to set), or whose own methods fail: its text, never a failed run.
            return self._text(value, path)

    def _sequence(self, items, path, depth: int) -> list:
        return [self.convert(v, (path, i), depth + 1) for i, v in enumerate(items)]

    def _numpy(self, value, path, depth: int):
        dtype = getattr(value, "dtype", None)
        if dtype is None or not hasattr(value, "tolist"):
            return self._text(value, path)
        if dtype.kind in "Mm" and dtype.str[-3:-1] in ("ns", "ps", "fs", "as"):
            # finer than Python's datetimes (whose .item() is an int): as microseconds;
            # a day unit stays a date, NaT is None
            value = value.astype(dtype.str[:-3] + "us]")
        if dtype.kind in "Mm" and hasattr(value, "shape") and value.shape == ():
            item = value.item()
            return self._missing(path) if item is None else self.convert(item, path, depth)
        plain = value.tolist()
        if dtype.kind in "Mm" and plain is None:
            return self._missing(path)
        return self.convert(plain, path, depth)

    def _pandas(self, value, path, depth: int):
        name = type(value).__name__
        if name == "DataFrame":
            return self._frame(value, path, depth)
        if name == "Series":
            return self._series(value, path, depth)
        if hasattr(value, "nlevels") and hasattr(value, "tolist"):  # an Index, MultiIndex
            return self._sequence(value.tolist(), path, depth)
        if name in ("NaTType", "NAType"):
            return self._missing(path)
        if isinstance(value, (datetime.date, datetime.time)):  # Timestamp
            return value.isoformat()
        if name in ("Interval", "Period", "Timedelta"):
            return str(value)
        if name == "Categorical" or hasattr(value, "to_numpy"):  # arrays: Categorical, ExtensionArray
            return self._sequence(list(value), path, depth)
        return self._text(value, path)

    def _frame(self, frame, path, depth: int) -> dict:
        index = frame.index
        rows = [list(row) for row in frame.itertuples(index=False, name=None)]
        out = {
            "columns": self.convert(frame.columns.tolist(), (path, "columns"), depth + 1),
            "index": self.convert(index.tolist(), (path, "index"), depth + 1),
            "data": self.convert(rows, (path, "data"), depth + 1),
        }
        names = list(index.names)
        if any(n is not None for n in names):
            out["index_names"] = self.convert(names, (path, "index_names"), depth + 1)
        return out

    def _series(self, series, path, depth: int):
        index = series.index
        values = series.tolist()
        if type(index).__name__ == "RangeIndex" and index.start == 0 and index.step == 1:
            return self._sequence(values, path, depth)
        labels = index.tolist()
        if index.nlevels == 1 and index.is_unique and not any(isinstance(k, tuple) for k in labels):
            keys = [self.key(k) for k in labels]
            if len(set(keys)) == len(keys):
                return {k: self.convert(v, (path, k), depth + 1) for k, v in zip(keys, values, strict=True)}
        out = {
            "index": self.convert(labels, (path, "index"), depth + 1),
            "values": self.convert(values, (path, "values"), depth + 1),
        }
        if series.name is not None:
            out["name"] = self.convert(series.name, (path, "name"), depth + 1)
        if any(n is not None for n in index.names):
            out["index_names"] = self.convert(list(index.names), (path, "index_names"), depth + 1)
        return out

    def _other(self, value, path, depth: int):
        if isinstance(value, (datetime.date, datetime.time)):
            return value.isoformat()
        if isinstance(value, datetime.timedelta):
            return str(value)
        if isinstance(value, decimal.Decimal):
            if not value.is_finite():
                return self._missing(path)
            number = float(value)
            return number if decimal.Decimal(repr(number)) == value else str(value)
        if isinstance(value, (set, frozenset)):
            try:
                items = sorted(value)
            except TypeError:
                items = list(value)
            return self._sequence(items, path, depth)
        if _module(value) in ("uuid", "pathlib"):
            return str(value)
        enum = sys.modules.get("enum")
        if enum is not None and isinstance(value, enum.Enum):
            return self.convert(value.value, path, depth + 1)
        dataclasses = sys.modules.get("dataclasses")
        if dataclasses is not None and dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return self.convert(fields, path, depth + 1)
        return self._text(value, path)

    def key(self, key) -> str:
        """An object key as json writes it (str, int, float, bool, None), else its text."""
        if isinstance(key, str):
            return key
        if key is True or key is False:
            return "true" if key else "false"
        if key is None:
            return "null"
        if isinstance(key, int):
            return int.__repr__(key)
        if isinstance(key, float):
            return float.__repr__(key)
        if isinstance(key, (datetime.date, datetime.time)):
            return key.isoformat()
        try:
            if _module(key).partition(".")[0] == "numpy" and hasattr(key, "item"):
                return self.key(key.item())
            text = str(key)
            if isinstance(text, str):
                return text
        except Exception:
            pass
        return f"<{type(key).__name__} object>"


def plain(value) -> tuple[object, list[str]]:
    """`value` as plain JSON values, and the warnings saying what was changed.
    Raises TooDeep past MAX_DEPTH (a cycle, too)."""
    walk = Plain()
    try:
        converted = walk.convert(value)
    except RecursionError:
        raise TooDeep from None
    return converted, walk.warnings()
