"""The expiry sweep as a periodic task of the server's lifespan: sandboxes past their
timeout end even when no E2B request arrives to set the sweep off (calls.Front.sweep).

Cheap: one query of the records every PRUNE_EVERY_S. Safe with several servers: the store
hands each expired record to one taker (`take_expired` deletes what it returns under the
row's lock), so one server ends a sandbox and the rest find its record gone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from wasmrun.e2b.calls import PRUNE_EVERY_S, Front

logger = logging.getLogger("wasmrun.e2b")


def sweeping(front: Front) -> Callable[[], AbstractAsyncContextManager[None]]:
    """A lifespan that sets off the front's sweep every PRUNE_EVERY_S while the server runs."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(PRUNE_EVERY_S)
            try:
                front.sweep()  # throttled by the front itself: a request's sweep counts too
            except Exception:  # the next tick tries again; the server keeps serving
                logger.exception("the E2B expiry sweep failed")

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(loop())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifespan
