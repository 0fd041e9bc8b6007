"""The sandbox's request and result: what `SandboxEngine.run` takes and gives.

These know nothing of JSON-RPC; the protocol layer maps its params onto a
`RunRequest` and a `RunResult` onto the spec's run result.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from wasmrun.blobs.quota import BlobQuota
from wasmrun.egress.policy import NetworkGrant
from wasmrun.sandbox.limits import Limits


class MountedSkill(msgspec.Struct, frozen=True):
    name: str  # dotted skill name, mounted read-only at /skills/<name>/
    root: str  # the skill's folder on the host
    entrypoint: str | None = None  # e.g. "code/main.py"; None for instruction skills


class RunRequest(msgspec.Struct, kw_only=True):
    # "compile" is the engine's own: compile the mounted skills' modules (see bytecode.py).
    kind: Literal["code", "skill", "compile"]
    code: str | None = None  # kind == "code": the module source
    skill: str | None = None  # kind == "skill": the name of one of `skills`
    function: str = "main"  # entrypoint / export to call with `args`
    args: dict[str, Any] = {}
    skills: list[MountedSkill] = []
    input_blobs: list[str] = []  # blob ids the run may read
    env: dict[str, str] = {}  # the run's whole environment (e.g. granted secrets)
    network: NetworkGrant | None = None  # None: no network at all
    limits: Limits = msgspec.field(default_factory=Limits)
    run_id: str = ""
    owner: str = "local"  # the tenant whose run this is: it reads and writes that tenant's blobs
    blob_quota: BlobQuota | None = None  # what its blob writes may use


class RunError(msgspec.Struct):
    type: str
    message: str


class Usage(msgspec.Struct):
    fuel_used: int = 0
    peak_memory_bytes: int = 0
    blob_io_bytes: int = 0
    instantiate_ms: float = 0.0  # from the request to the guest's first instruction
    run_ms: float = 0.0  # inside the guest
    total_ms: float = 0.0  # the whole run as the caller saw it
    prepared_ahead: bool = False  # the instance was made (and prefaulted) before the request
    http_requests: int = 0  # requests the host made for the run (redirect hops included)
    http_bytes_out: int = 0  # request bytes sent (bodies, targets, headers)
    http_bytes_in: int = 0  # response bytes received (bodies, headers)


class RunResult(msgspec.Struct):
    run_id: str
    status: Literal["completed", "failed"]
    output: Any = None  # the entrypoint's return value (decoded JSON)
    output_json: str | None = None  # the same, as the guest serialised it
    output_blobs: list[str] = []
    logs: str = ""
    logs_cut_bytes: int = 0
    error: RunError | None = None
    usage: Usage = msgspec.field(default_factory=Usage)
