"""The thread pool of run bookkeeping, apart from the one the other methods use.

A run's own blocking steps (checking its input blobs, holding its skills' cached
folders, writing a large request to its worker, storing a large output as a blob,
the shared database's admission) run here, on `RUN_THREADS` threads of their own;
`read_blob`, `create_blob`, skill reads and the like use the event loop's default
pool (asyncio.to_thread), bounded per tenant by tenants/calls.py. So a tenant
flooding the one cannot delay a run's start or end, nor a run flood the other.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

RUN_THREADS = 16  # runs in flight need at most a couple each, and only briefly
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=RUN_THREADS, thread_name_prefix="wasmrun-run-io")

P = ParamSpec("P")
T = TypeVar("T")


def run_pool() -> concurrent.futures.ThreadPoolExecutor:
    return _pool


async def for_run(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread`, on the run bookkeeping pool (context variables carried along)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(_pool, call)
