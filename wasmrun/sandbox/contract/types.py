"""The sandbox's request and result: what `SandboxEngine.run` takes and gives.

These know nothing of JSON-RPC; the protocol layer maps its params onto a
`RunRequest` and a `RunResult` onto the spec's run result.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import msgspec

from wasmrun.abi import RunKind
from wasmrun.blobs.quota import BlobQuota
from wasmrun.egress.policy import NetworkGrant
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.background import BackgroundRun
from wasmrun.sandbox.contract.ids import new_run_id
from wasmrun.sandbox.contract.limits import Limits
from wasmrun.sandbox.contract.packageinstalls import AddedPackages, PackageInstalls
from wasmrun.sandbox.contract.tools import ToolLimits, ToolSpec

logger = logging.getLogger("wasmrun.sandbox")


class MountedSkill(msgspec.Struct, frozen=True):
    name: str  # dotted skill name, mounted read-only at /skills/<name>/
    root: str  # the skill's folder on the host
    entrypoint: str | None = None  # e.g. "code/main.py"; None for instruction skills


class SessionRun(msgspec.Struct, frozen=True):
    """A run inside a session (see sandbox/sessions/run.py): its state is the
    folder's version `version`; a run that keeps its state leaves `version + 1`."""

    folder: str  # the session's host folder (under the server's data dir, 0700)
    version: int
    reseed: bool = False  # the session's first run, or a fork's: new random state
    # The most the new version (its pages and files) may take on disk: what the
    # tenant's `session_bytes` leaves after its other sessions. None: no cap.
    max_bytes: int | None = None
    cap_bytes: int | None = None  # that limit itself, for the error's message


class SessionOutcome(msgspec.Struct):
    """What a session run did to its session."""

    committed: bool  # False: stopped by a limit or a crash, the state is as before the run
    memory_bytes: int = 0  # the linear memory's size
    # The session's pages kept (those that differ from the snapshot's, at page grain); the name is
    # the wire's (get_session's `image_bytes`), from when they were called its memory image.
    image_bytes: int = 0
    files_bytes: int = 0  # /workspace and /tmp


class RunRequest(msgspec.Struct, kw_only=True, frozen=True):
    """One run, whole: built once by its caller (protocol/running.py for the server) and never
    changed after (a copy with a change: msgspec.structs.replace)."""

    # "compile" is the engine's own: compile the mounted skills' modules (see bytecode.py).
    kind: RunKind
    code: str | None = None  # kind == "code": the module source
    skill: str | None = None  # kind == "skill": the name of one of `skills`
    function: str = "main"  # entrypoint / export to call with the args
    args_json: bytes = b"{}"  # its argument, a JSON object as text (jsontext.encode_args)
    skills: list[MountedSkill] = []
    input_blobs: list[str] = []  # blob ids the run may read
    env: dict[str, str] = {}  # the run's whole environment (e.g. granted secrets)
    network: NetworkGrant | None = None  # None: no network at all
    limits: Limits = msgspec.field(default_factory=Limits)
    run_id: str = ""
    owner: str = "local"  # the tenant whose run this is: it reads and writes that tenant's blobs
    blob_quota: BlobQuota | None = None  # what its blob writes may use
    session: SessionRun | None = None  # run inside this session's state
    stream: bool = False  # its output is also sent on as it is written (outstream.py)
    # The package set this run mounts at /packages instead of the operator's layer (a folder with
    # site-packages/ and pycache/: wasmrun/packages/ondemand.py's, which holds the layer's packages too).
    packages: str | None = None
    # Code mode (docs/code-mode.md): the client's tools the guest may call (runtime.tools), and their limits.
    tools: list[ToolSpec] = []
    tool_limits: ToolLimits = ToolLimits()
    # The run may install packages itself (runtime.packages.install, `pip install`): the installer
    # the server names, and its data (contract/packageinstalls.py). None: it may not.
    package_installs: PackageInstalls | None = None
    # The W3C traceparent of the span that sent this run to its worker, whose own span is its
    # child ('' when tracing is off: wasmrun/tracing.py).
    traceparent: str = ""


class RunError(msgspec.Struct):
    type: str
    message: str


class Usage(msgspec.Struct):
    cpu_ms: float = 0.0  # CPU time of the run's thread while in the guest (host calls included)
    peak_memory_bytes: int = 0
    blob_io_bytes: int = 0
    instantiate_ms: float = 0.0  # from the request to the guest's first instruction
    run_ms: float = 0.0  # inside the guest
    total_ms: float = 0.0  # the whole run as the caller saw it
    prepared_ahead: bool = False  # the instance was made (and prefaulted) before the request
    http_requests: int = 0  # requests the host made for the run (redirect hops included)
    http_bytes_out: int = 0  # request bytes sent (bodies, targets, headers)
    http_bytes_in: int = 0  # response bytes received (bodies, headers)


class Figure(msgspec.Struct):
    """A figure (a picture) the run left at the top of /workspace, returned as a blob (data
    image); the spec's run result lists them as `images` (protocol/run_result.py)."""

    blob_id: str
    kind: str  # image/png or image/svg+xml
    name: str  # its file name in /workspace


class Display(msgspec.Struct):
    """A display result the guest showed (checked: sandbox/guest/displays.py)."""

    data: dict[str, Any]  # MIME type -> the form (base64 text for images)
    main: bool = False  # the value of a script's last expression
    blobs: dict[str, str] = {}  # MIME type -> blob id, for forms too large to inline


class RunResult(msgspec.Struct):
    run_id: str
    status: Literal["completed", "failed"]
    # The entrypoint's return value as JSON text, checked (jsontext.output_problem)
    # but never decoded on the way: big integers stay exact. null when failed.
    output_json: bytes = b"null"
    output_blobs: list[str] = []
    images: list[Figure] = []  # the run's figures, also in output_blobs (the wire's name)
    logs: str = ""
    logs_cut_bytes: int = 0
    error: RunError | None = None
    usage: Usage = msgspec.field(default_factory=Usage)
    session: SessionOutcome | None = None  # a session run's effect on its session
    # The guest runtime's word that the code likely misread the run contract (a
    # `mian`, a final assignment): the output is null and no error says why.
    warnings: list[str] = []
    displays: list[Display] = []  # in the order they were shown
    # The engine's own runs (import, compile, warm-up) since its last result:
    # sent with this one, for /metrics (background.py); never to the client.
    background: list[BackgroundRun] = []
    packages_added: list[AddedPackages] = []  # sets the run installed from inside, in order

    @property
    def output(self) -> Any:
        """The return value, decoded (for callers in Python; the server passes the text on)."""
        return msgspec.json.decode(self.output_json)


def host_failure(request: RunRequest, message: str) -> RunResult:
    """The result of a run that our own code failed (call it while handling the
    exception): the details go to the server log, the client gets `message`."""
    logger.exception("sandbox host failure in run %s", request.run_id or "(no id)")
    return RunResult(
        run_id=request.run_id or new_run_id(), status="failed", error=RunError(errors.INTERNAL, message)
    )
