"""A request's credentials, read in the forms its door accepts, and the tenant they name.

The outcome is typed: the tenant's `Caller`, or `Unauthenticated` (no key in any accepted
form, or one that names nobody), which each door answers in its own shape (E2B's and
Azure's JSON errors, Jupyter Server's, a WebSocket's denial). A server without tenants
answers its one caller whatever is sent, as /rpc does."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from wasmrun.tenants.caller import Caller

Authenticate = Callable[[str | None], Caller | None]  # an Authorization header's value -> its tenant


class KeyForm(enum.Enum):
    """Where a door's clients put the key; a door lists the forms it accepts, first first."""

    API_KEY_HEADER = "X-API-KEY: <key>"  # E2B's SDK
    AUTHORIZATION = "Authorization: Bearer <key>"  # the header as sent (the tenant store reads it)
    TOKEN_HEADER = "Authorization: token <key> (or Bearer)"  # Jupyter's clients
    TOKEN_QUERY = "?token=<key>"  # Jupyter's, on a WebSocket URL


@dataclass(frozen=True)
class Unauthenticated:
    """No tenant: `presented` says whether a key was sent in an accepted form at all."""

    presented: bool


def _authorization(connection: HTTPConnection, form: KeyForm) -> str | None:
    """The key as an Authorization header's value when `form` carries one; "" when the form
    is there and decides, but empty; None when the request does not use the form."""
    headers = connection.headers
    if form is KeyForm.API_KEY_HEADER:
        key = headers.get("x-api-key")
        return f"Bearer {key}" if key else None
    if form is KeyForm.AUTHORIZATION:
        return headers.get("authorization")
    if form is KeyForm.TOKEN_HEADER:
        scheme, _, key = headers.get("authorization", "").partition(" ")
        if scheme.lower() not in ("token", "bearer"):
            return None
        return f"Bearer {key.strip()}" if key.strip() else ""
    token = connection.query_params.get("token")
    return f"Bearer {token}" if token else None


def presented(connection: HTTPConnection, forms: Sequence[KeyForm]) -> str | None:
    """The key the request sends in the first of `forms` it uses, as an Authorization value."""
    for form in forms:
        found = _authorization(connection, form)
        if found is not None:
            return found or None
    return None


def resolve(authenticate: Authenticate, connection: HTTPConnection, forms: Sequence[KeyForm]) -> Caller | Unauthenticated:
    """The tenant of the key the request sends in one of `forms`."""
    authorization = presented(connection, forms)
    caller = authenticate(authorization)
    return caller if caller is not None else Unauthenticated(presented=authorization is not None)
