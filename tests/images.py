"""The image a test runs on, as a test parameter.

Every test takes the session-scoped `test_image` parameter (tests/conftest.py): its id ends in
`[stdlib]` or `[data]`. A test runs on the stdlib image unless it, its class or its module is
marked with the images it needs:

    pytestmark = pytest.mark.images("stdlib", "data")   # a module that runs on both
    @pytest.mark.images("data")                          # a test that needs pandas

One `pytest` run covers both images: pytest orders the tests by the parameter, so each image's
executor and servers are made once and closed before the other image's are made.
`WASMRUN_TEST_IMAGE=data` (or `stdlib`) keeps only that image's tests, for a quick loop
(`make test-data`).

Fixtures and helpers read the running test's image from `current()`: it is set when the
parameter's fixture is set up, before any module- or function-scoped fixture that starts a
server, so a server made for a module is on that module's image.
"""

from __future__ import annotations

import os

import pytest

IMAGES = ("stdlib", "data")
DEFAULT = ("stdlib",)
_current = {"image": "stdlib"}


def wanted() -> tuple[str, ...]:
    """The images this run covers: both, or the one WASMRUN_TEST_IMAGE names."""
    only = os.environ.get("WASMRUN_TEST_IMAGE")
    if only is None or only == "":
        return IMAGES
    if only not in IMAGES:
        raise pytest.UsageError(f"WASMRUN_TEST_IMAGE={only!r}: expected one of {', '.join(IMAGES)}")
    return (only,)


def images_of(node: pytest.Item | pytest.Function | object) -> tuple[str, ...]:
    marker = node.get_closest_marker("images")  # type: ignore[attr-defined]
    if marker is None:
        return DEFAULT
    unknown = [name for name in marker.args if name not in IMAGES]
    if unknown or not marker.args:
        raise pytest.UsageError(f"@pytest.mark.images{marker.args!r}: expected names among {IMAGES}")
    return tuple(marker.args)


def set_current(image: str) -> None:
    _current["image"] = image


def current() -> str:
    """The image of the test running now (or of the fixtures being set up for it)."""
    return _current["image"]


def on_data() -> bool:
    return current() == "data"
