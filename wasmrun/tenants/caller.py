"""The typed identity the wire layer hands the protocol layer with every call."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from wasmrun.blobs.quota import BlobQuota
from wasmrun.tenants.limits import TenantLimits

# The one tenant of a server with no tenants configured (loopback, or --insecure).
LOCAL_TENANT = "local"
UNBOUNDED = 2**31


@dataclass(frozen=True)
class Caller:
    tenant: str  # owner of the blobs and created skills this call makes
    limits: TenantLimits = field(default_factory=TenantLimits)

    @property
    def blob_quota(self) -> BlobQuota:
        return BlobQuota(self.limits.blob_bytes, self.limits.blob_count, self.limits.blobs_per_run)


def local_caller(defaults: TenantLimits | None = None) -> Caller:
    """The implicit tenant: alone on its server, so no share of the sandboxes to keep
    for anyone else (today's behaviour); storage stays bounded."""
    return Caller(
        LOCAL_TENANT,
        dataclasses.replace(
            defaults or TenantLimits(), concurrent_runs=UNBOUNDED, queued_runs=UNBOUNDED, runs_per_minute=UNBOUNDED,
            concurrent_calls=UNBOUNDED, queued_calls=UNBOUNDED, concurrent_requests=UNBOUNDED,
        ),
    )


LOCAL = local_caller()
