"""The thread pools of run bookkeeping and of session storage, apart from the one the other methods use.

A run's own blocking steps (checking its input blobs, holding its skills' cached
folders, writing a large request to its worker, storing a large output as a blob,
the shared database's admission) run here, on `RUN_THREADS` threads of their own;
`read_blob`, `create_blob`, skill reads and the like use the event loop's default
pool (asyncio.to_thread), bounded per tenant by tenants/calls.py. So a tenant
flooding the one cannot delay a run's start or end, nor a run flood the other.

A session's storage work that is not a run's (fork_session's copy, close_session's
delete: as long as a version has files) has a third pool, `SESSION_THREADS`
threads, of which one tenant holds at most `SESSION_THREADS_PER_TENANT` at once:
a tenant forking and closing in a loop delays neither runs (their end, which
records a session's new version, is on the run pool) nor reads, and leaves
the other tenants half the session pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import weakref
from collections.abc import Callable
from typing import ParamSpec, TypeVar

RUN_THREADS = 16  # runs in flight need at most a couple each, and only briefly
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=RUN_THREADS, thread_name_prefix="wasmrun-run-io")

SESSION_THREADS = 4
SESSION_THREADS_PER_TENANT = 2
_session_pool = concurrent.futures.ThreadPoolExecutor(
    max_workers=SESSION_THREADS, thread_name_prefix="wasmrun-session-io"
)
# Per event loop (tests run several), per tenant: its share of the session pool.
_session_shares: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)

P = ParamSpec("P")
T = TypeVar("T")


def run_pool() -> concurrent.futures.ThreadPoolExecutor:
    return _pool


async def for_run(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread`, on the run bookkeeping pool (context variables carried along)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(_pool, call)


def session_pool() -> concurrent.futures.ThreadPoolExecutor:
    return _session_pool


async def for_session_storage(tenant: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn` on the session storage pool, at most SESSION_THREADS_PER_TENANT of `tenant`'s at once."""
    loop = asyncio.get_running_loop()
    shares = _session_shares.setdefault(loop, {})
    share = shares.get(tenant)
    if share is None:
        share = shares[tenant] = asyncio.Semaphore(SESSION_THREADS_PER_TENANT)
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    async with share:
        return await loop.run_in_executor(_session_pool, call)
