"""The typed identity the wire layer hands the protocol layer with every call."""

from __future__ import annotations

from dataclasses import dataclass

# The one tenant of a server with no tenants configured (loopback, or --insecure).
LOCAL_TENANT = "local"


@dataclass(frozen=True)
class Caller:
    tenant: str  # owner of the blobs and created skills this call makes


LOCAL = Caller(LOCAL_TENANT)
