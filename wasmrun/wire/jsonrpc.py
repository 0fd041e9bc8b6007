"""JSON-RPC 2.0: envelopes, batches, notifications and error objects.

`handle(body, dispatch)` takes the raw request body and returns its `Answer`: the
response body, or None when there is nothing to send (only notifications), and
the longest wait its errors ask for (the HTTP layer's `Retry-After`). Params stay
`msgspec.Raw` here; the dispatcher decodes them into the method's Struct.
`id` is kept as raw JSON, so it is echoed exactly: a string stays a string,
`1` stays `1`, `null` stays `null`.

The body is checked once, before anything decodes it: it must be UTF-8 (so an
echoed `id` is too), hold at most `MAX_CONTAINERS` arrays/objects and nest them
at most `MAX_DEPTH` deep, so no later step (msgspec, the params Structs, the
guest request) meets a document deep enough to exhaust a recursion limit or
large enough in objects to exhaust memory.

A member named twice in a call object or in its params object (two `method`s,
two `name`s) is refused (-32600): decoders disagree on which one counts (msgspec
takes the last, many proxies the first), so a front proxy that filters on one
would be bypassed by the other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, Raw, UnsetType

from wasmrun.protocol.errors import InternalError, InvalidRequest, ParseError, RPCError
from wasmrun.protocol.types import BODY_MAX_DEPTH

Dispatch = Callable[[str, Raw], Awaitable[Any]]

MAX_BATCH = 100
MAX_MESSAGE_CHARS = 1000
MAX_DEPTH = BODY_MAX_DEPTH  # arrays/objects, the envelope included (protocol/types.py: MAX_ARGS_DEPTH)
# Each decoded array/object is a Python object of 50+ bytes: this bounds what a
# body can cost in memory and decoding time (a 32 MiB body of `[]` is 16 million).
MAX_CONTAINERS = 1_000_000
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


class Answer(NamedTuple):
    """The response to one request body."""

    body: bytes | None  # None: nothing to send (only notifications came)
    # The longest `retry_after_s` among the errors answered (a notification's too):
    # when the client may try again, for an HTTP `Retry-After` header.
    retry_after_s: int | None = None


_encoder = msgspec.json.Encoder()


def error_body(error: RPCError, id: Raw = NULL) -> bytes:
    message = error.message
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    data = UNSET if error.data is None else error.data
    return _encoder.encode(Failure("2.0", id, ErrorObject(error.code, message, data)))


_NOT_KEPT = bytes(b for b in range(256) if b not in b'"[]{}')
_OBJECTS_AS_ARRAYS = bytes.maketrans(b"{}", b"[]")  # only the depth counts
_RUN = re.compile(rb"\[+|\]+")


def structural_brackets(body: bytes) -> bytes:
    """The brackets of the JSON text `body` that open and close arrays/objects, in
    order, objects written as arrays; found in C, without decoding.

    Escaped backslashes and quotes go first (inside a JSON string backslashes
    only come in escape pairs, so pairing them left to right is right), then
    everything but quotes and brackets, then what lies between quotes. On valid
    JSON the answer is exact; on invalid JSON it is exact up to the point where
    a parser stops."""
    structure = body.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in body else body
    structure = structure.translate(_OBJECTS_AS_ARRAYS, _NOT_KEPT).replace(b'""', b"")
    return b"".join(structure.split(b'"')[::2]) if b'"' in structure else structure


def brackets_deeper_than(brackets: bytes, limit: int) -> bool:
    """Whether `brackets` (only `[` and `]`) nest more than `limit` deep, without recursing.

    Rounds of deleting empty pairs take one level off every container each,
    while they shrink the text fast (in C); a walk over runs of `[` and `]`
    measures what is left."""
    rounds = 0
    while len(brackets) > 2 * limit:  # each round removes an eighth at least
        fewer = brackets.replace(b"[]", b"")  # one pass: pairs it makes wait for the next round
        if 8 * len(fewer) > 7 * len(brackets):  # under an eighth gone: walking is cheaper now
            break
        brackets = fewer
        rounds += 1
    depth = rounds  # each round took one level off the deepest point
    if depth > limit:
        return True
    for run in _RUN.finditer(brackets):
        step = run.end() - run.start()
        depth += step if brackets[run.start()] == ord("[") else -step
        if depth > limit:
            return True
    return False


def nests_deeper_than(body: bytes, limit: int) -> bool:
    """Whether arrays/objects in the JSON text `body` nest more than `limit` deep."""
    if body.count(b"[") + body.count(b"{") <= limit:  # the common case: cannot be deeper
        return False
    return brackets_deeper_than(structural_brackets(body), limit)


def check_body(body: bytes) -> ParseError | None:
    """The one bounded look at raw client bytes, before anything decodes them:
    UTF-8, at most MAX_CONTAINERS arrays/objects, nested at most MAX_DEPTH deep."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ParseError(f"parse error: the body is not valid UTF-8 (byte {exc.start})")
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:  # the common case: nothing to measure
        return None
    brackets = structural_brackets(body)
    if len(brackets) > 2 * MAX_CONTAINERS:
        return ParseError(
            f"parse error: the body holds more than this server's limit of {MAX_CONTAINERS}"
            " arrays/objects; pass bulk data as a blob",
            {"max_containers": MAX_CONTAINERS},
        )
    if brackets_deeper_than(brackets, MAX_DEPTH):
        return ParseError(
            f"parse error: arrays/objects nest deeper than this server's limit of {MAX_DEPTH} levels",
            {"max_depth": MAX_DEPTH},
        )
    return None


def _decode_problem(body: bytes, exc: Exception) -> str:
    """msgspec's reason, except where it misleads: a string with a lone UTF-16 surrogate's
    escape (`"\\ud800"`) is reported as "Input data was truncated" or "unexpected end of hex
    escape". The standard library's parser takes lone surrogates; if it reads the body and
    the text it gives cannot be UTF-8, a lone surrogate is what the body holds."""
    try:
        json.dumps(json.loads(body), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "JSON is malformed: a string holds a lone UTF-16 surrogate (\\uD800-\\uDFFF without its other half)"
    except (ValueError, RecursionError):
        pass
    return str(exc)


def _is_id(raw: Raw) -> bool:
    """A string, number or null (msgspec has already checked it is JSON)."""
    data = bytes(raw)
    return bool(data) and data[0] in _ID_START


async def handle(body: bytes, dispatch: Dispatch) -> Answer:
    problem = check_body(body)
    if problem is not None:
        return Answer(error_body(problem))
    try:
        msgspec.json.decode(body, type=Raw)  # checks the whole body is JSON
    except (msgspec.DecodeError, RecursionError) as exc:  # RecursionError: cannot, after check_body
        return Answer(error_body(ParseError(f"parse error: {_decode_problem(body, exc)}")))
    if body.lstrip()[:1] != b"[":
        return await _one(Raw(body), dispatch)
    calls = msgspec.json.decode(body, type=list[Raw])
    if not calls:
        return Answer(error_body(InvalidRequest("invalid request: empty batch")))
    if len(calls) > MAX_BATCH:
        return Answer(error_body(
            InvalidRequest(f"invalid request: a batch may hold at most {MAX_BATCH} calls, not {len(calls)}")
        ))
    answered = await asyncio.gather(*(_one(c, dispatch) for c in calls))
    bodies = [a.body for a in answered if a.body is not None]
    waits = [a.retry_after_s for a in answered if a.retry_after_s is not None]
    return Answer(b"[" + b",".join(bodies) + b"]" if bodies else None, max(waits) if waits else None)


_ENVELOPE_MEMBERS = tuple(b'"%s"' % name.encode() for name in Request.__struct_fields__)
# A string (escapes included) or a bracket: the tokens the duplicate scan needs.
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')
_COLON = re.compile(rb"[ \t\r\n]*:")
# Bytes the cheap check may scan (a count of each name over the body): past it, many
# members in a large body, the one pass of duplicate_member is the cheaper (5,000
# members in 25 MB counted one by one were minutes of the event loop).
COUNT_BUDGET = 16 * 1024 * 1024


def _may_repeat(raw: bytes, params: bytes) -> bool:
    """Cheap: False when no member of the call or of its params can occur twice (each
    name's quoted text occurs once at most, and no escape could spell one otherwise)."""
    if b"\\u" in raw or b"\\/" in raw:  # the only spellings msgspec's encoder does not write
        return True
    names = list(_ENVELOPE_MEMBERS)
    if params[:1] == b"{":
        try:
            names.extend(msgspec.json.encode(k) for k in msgspec.json.decode(params, type=dict[str, Raw]))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return True
    if len(names) * len(raw) > COUNT_BUDGET:
        return True
    return any(raw.count(name) > 1 for name in names)


def duplicate_member(raw: bytes) -> str | None:
    """`raw` (one valid JSON call object): the first member named twice in it or in its
    params object, as `method` or `params.name`; None when there is none. One pass over
    its strings and brackets, only when a cheap count says a repeat is possible."""
    depth, member, in_params = 0, "", False
    seen: list[set[str]] = [set(), set()]
    for token in _TOKEN.finditer(raw):
        first = raw[token.start()]
        if first == 0x22:  # a string: a member's name when a ':' follows
            if depth == 1 or (depth == 2 and in_params):
                if _COLON.match(raw, token.end()) is None:
                    continue
                name = msgspec.json.decode(token.group(), type=str)
                if name in seen[depth - 1]:
                    return name if depth == 1 else f"params.{name}"
                seen[depth - 1].add(name)
                if depth == 1:
                    member = name
        elif first in b"[{":
            depth += 1
            if depth == 2:
                in_params = member == "params" and first == 0x7B
                seen[1] = set()
        else:
            depth -= 1
    return None


async def _one(raw: Raw, dispatch: Dispatch) -> Answer:
    try:
        request = msgspec.json.decode(raw, type=Request)
    except msgspec.ValidationError as exc:
        return Answer(error_body(InvalidRequest(f"invalid request: {exc}"), _salvage_id(raw)))
    text = bytes(raw)
    if _may_repeat(text, bytes(request.params)) and (twice := duplicate_member(text)) is not None:
        return Answer(error_body(
            InvalidRequest(f"invalid request: member {twice[:100]!r} is given twice", {"member": twice[:100]}),
            request.id if twice != "id" and _is_id(request.id) else NULL,
        ))
    is_notification = len(request.id) == 0
    if not is_notification and not _is_id(request.id):
        return Answer(error_body(InvalidRequest("invalid request: id must be a string, a number or null")))
    reply_id = NULL if is_notification else request.id
    if request.jsonrpc != "2.0":
        return Answer(error_body(InvalidRequest('invalid request: "jsonrpc" must be "2.0"'), reply_id))
    params = bytes(request.params)
    if params and params[0] not in b"{[n":
        return Answer(error_body(InvalidRequest("invalid request: params must be an object or an array"), reply_id))
    retry_after_s = None
    try:
        result = await dispatch(request.method, request.params)
        answer = _encoder.encode(Success("2.0", reply_id, result))
    except RPCError as exc:
        answer = error_body(exc, reply_id)
        retry_after_s = exc.retry_after_s
    except Exception:
        ref = secrets.token_hex(4)
        logger.exception("internal error (ref %s) in %r", ref, request.method[:100])
        answer = error_body(InternalError(f"internal error (ref {ref})"), reply_id)
    return Answer(None if is_notification else answer, retry_after_s)


def _salvage_id(raw: Raw) -> Raw:
    try:
        found = msgspec.json.decode(raw, type=_IdOnly).id
    except msgspec.ValidationError:
        return NULL
    return found if _is_id(found) else NULL
