"""envd's HTTP `/files`, streamed: an upload or a download is never held whole in the
server's memory, and every write and read of its bytes runs off the event loop.

Upload: an octet-stream body goes to a temporary file as it arrives (gzip inflated on the
way, as the SDK's `gzip=True` sends it); a multipart body goes through Starlette's parser
(python-multipart: files, fields and field sizes bounded, each file spooled to disk). Both
are bounded by the sandbox's workspace quota (more cannot fit: 507). Each file becomes a
blob of the sandbox's tenant (`BlobStore.create_file`, in its blob quota, of a kind made
for the one transfer so that no other blob shares its id), one run of the file program
copies them from /blobs into /workspace a MiB at a time (the workspace quota applies as
to any run; a run stopped by it is rolled back, so nothing is left under the name), and
the blobs are deleted.

Download: one run of the file program stores the file as blobs of DOWNLOAD_CHUNK bytes
(its run's blob I/O budget bounds the size); the host opens them (the file store's own
files, or a copy of the shared store's), deletes the blobs, and sends the bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import tempfile
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import Any, BinaryIO

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.responses import StreamingResponse

from wasmrun.blobs.objects import ObjectStoreError
from wasmrun.blobs.quota import BlobQuotaExceeded
from wasmrun.blobs.store import BlobStore, is_blob_id
from wasmrun.e2b import guestfiles
from wasmrun.e2b.calls import Front, FrontError, body_chunks, killed
from wasmrun.e2b.sandboxes import E2BSandbox

logger = logging.getLogger("wasmrun.e2b")

SPOOL_CHUNK = 1 << 20  # body bytes gathered before one write to the temporary file
READ_CHUNK = 1 << 20  # what a download reads, and sends, at a time
DOWNLOAD_CHUNK = 8 << 20  # each blob the file program stores for a download
MULTIPART_SLACK = 1 << 20  # what a multipart body may add to its files: headers, boundaries, fields
MAX_FILES = 100  # files in one multipart upload (each one a blob while it moves)
MAX_FIELDS = 100  # other fields in it
MAX_FIELD_BYTES = 64 * 1024  # each of those
SPOOL_IN_MEMORY = 64 * 1024  # a multipart file kept in memory up to this, then on disk

Received = list[tuple[str, BinaryIO]]  # each file: the name it was sent with, its bytes


def transfer_kind() -> str:
    """A blob kind for one transfer: its blobs' ids are no other blob's (ids hash the kind)."""
    return f"application/octet-stream; wasmrun-e2b-transfer={secrets.token_hex(8)}"


def upload_limit(front: Front) -> int:
    """The most one upload's files may hold: the sandbox's workspace quota."""
    return front.workspace_bytes


def too_large(limit: int) -> FrontError:
    return FrontError(507, f"the upload is over the sandbox's workspace quota ({limit} bytes): it cannot fit")


class Spool:
    """A body's bytes into a temporary file as they come (inflated when gzip), at most
    `limit` of them; its methods run in a worker thread."""

    def __init__(self, limit: int, gzip: bool) -> None:
        self.file: BinaryIO = tempfile.TemporaryFile()  # closed by `received`
        self.limit = limit
        self.size = 0
        self._inflate = zlib.decompressobj(wbits=31) if gzip else None

    def write(self, data: bytes | bytearray) -> None:
        if self._inflate is None:
            self._put(data)
            return
        try:
            while True:  # SPOOL_CHUNK inflated at a time: a gzip bomb stops at the limit
                out = self._inflate.decompress(data, SPOOL_CHUNK)
                self._put(out)
                data = self._inflate.unconsumed_tail
                if not data and len(out) < SPOOL_CHUNK:
                    return
        except zlib.error:
            raise FrontError(400, "the upload is not valid gzip (Content-Encoding: gzip)") from None

    def finish(self, data: bytes | bytearray) -> None:
        self.write(data)
        if self._inflate is not None and (not self._inflate.eof or self._inflate.unused_data):
            raise FrontError(400, "the upload's gzip stream is cut short or followed by other bytes")

    def _put(self, data: bytes | bytearray) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise too_large(self.limit)
        self.file.write(data)


async def _bounded(request: Request, limit: int, sandbox: E2BSandbox | None) -> AsyncGenerator[bytes, None]:
    """The request's body, refused (507) past `limit` bytes and what a body adds to its
    files (MULTIPART_SLACK), declared or as they come; the rest left unread once the
    sandbox is killed (E2B's 502 for a sandbox gone)."""
    async for chunk in body_chunks(request, limit + MULTIPART_SLACK, too_large(limit)):
        if sandbox is not None and sandbox.ended:
            raise killed(sandbox)
        yield chunk


async def _octet_stream(request: Request, limit: int, sandbox: E2BSandbox | None) -> BinaryIO:
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip"):
        raise FrontError(400, f"Content-Encoding {encoding[:40]!r} is not accepted: send the file as it is, or gzip")
    spool = await asyncio.to_thread(Spool, limit, encoding == "gzip")
    try:
        pending = bytearray()
        async for chunk in _bounded(request, limit, sandbox):
            pending += chunk
            if len(pending) >= SPOOL_CHUNK:
                await asyncio.to_thread(spool.write, pending)
                pending = bytearray()
        await asyncio.to_thread(spool.finish, pending)
    except BaseException:
        spool.file.close()
        raise
    return spool.file


async def _multipart(request: Request, limit: int, sandbox: E2BSandbox | None, stack: contextlib.AsyncExitStack) -> Received:
    if request.headers.get("content-encoding"):
        raise FrontError(400, "a compressed multipart upload is not accepted: send it as it is")
    parser = MultiPartParser(
        request.headers, _bounded(request, limit, sandbox),
        max_files=MAX_FILES, max_fields=MAX_FIELDS, max_part_size=MAX_FIELD_BYTES,
    )
    parser.spool_max_size = SPOOL_IN_MEMORY
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise FrontError(400, f"the multipart upload is refused: {exc.message}") from None
    stack.push_async_callback(form.close)
    files = [(item.filename or "", item) for _, item in form.multi_items() if isinstance(item, UploadFile)]
    if sum(item.size or 0 for _, item in files) > limit:
        raise too_large(limit)
    return [(name, item.file) for name, item in files]


@contextlib.asynccontextmanager
async def received(request: Request, front: Front, sandbox: E2BSandbox | None = None) -> AsyncIterator[Received]:
    """The upload's files, on disk (or in memory up to SPOOL_IN_MEMORY) for the block; the
    body's reading stops at the kill of `sandbox`, when given."""
    limit = upload_limit(front)
    async with contextlib.AsyncExitStack() as stack:
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            files = await _multipart(request, limit, sandbox, stack)
        else:
            body = await _octet_stream(request, limit, sandbox)
            stack.callback(body.close)
            files = [(request.query_params.get("path") or "", body)]
        if not files:
            raise FrontError(400, "the upload has no file")
        yield files


def _store(front: Front) -> BlobStore:
    return front.dispatcher.context.blobs


async def _stage(front: Front, sandbox: E2BSandbox, source: BinaryIO, kind: str) -> str:
    """`source` as a blob of the sandbox's tenant, in its blob quota."""
    caller = sandbox.caller
    try:
        return await asyncio.to_thread(_store(front).create_file, source, kind, None, caller.tenant, caller.blob_quota)
    except BlobQuotaExceeded as exc:
        raise FrontError(507, f"{guestfiles.FULL['BlobQuotaExceeded']}: {exc.message}") from None
    except (ObjectStoreError, OSError) as exc:
        logger.error("cannot store an upload as a blob: %s", exc)
        raise FrontError(503, "the upload could not be stored for the sandbox; try again") from None


async def _discard(front: Front, owner: str, blob_ids: Iterable[str], kind: str) -> None:
    """Deletes the transfer's blobs (those of its kind only), whatever happened before."""
    store = _store(front)

    def delete() -> None:
        for blob_id in set(blob_ids):
            try:
                info = store.info(blob_id, owner)
                if info is not None and info.kind == kind:
                    store.delete(blob_id, owner)
            except Exception as exc:  # left for the tenant's blob retention; never the request's error
                logger.error("cannot delete a transfer's blob %s: %s", blob_id, exc)

    await asyncio.shield(asyncio.to_thread(delete))


async def upload(front: Front, sandbox: E2BSandbox, files: list[tuple[str, BinaryIO]]) -> None:
    """Writes each (path under /workspace, bytes) into the sandbox's files, in one run."""
    kind = transfer_kind()
    staged: list[dict[str, str]] = []
    try:
        for rel, source in files:
            staged.append({"path": rel, "blob": await _stage(front, sandbox, source, kind)})
        where = files[0][0] if len(files) == 1 else ""  # what an error names: the file, or the home folder
        args = {"op": "upload", "path": where, "files": staged}
        result = await guestfiles.run_file_program(front, sandbox, args, sorted({item["blob"] for item in staged}))
        guestfiles.checked_output(result, where)
    finally:
        await _discard(front, sandbox.caller.tenant, [item["blob"] for item in staged], kind)


async def download(front: Front, sandbox: E2BSandbox, rel: str) -> StreamingResponse:
    """The file at `rel`, sent as it is read from the blobs the file program made of it."""
    kind = transfer_kind()
    most = front.dispatcher.context.limits.resolve().blob_io_bytes
    args = {"op": "export", "path": rel, "kind": kind, "chunk": DOWNLOAD_CHUNK, "most": most}
    result = await guestfiles.run_file_program(front, sandbox, args)
    made = [b for b in result.get("output_blobs") or [] if isinstance(b, str) and is_blob_id(b)]
    owner = sandbox.caller.tenant
    try:
        order, size = _exported(guestfiles.checked_output(result, rel), set(made), most)
        parts = await asyncio.to_thread(_open_parts, _store(front), order, owner, kind, size)
    finally:
        await _discard(front, owner, made, kind)
    return StreamingResponse(
        _send(parts), media_type="application/octet-stream", headers={"content-length": str(size)}
    )


def _exported(output: dict[str, Any], made: set[str], most: int) -> tuple[list[str], int]:
    """The blobs, in order, and the size the file program's answer names, checked: only
    blobs that run made, a size that is a count of bytes within the budget."""
    order, size = output.get("blobs"), output.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= most:
        raise guestfiles.unexpected("size", size)
    if not isinstance(order, list) or len(order) > size // DOWNLOAD_CHUNK + 1 or not all(b in made for b in order):
        raise guestfiles.unexpected("list of blobs", order)
    return order, size


def _open_parts(store: BlobStore, order: list[str], owner: str, kind: str, size: int) -> list[BinaryIO]:
    """Each blob open for reading (readable after the blob is deleted), their sizes adding
    up to `size`."""
    parts: list[BinaryIO] = []
    try:
        total = 0
        for blob_id in order:
            info = store.info(blob_id, owner)
            if info is None or info.kind != kind:
                raise guestfiles.unexpected("blob", blob_id)
            parts.append(_open_blob(store, blob_id, owner, info.size_bytes))
            total += info.size_bytes
        if total != size:
            raise guestfiles.unexpected("size", size)
        return parts
    except BaseException:
        for part in parts:
            part.close()
        raise


def _open_blob(store: BlobStore, blob_id: str, owner: str, size: int) -> BinaryIO:
    path = store.local_path(blob_id, owner)
    if path is not None:
        return open(path, "rb")  # closed by _send
    copy: BinaryIO = tempfile.TemporaryFile()
    try:
        for offset in range(0, size, READ_CHUNK):
            copy.write(store.read(blob_id, offset, READ_CHUNK, owner))
        copy.seek(0)
    except BaseException:
        copy.close()
        raise
    return copy


async def _send(parts: list[BinaryIO]) -> AsyncIterator[bytes]:
    try:
        for part in parts:
            while data := await asyncio.to_thread(part.read, READ_CHUNK):
                yield data
    finally:
        for part in parts:
            part.close()
