"""API keys: made here, shown once, stored only as a hash, compared in constant time.

A key is 256 random bits, so a plain SHA-256 of it cannot be reversed or
guessed: a slow password hash would add latency to every call and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "wrk_"
BEARER = "bearer "


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The key in an `Authorization: Bearer <key>` header, if any."""
    if authorization is None or authorization[: len(BEARER)].lower() != BEARER:
        return None
    token = authorization[len(BEARER):].strip()
    return token or None


def same_hash(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("ascii"), b.encode("ascii"))
