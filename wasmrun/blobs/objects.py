"""Blob bytes in an S3-compatible object store (`--blob-store s3://BUCKET?endpoint=URL&region=R`),
through boto3. Credentials come from the standard AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY variables (or boto3's other usual places).

Ranged reads are one GET each. Some S3-compatible servers (rclone 1.75's
`serve s3`) answer a ranged GET with 200 and a Content-Range instead of 206;
boto3 takes that when response checksums are validated only when required,
and the length is checked here either way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import parse_qs, urlsplit

BUCKET_NAME_MAX = 63


class ObjectStoreError(Exception):
    """The object store cannot be reached or refused a request; names no secret."""


@dataclass(frozen=True)
class ObjectStoreLocation:
    bucket: str
    endpoint: str | None
    region: str | None
    prefix: str

    @classmethod
    def parse(cls, url: str) -> ObjectStoreLocation:
        parts = urlsplit(url)
        if parts.scheme != "s3":
            raise ValueError(f"--blob-store must be s3://BUCKET?endpoint=URL&region=R (got {parts.scheme or 'no'} scheme)")
        bucket = parts.hostname or ""
        if not (3 <= len(bucket) <= BUCKET_NAME_MAX) or not all(c.isalnum() or c in ".-" for c in bucket):
            raise ValueError("--blob-store: the bucket name must be 3-63 letters, digits, '.' or '-'")
        if parts.username or parts.password:
            raise ValueError("--blob-store takes no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        query = parse_qs(parts.query)
        unknown = set(query) - {"endpoint", "region"}
        if unknown:
            raise ValueError(f"--blob-store: unknown option {sorted(unknown)[0]!r} (endpoint and region are known)")
        endpoint = query.get("endpoint", [None])[-1]
        if endpoint is not None and urlsplit(endpoint).scheme not in ("http", "https"):
            raise ValueError("--blob-store: endpoint must be an http:// or https:// URL")
        return cls(bucket, endpoint, query.get("region", [None])[-1], parts.path.strip("/"))


class ObjectStore:
    def __init__(self, location: ObjectStoreLocation) -> None:
        import boto3
        from botocore.config import Config

        self.location = location
        # A session of its own: its credentials are read from the environment now, not
        # the ones boto3's default session cached for the first client of the process.
        self._client: Any = boto3.session.Session().client(
            "s3",
            endpoint_url=location.endpoint,
            region_name=location.region or "us-east-1",
            config=Config(
                response_checksum_validation="when_required",
                request_checksum_calculation="when_required",
                retries={"max_attempts": 4, "mode": "standard"},
                s3={"addressing_style": "path"},
                connect_timeout=10,
                read_timeout=60,
            ),
        )

    def _key(self, name: str) -> str:
        return f"{self.location.prefix}/{name}" if self.location.prefix else name

    def _fail(self, what: str, exc: Exception) -> ObjectStoreError:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code") if hasattr(exc, "response") else None
        return ObjectStoreError(f"the object store refused to {what}: {code or type(exc).__name__}")

    def put(self, name: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.put_object(Bucket=self.location.bucket, Key=self._key(name), Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("store a blob", exc) from None

    def put_stream(self, name: str, body: BinaryIO, size: int) -> None:
        """The `size` bytes of the seekable file `body` (from its start) as object `name`,
        read in blocks as they are sent (never held whole in memory)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.put_object(Bucket=self.location.bucket, Key=self._key(name), Body=body, ContentLength=size)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("store a blob", exc) from None

    def put_file(self, name: str, path: Path) -> None:
        """The file at `path` as object `name`, streamed (never held whole in memory)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            with path.open("rb") as body:
                self._client.put_object(Bucket=self.location.bucket, Key=self._key(name), Body=body)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("store an object", exc) from None

    def get_file(self, name: str, path: Path) -> None:
        """Object `name` into a new file at `path`, streamed; KeyError when there is none."""
        with self._reading(name):
            body = self._client.get_object(Bucket=self.location.bucket, Key=self._key(name))["Body"]
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as target:
                shutil.copyfileobj(body, target, 1 << 20)

    @contextlib.contextmanager
    def _reading(self, name: str) -> Iterator[None]:
        """A whole-object read's errors: KeyError for a missing object, else ObjectStoreError."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise KeyError(name) from None
            raise self._fail("read an object", exc) from None
        except BotoCoreError as exc:
            raise self._fail("read an object", exc) from None

    def read(self, name: str, offset: int, length: int) -> bytes:
        """`length` bytes from `offset` (fewer at the end); KeyError when there is no such object."""
        from botocore.exceptions import BotoCoreError, ClientError

        if length <= 0:
            return b""
        try:
            answer = self._client.get_object(
                Bucket=self.location.bucket, Key=self._key(name), Range=f"bytes={offset}-{offset + length - 1}"
            )
            data: bytes = answer["Body"].read()
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                raise KeyError(name) from None
            if code == "InvalidRange":
                return b""
            raise self._fail("read a blob", exc) from None
        except BotoCoreError as exc:
            raise self._fail("read a blob", exc) from None
        if answer.get("ContentRange") is None and len(data) > length:
            # A server that ignored the range altogether: keep the part asked for.
            data = data[offset:offset + length]
        return data[:length]

    def get(self, name: str) -> bytes:
        """The whole object; KeyError when there is none."""
        with self._reading(name):
            data: bytes = self._client.get_object(Bucket=self.location.bucket, Key=self._key(name))["Body"].read()
        return data

    def listing(self, prefix: str) -> Iterator[tuple[str, datetime]]:
        """Each object whose name starts with `prefix`: its name (as `put` was given it)
        and when it was last written; a page of names at a time."""
        from botocore.exceptions import BotoCoreError, ClientError

        strip = len(self._key(""))
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=self._key(prefix)
            )
            for page in pages:
                for item in page.get("Contents", []):
                    yield str(item["Key"])[strip:], item["LastModified"]
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("list objects", exc) from None

    def delete(self, name: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.delete_object(Bucket=self.location.bucket, Key=self._key(name))
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("delete a blob", exc) from None
