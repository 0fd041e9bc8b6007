"""What the methods work with: one `Context` per server, built in wasmrun/server.py,
copied per call with the authenticated `caller` and the call's `resolved` list (see Dispatcher)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from wasmrun.blobs.store import BlobStore
from wasmrun.egress.policy import EgressPolicy
from wasmrun.packages.ondemand import OnDemand
from wasmrun.protocol.inflight import SessionRuns
from wasmrun.registry.interface import SkillRegistry
from wasmrun.registry.skill import Skill
from wasmrun.sandbox import Executor, LimitPolicy
from wasmrun.served import ServedImage
from wasmrun.sessionstore.store import SessionStore
from wasmrun.tenants.caller import LOCAL, Caller
from wasmrun.tenants.calls import CallGate
from wasmrun.tenants.policy import AccessPolicy
from wasmrun.tenants.quotas import RunGate


@dataclass(frozen=True)
class Context:
    registry: SkillRegistry
    blobs: BlobStore
    executor: Executor
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    access: AccessPolicy = field(default_factory=AccessPolicy)  # which skills the operator grants which secrets
    limits: LimitPolicy = field(default_factory=LimitPolicy)
    egress: EgressPolicy = field(default_factory=EgressPolicy)  # network grants, secret modes
    max_full_read_bytes: int = 10 * 1024 * 1024
    caller: Caller = LOCAL
    gate: RunGate = field(default_factory=RunGate)  # each tenant's share of the sandboxes
    calls: CallGate = field(default_factory=CallGate)  # each tenant's share of the other methods' capacity
    sessions: SessionStore | None = None  # None: no sessions on this server
    session_runs: SessionRuns = field(default_factory=SessionRuns)  # what each session runs now, here
    served: ServedImage = field(default_factory=ServedImage)  # the image new runs get (its texts follow it)
    packages: OnDemand | None = None  # installs on demand (wasmrun/packages/ondemand.py); None: none
    # The skills this call's handler found (find_skill appends each), for the call's record:
    # a list of its own per observed call (the Dispatcher's), None when nobody records.
    resolved: list[Skill] | None = None
