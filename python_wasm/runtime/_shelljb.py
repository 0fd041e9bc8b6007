"""just-bash, loaded the sandbox's way: import this module before any `just_bash` one.

just-bash's top-level module imports its curl support (`just_bash.network`), which needs
aiohttp and its eight dependencies. The sandbox has no sockets (network goes through the
host's egress, runtime.http), so curl is not registered (runtime/commands.py) and that one
module is replaced before the library loads: `just_bash.bash` asks it only for
`make_default_fetch`, which it calls only when given a network configuration, never here.
The library's files are used as published.
"""

from __future__ import annotations

import sys
import types
from typing import Any

NETWORK = "just_bash.network"
NO_NETWORK = "no network from the sandbox's shell: fetch URLs from Python with runtime.http"


def _no_fetch(*_args: object, **_kwargs: object) -> Any:
    raise RuntimeError(NO_NETWORK)


if NETWORK not in sys.modules:
    _offline = types.ModuleType(NETWORK, "just-bash's network support, left out in the sandbox")
    _offline.make_default_fetch = _no_fetch  # type: ignore[attr-defined]
    sys.modules[NETWORK] = _offline

import just_bash  # noqa: E402,F401  (the library, with the module above in place)
