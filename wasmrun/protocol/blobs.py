"""create_blob, read_blob and the delete_blob extension.

A blob is its owner's (the tenant whose call or run wrote it): any other
tenant gets the same "not found" as for an id that never existed.

Text goes both ways as a plain string. Binary content travels as base64 with
`"encoding": "base64"`: create_blob takes it that way, and read_blob answers
that way for any blob whose kind is not textual or whose bytes are not UTF-8.
For base64 answers, `max_bytes` counts the raw bytes before encoding.
"""

from __future__ import annotations

import asyncio
import base64

from wasmrun.blobs.kinds import InvalidKind, check_kind
from wasmrun.blobs.quota import BlobQuotaExceeded
from wasmrun.blobs.sampling import is_text_kind, utf8_head, utf8_tail
from wasmrun.blobs.store import BlobInfo, is_blob_id
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import BlobNotFound, ContentTooLarge, InvalidParams, QuotaExceeded
from wasmrun.protocol.types import (
    CreateBlobParams,
    CreateBlobResult,
    DeleteBlobParams,
    DeleteBlobResult,
    ReadBlobParams,
    ReadBlobResult,
)


def blob_info(ctx: Context, blob_id: str, field: str) -> BlobInfo:
    info = ctx.blobs.info(blob_id, ctx.caller.tenant) if is_blob_id(blob_id) else None
    if info is None:
        raise not_found(blob_id, field)
    return info


def not_found(blob_id: str, field: str) -> BlobNotFound:
    return BlobNotFound(f"blob {blob_id[:100]!r} does not exist", field=field)


def quota_error(exc: BlobQuotaExceeded) -> QuotaExceeded:
    return QuotaExceeded(f"quota exceeded: {exc.message}", exc.limit, exc.value)


async def create_blob(ctx: Context, p: CreateBlobParams) -> CreateBlobResult:
    try:
        check_kind(p.kind)
    except InvalidKind as exc:
        raise InvalidParams(str(exc), field="kind") from None
    if p.encoding == "base64":
        try:
            data = base64.b64decode(p.content, validate=True)
        except ValueError:  # binascii.Error, or a character outside ASCII
            raise InvalidParams("content is not valid base64", field="content") from None
    else:
        data = p.content.encode("utf-8")
    caller = ctx.caller
    try:
        blob_id = await asyncio.to_thread(
            ctx.blobs.create, data, p.kind, None, caller.tenant, caller.blob_quota
        )
    except BlobQuotaExceeded as exc:
        raise quota_error(exc) from None
    return CreateBlobResult(blob_id=blob_id, size_bytes=len(data))


async def delete_blob(ctx: Context, p: DeleteBlobParams) -> DeleteBlobResult:
    """Extension: remove one of the caller's blobs. A run already reading it gets
    "no such blob" from its next read, never a crash."""
    deleted = is_blob_id(p.blob_id) and await asyncio.to_thread(ctx.blobs.delete, p.blob_id, ctx.caller.tenant)
    if not deleted:
        raise not_found(p.blob_id, "blob_id")
    return DeleteBlobResult(deleted=True)


async def read_blob(ctx: Context, p: ReadBlobParams) -> ReadBlobResult:
    return await asyncio.to_thread(_read_blob, ctx, p)


def _read(ctx: Context, blob_id: str, offset: int, length: int) -> bytes:
    try:
        return ctx.blobs.read(blob_id, offset, length, ctx.caller.tenant)
    except KeyError:  # deleted since its info was read
        raise not_found(blob_id, "blob_id") from None


def _read_blob(ctx: Context, p: ReadBlobParams) -> ReadBlobResult:
    info = blob_info(ctx, p.blob_id, "blob_id")
    size = info.size_bytes
    text = info.utf8 and is_text_kind(info.kind)
    if p.mode == "full":
        if size > ctx.max_full_read_bytes:
            raise ContentTooLarge(
                f"blob is {size} bytes, above the {ctx.max_full_read_bytes}-byte limit for"
                " mode 'full'; read it with 'sample_head' or 'sample_tail'",
                field="mode",
            )
        data = _read(ctx, p.blob_id, 0, size)
    else:
        n = min(p.max_bytes, size, ctx.max_full_read_bytes)
        if p.mode == "sample_head":
            data = _read(ctx, p.blob_id, 0, n)
            data = utf8_head(data) if text else data
        else:
            data = _read(ctx, p.blob_id, size - n, n)
            data = utf8_tail(data) if text else data
    content = data.decode("utf-8") if text else base64.b64encode(data).decode("ascii")
    return ReadBlobResult(
        content=content,
        truncated=len(data) < size,
        kind=info.kind,
        encoding="utf-8" if text else "base64",
        size_bytes=size,
    )
