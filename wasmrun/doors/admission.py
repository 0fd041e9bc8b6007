"""A door's request takes a place in its tenant's `concurrent_requests`, as /rpc's does (the
count shared by every door of the server), or is refused at once with the answer /rpc gives:
429 and the limit named. The door renders `Busy` in its protocol's shape."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from wasmrun.tenants.caller import Caller
from wasmrun.tenants.calls import RequestsInFlight, too_many_requests_message

TOO_MANY_REQUESTS = 429


@dataclass(frozen=True)
class Busy:
    """The tenant has its `concurrent_requests` in flight: the request is not taken."""

    message: str
    status: int = TOO_MANY_REQUESTS


def admit(in_flight: RequestsInFlight, caller: Caller) -> contextlib.ExitStack | Busy:
    """The request's place, held until the returned stack is closed; or `Busy`."""
    stack = contextlib.ExitStack()
    if not stack.enter_context(in_flight.enter(caller)):
        stack.close()
        return Busy(too_many_requests_message(caller))
    return stack
