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


def drive(coro: Any) -> Any:
    """Run a coroutine of the shell to its end on an event loop of its own (the sandbox's
    loop: runtime/_compat.py), even when called from code already inside a loop: that
    loop and its running task are set aside for the call (asyncio allows one running
    loop, and on 3.12+ one current task, per thread) and put back after."""
    import asyncio

    outer = asyncio.events._get_running_loop()
    task = asyncio.current_task(outer) if outer is not None else None
    if task is not None:
        asyncio.tasks._leave_task(outer, task)
    loop = asyncio.new_event_loop()
    asyncio.events._set_running_loop(None)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
        asyncio.events._set_running_loop(outer)
        if task is not None:
            asyncio.tasks._enter_task(outer, task)
