"""JSON-RPC 2.0: envelopes, batches, notifications and error objects.

`handle(body, dispatch)` takes the raw request body and returns the response
body, or None when there is nothing to send (only notifications). Params stay
`msgspec.Raw` here; the dispatcher decodes them into the method's Struct.
`id` is kept as raw JSON, so it is echoed exactly: a string stays a string,
`1` stays `1`, `null` stays `null`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from msgspec import UNSET, Raw, UnsetType

from wasmrun.protocol.errors import InternalError, InvalidRequest, ParseError, RPCError

Dispatch = Callable[[str, Raw], Awaitable[Any]]

MAX_BATCH = 100
MAX_MESSAGE_CHARS = 1000
NULL = Raw(b"null")
_ID_START = frozenset(b'"-0123456789n')  # first byte of a JSON string, number or null

logger = logging.getLogger("wasmrun.rpc")


class Request(msgspec.Struct):
    jsonrpc: str
    method: str
    params: Raw = Raw(b"")  # empty: absent
    id: Raw = Raw(b"")  # empty: absent, i.e. a notification


class _IdOnly(msgspec.Struct):
    id: Raw = Raw(b"")


class ErrorObject(msgspec.Struct):
    code: int
    message: str
    data: Any | UnsetType = UNSET


class Success(msgspec.Struct):
    jsonrpc: str
    id: Raw
    result: Any


class Failure(msgspec.Struct):
    jsonrpc: str
    id: Raw
    error: ErrorObject


_encoder = msgspec.json.Encoder()


def error_body(error: RPCError, id: Raw = NULL) -> bytes:
    message = error.message
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    data = UNSET if error.data is None else error.data
    return _encoder.encode(Failure("2.0", id, ErrorObject(error.code, message, data)))


def _is_id(raw: Raw) -> bool:
    """A string, number or null (msgspec has already checked it is JSON)."""
    data = bytes(raw)
    return bool(data) and data[0] in _ID_START


async def handle(body: bytes, dispatch: Dispatch) -> bytes | None:
    try:
        msgspec.json.decode(body, type=Raw)  # checks the whole body is JSON
    except msgspec.DecodeError as exc:
        return error_body(ParseError(f"parse error: {exc}"))
    if body.lstrip()[:1] != b"[":
        return await _one(Raw(body), dispatch)
    calls = msgspec.json.decode(body, type=list[Raw])
    if not calls:
        return error_body(InvalidRequest("invalid request: empty batch"))
    if len(calls) > MAX_BATCH:
        return error_body(
            InvalidRequest(f"invalid request: a batch may hold at most {MAX_BATCH} calls, not {len(calls)}")
        )
    answers = [a for a in await asyncio.gather(*(_one(c, dispatch) for c in calls)) if a is not None]
    return b"[" + b",".join(answers) + b"]" if answers else None


async def _one(raw: Raw, dispatch: Dispatch) -> bytes | None:
    try:
        request = msgspec.json.decode(raw, type=Request)
    except msgspec.ValidationError as exc:
        return error_body(InvalidRequest(f"invalid request: {exc}"), _salvage_id(raw))
    is_notification = len(request.id) == 0
    if not is_notification and not _is_id(request.id):
        return error_body(InvalidRequest("invalid request: id must be a string, a number or null"))
    reply_id = NULL if is_notification else request.id
    if request.jsonrpc != "2.0":
        return error_body(InvalidRequest('invalid request: "jsonrpc" must be "2.0"'), reply_id)
    params = bytes(request.params)
    if params and params[0] not in b"{[n":
        return error_body(InvalidRequest("invalid request: params must be an object or an array"), reply_id)
    try:
        result = await dispatch(request.method, request.params)
        answer = _encoder.encode(Success("2.0", reply_id, result))
    except RPCError as exc:
        answer = error_body(exc, reply_id)
    except Exception:
        ref = secrets.token_hex(4)
        logger.exception("internal error (ref %s) in %r", ref, request.method[:100])
        answer = error_body(InternalError(f"internal error (ref {ref})"), reply_id)
    return None if is_notification else answer


def _salvage_id(raw: Raw) -> Raw:
    try:
        found = msgspec.json.decode(raw, type=_IdOnly).id
    except msgspec.ValidationError:
        return NULL
    return found if _is_id(found) else NULL
