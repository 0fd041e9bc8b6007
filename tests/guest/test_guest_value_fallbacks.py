"""The guest's value conversion (python_wasm/runtime/_values.py, pure Python, loaded here
as the guest loads it) against objects that lie about what they are: each becomes its
text with a warning, never an exception that fails the run."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import pytest

from tests.liveserver import REPO

VALUES = REPO / "python_wasm" / "runtime" / "_values.py"


@pytest.fixture(scope="module")
def values() -> ModuleType:
    spec = importlib.util.spec_from_file_location("guest_values", VALUES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeFrame:
    """Says it is pandas' DataFrame; has none of its methods."""

    __module__ = "pandas.core.frame"

    def __repr__(self) -> str:
        return "<a fake frame>"


FakeFrame.__name__ = FakeFrame.__qualname__ = "DataFrame"


class FakeArray:
    """Says it is numpy's; its dtype is a string."""

    __module__ = "numpy"
    dtype = "float64"

    def tolist(self) -> list[int]:
        return [1]


class LyingMeta(type):
    @property
    def __module__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("no module")


class NoModule(metaclass=LyingMeta):
    pass


class BadRepr:
    __module__ = "pandas"

    def __repr__(self) -> Any:
        return 5


@pytest.mark.parametrize("value", [FakeFrame(), FakeArray(), NoModule(), BadRepr()], ids=lambda v: type(v).__name__)
def test_a_value_that_lies_about_its_type_becomes_its_text(values: ModuleType, value: object) -> None:
    converted, warnings = values.plain({"x": [value]})
    assert isinstance(converted["x"][0], str)
    assert len(warnings) == 1 and "written as its text" in warnings[0] and 'output["x"][0]' in warnings[0]


def test_a_lying_key_is_text_too(values: ModuleType) -> None:
    converted, _ = values.plain({FakeArray(): 1, NoModule(): 2})
    assert list(converted.values()) == [1, 2] and all(isinstance(k, str) for k in converted)


def test_a_cycle_is_still_too_deep(values: ModuleType) -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(values.TooDeep):
        values.plain([FakeFrame(), cycle])
