"""Params and results of every method, as in the spec; `null` in params means "omitted".

Extensions beyond the spec's shapes are marked; they only add fields.
Fields set to UNSET are left out of the JSON.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from wasmrun.limits import REQUESTABLE


class Params(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


PositiveInt = Annotated[int, Meta(ge=1)]
Encoding = Literal["utf-8", "base64"]
# Bounds on what a client sends, checked as params are decoded (-32602 naming the
# field): far above anything valid, low enough that no later step meets a huge value.
SkillName = Annotated[str, Meta(max_length=256)]  # also versions and namespaces
BlobRef = Annotated[str, Meta(max_length=128)]
Identifier = Annotated[str, Meta(max_length=256)]
# How deep a request's JSON may nest, one number for every way in: the body (/rpc, the
# envelope included) and, 3 levels fewer (a batch's array, the call, its params), `args`
# (the args object itself is one level), over /rpc, in a batch and over /mcp alike.
BODY_MAX_DEPTH = 64
MAX_ARGS_DEPTH = BODY_MAX_DEPTH - 3
MAX_INPUT_BLOBS = 1000
MAX_MOUNTED_SKILLS = 100
MAX_NEW_FILES = 1000
SessionId = Annotated[str, Meta(max_length=128)]
# Packages to install on demand (docs/packages.md): PEP 508 names/specifiers from the index.
MAX_PACKAGES = 64
Packages = Annotated[list[Annotated[str, Meta(max_length=200)]], Meta(max_length=MAX_PACKAGES)]

# Code mode (docs/code-mode.md): the client's tools a run may call, and their answers.
MAX_TOOLS = 64
MAX_TOOL_ERROR_CHARS = 64 * 1024
ToolName = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
CallId = Annotated[str, Meta(max_length=128)]


class ToolDefinition(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One of the client's tools: `runtime.tools.<name>(**arguments)` in the run."""

    name: ToolName
    description: Annotated[str, Meta(max_length=8192)] = ""
    parameters: dict[str, Any] = {}  # the JSON Schema of its arguments (an object's); {}: any


Tools = Annotated[list[ToolDefinition], Meta(max_length=MAX_TOOLS)]
ToolWaitMs = Annotated[int, Meta(ge=100, le=3_600_000)]


class PendingToolCall(msgspec.Struct):
    """A call the run waits on: answer it with submit_tool_results (run_id, call_id)."""

    run_id: str
    call_id: str
    name: str
    arguments: msgspec.Raw  # the guest's JSON, checked against the tool's schema, passed on exactly


class ToolResult(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The client's answer to one call: `result` (any JSON), or `error` (raised in the run as ToolError)."""

    call_id: CallId
    result: Any = UNSET
    error: Annotated[str, Meta(max_length=MAX_TOOL_ERROR_CHARS)] | UnsetType = UNSET


class SubmitToolResultsParams(Params):
    run_id: Annotated[str, Meta(max_length=128)]
    results: Annotated[list[ToolResult], Meta(max_length=1000)]
    # the run's output from here on, and its next tool calls, as events (docs/code-mode.md)
    stream: bool = False


# -- skills -------------------------------------------------------------------


class ListSkillsParams(Params):
    namespace: SkillName | None = None
    detail: Literal["names", "summary"] = "names"
    limit: PositiveInt = 50
    cursor: Annotated[str, Meta(max_length=2048)] | None = None


class SkillEntry(msgspec.Struct):
    name: str
    version: str
    description: str
    namespace: str
    kind: str
    # detail = "summary" adds these:
    tags: list[str] | UnsetType = UNSET
    title: str | UnsetType = UNSET  # SKILL.md frontmatter `name`
    short_description: str | UnsetType = UNSET  # SKILL.md frontmatter `short_description`


class ListSkillsResult(msgspec.Struct):
    skills: list[SkillEntry]
    next_cursor: str | None


class DescribeSkillParams(Params):
    name: SkillName
    version: SkillName | None = None
    detail: Literal["manifest", "summary", "full"] = "summary"


class SkillDescription(msgspec.Struct):
    manifest: dict[str, Any]
    skill_md_frontmatter: dict[str, Any] | UnsetType = UNSET
    # detail = "full" adds the whole SKILL.md and the skill's file list (extension).
    skill_md: str | UnsetType = UNSET
    files: list[str] | UnsetType = UNSET


class DescribeSkillResult(msgspec.Struct):
    skill: SkillDescription


class ReadSkillFileParams(Params):
    name: SkillName
    path: str  # checked by the registry (check_relative_path)
    version: SkillName | None = None


class ReadSkillFileResult(msgspec.Struct):
    content: str
    encoding: Encoding  # extension: "base64" when the file is not UTF-8 text
    size_bytes: int  # extension


class LoadGuideParams(Params):
    pass


class LoadGuideResult(msgspec.Struct):
    content: str  # SKILL.md of skills.protocol.guide, without its frontmatter
    name: str  # extension
    version: str  # extension


class SkillFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    path: str
    content: str
    encoding: Encoding = "utf-8"


class CreateSkillParams(Params):
    manifest: dict[str, Any]
    skill_md: str
    files: Annotated[list[SkillFile], Meta(max_length=MAX_NEW_FILES)] = []


class CreateSkillResult(msgspec.Struct):
    name: str
    version: str
    # extension: the set its declared packages were installed into (docs/packages.md)
    packages_installed: PackagesInstalled | UnsetType = UNSET


# -- runs ---------------------------------------------------------------------


InputBlobs = Annotated[list[BlobRef], Meta(max_length=MAX_INPUT_BLOBS)]


class RunLimits(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """What a run may use; each member up to the server's ceiling (protocol/running.py), as
    declared in wasmrun/limits.py."""

    timeout_ms: PositiveInt | None = None
    # Extensions:
    memory_mb: PositiveInt | None = None
    cpu_ms: PositiveInt | None = None
    workspace_mb: PositiveInt | None = None
    output_bytes: PositiveInt | None = None


if {f.name for f in msgspec.structs.fields(RunLimits)} != {limit.name for limit in REQUESTABLE}:
    raise ImportError("RunLimits and the requestable limits declared in wasmrun/limits.py differ")


class ExecuteSkillParams(Params):
    name: SkillName
    version: SkillName | None = None
    args: dict[str, Any] = {}
    input_blobs: InputBlobs = []
    timeout_ms: PositiveInt | None = None  # the spec's place; `limits.timeout_ms` works too
    limits: RunLimits = RunLimits()  # extension: the same shape as run_code's
    stream: bool = False  # extension: the output as it is written (docs/streaming.md)


class RunCodeParams(Params):
    language: Literal["python"]
    code: str
    entrypoint: Identifier = "main"
    args: dict[str, Any] = {}
    mount_skills: Annotated[list[SkillName], Meta(max_length=MAX_MOUNTED_SKILLS)] = []
    input_blobs: InputBlobs = []
    limits: RunLimits = RunLimits()
    session_id: SessionId | None = None  # extension: run inside this session (create_session)
    stream: bool = False  # extension: the output as it is written (docs/streaming.md)
    packages: Packages = []  # extension: installed on demand for this fresh run (docs/packages.md)
    tools: Tools = []  # extension: the client's tools the code may call (docs/code-mode.md)
    tool_wait_ms: ToolWaitMs | None = None  # extension: how long the run waits for one batch's answers


class RunError(msgspec.Struct):
    type: str
    message: str


class InstalledPackage(msgspec.Struct):
    name: str
    version: str
    bytes: int  # its wheel's size
    requested: bool  # asked for (else a dependency, or the operator's layer's)


class PackagesInstalled(msgspec.Struct, kw_only=True):
    """What an on-demand install gave (extension, docs/packages.md): the set mounted at
    /packages, every package in it, and what it cost."""

    set: str  # the set's id (the hash of its name==version list and the guest's Python)
    packages: list[InstalledPackage]
    bytes: int  # its wheels
    cached: bool  # built before on this server: nothing was downloaded
    seconds: float
    in_image: list[str] = []  # asked for and built into the image (its version is used)


class RunUsage(msgspec.Struct):
    """An extension; every member has a default so that a client decodes the usage of
    a server that reports other members (another implementation, an older wasmrun
    with `fuel_used`) instead of failing on the whole result."""

    cpu_ms: float = 0.0  # CPU time of the run's thread (wasm and host calls; sleeping is not counted)
    peak_memory_bytes: int = 0
    blob_io_bytes: int = 0
    instantiate_ms: float = 0.0
    run_ms: float = 0.0
    total_ms: float = 0.0  # in the sandbox process; HTTP and queueing come on top
    prepared_ahead: bool = False  # the instance was made and prefaulted before the request came
    http_requests: int = 0  # requests the host made for the run (each redirect hop counts)
    http_bytes_out: int = 0
    http_bytes_in: int = 0


class RunImage(msgspec.Struct):
    """extension: a picture the run saved (PNG/SVG at the top of /workspace), as a blob."""

    blob_id: str
    kind: str  # image/png or image/svg+xml
    name: str  # its file name in /workspace


class Display(msgspec.Struct, kw_only=True):
    """extension: one display result, as a notebook shows a cell's outputs
    (Jupyter's display_data / execute_result, E2B's Result): `display(obj)`, a
    script's last expression (`main`), `plt.show()`. docs/run-contract.md."""

    # MIME type -> the form: text/plain, text/html, text/markdown, text/latex,
    # image/svg+xml (text); image/png, image/jpeg (base64 text); application/json (any JSON)
    data: dict[str, Any]
    main: bool = False  # the value of the run's last expression (execute_result, is_main_result)
    # MIME type -> blob id of a form too large to inline (absent from `data` then)
    blobs: dict[str, str] = {}


class ExecutionResult(msgspec.Struct, kw_only=True):
    # extension: "requires_action" while the run waits for its `tool_calls` (docs/code-mode.md)
    status: Literal["completed", "failed", "requires_action"]
    run_id: str
    summary: str
    output: Any | UnsetType = UNSET  # absent when the run failed
    output_blobs: list[str]
    # extension: the output blobs that are pictures (also in output_blobs); absent when none
    images: list[RunImage] | UnsetType = UNSET
    logs_preview: str
    # extension: when logs_preview was cut, the whole captured output (up to
    # the run's output cap) as a text blob
    logs_blob: str | UnsetType = UNSET
    error: RunError | UnsetType = UNSET  # present only when the run failed
    usage: RunUsage | UnsetType = UNSET  # extension: what the run cost
    # extension, for a run in a session: True when a limit or a crash stopped the run
    # midway and the session is as it was before it (memory and files)
    session_rolled_back: bool | UnsetType = UNSET
    # extension: the code likely misread the run contract (a `def mian`, a last
    # line that assigns), the output held NaN (written as null) or values with no
    # JSON form (written as text), displays were dropped: each says what and where
    warnings: list[str] | UnsetType = UNSET
    # extension: the run's display results, in the order shown; absent when none
    displays: list[Display] | UnsetType = UNSET
    # extension: the packages installed for this run (`packages`); absent when none were asked
    packages: PackagesInstalled | UnsetType = UNSET
    # extension, with status "requires_action": the calls to answer with submit_tool_results
    tool_calls: list[PendingToolCall] | UnsetType = UNSET


# -- commands (extension: run_command, docs/commands.md) ----------------------

# Far above any command line an agent writes; low enough that no later step meets a huge one.
MAX_COMMAND_BYTES = 1024 * 1024
MAX_ARGV = 10_000
MAX_ENV = 1_000
MAX_PATH_CHARS = 4096
CommandText = Annotated[str, Meta(min_length=1, max_length=MAX_COMMAND_BYTES)]
Argv = Annotated[list[Annotated[str, Meta(max_length=MAX_COMMAND_BYTES)]], Meta(min_length=1, max_length=MAX_ARGV)]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)]


class RunCommandParams(Params):
    """A command line in bash syntax (a string) or an argv list (each item one word), run by
    the guest's shell over the run's files: in a fresh sandbox, or in `session_id`'s."""

    command: CommandText | Argv
    cwd: Annotated[str, Meta(min_length=1, max_length=MAX_PATH_CHARS)] | None = None
    env: Annotated[dict[EnvName, Annotated[str, Meta(max_length=MAX_COMMAND_BYTES)]], Meta(max_length=MAX_ENV)] = {}
    stdin: str | None = None
    mount_skills: Annotated[list[SkillName], Meta(max_length=MAX_MOUNTED_SKILLS)] = []  # as run_code's
    input_blobs: InputBlobs = []  # at /blobs/<id>, as run_code's
    limits: RunLimits = RunLimits()
    session_id: SessionId | None = None
    stream: bool = False  # the output as it is written (docs/streaming.md)
    packages: Packages = []  # installed on demand for a fresh run, as run_code's
    tools: Tools = []  # the client's tools the command's Python may call, as run_code's
    tool_wait_ms: ToolWaitMs | None = None


class CommandResult(ExecutionResult, kw_only=True):
    """run_code's result, plus what a process would have given: its exit code (absent when a
    limit stopped the run: see error), and what it wrote to each stream (up to the run's
    output_bytes; `output_truncated` when the cap cut them)."""

    exit_code: int | UnsetType = UNSET
    stdout: str = ""
    stderr: str = ""
    output_truncated: bool = False


# -- blobs --------------------------------------------------------------------


class CreateBlobParams(Params):
    content: str
    kind: str
    encoding: Encoding = "utf-8"  # extension: "base64" for binary content


class CreateBlobResult(msgspec.Struct):
    blob_id: str
    size_bytes: int


class ReadBlobParams(Params):
    blob_id: BlobRef
    mode: Literal["sample_head", "sample_tail", "full"] = "sample_head"
    max_bytes: Annotated[int, Meta(ge=0)] = 2000


class ReadBlobResult(msgspec.Struct):
    content: str
    truncated: bool
    kind: str
    encoding: Encoding  # extension: "base64" for binary blobs
    size_bytes: int  # extension: the whole blob's size


class DeleteBlobParams(Params):  # extension method
    blob_id: str


class DeleteBlobResult(msgspec.Struct):
    deleted: bool


# -- sessions (extension methods; see docs/sessions.md) -------------------------


class CreateSessionParams(Params):
    language: Literal["python"]
    limits: RunLimits = RunLimits()  # every run's limits (timeout_ms, cpu_ms may be changed per run)
    idle_timeout_s: PositiveInt | None = None  # the session ends after this long unused
    skills: Annotated[list[SkillName], Meta(max_length=MAX_MOUNTED_SKILLS)] = []  # mounted in every run
    packages: Packages = []  # installed on demand, mounted in every run, kept by forks (docs/packages.md)


class SessionInfo(msgspec.Struct, kw_only=True):
    session_id: str
    language: str
    created_at: str  # ISO 8601, UTC
    last_used_at: str
    expires_at: str  # idle timeout or maximum age, whichever comes first
    idle_timeout_s: int
    skills: list[str]
    runs: int  # runs that kept their state
    memory_bytes: int  # linear memory's size
    image_bytes: int  # its pages kept on disk (those written since the snapshot)
    files_bytes: int  # /workspace and /tmp
    busy: bool  # a run is in progress
    packages: list[str] = []  # the name==version set its runs mount (create_session's `packages`)
    # create_session only: what installing `packages` gave
    packages_installed: PackagesInstalled | UnsetType = UNSET


class SessionRef(Params):
    session_id: SessionId


class ForkSessionResult(msgspec.Struct):
    session_id: str
    forked_from: str


class CloseSessionResult(msgspec.Struct):
    closed: bool


class InterruptSessionResult(msgspec.Struct):
    """Whether a run of the session was in flight on this server and was asked to stop
    (its own call then answers a failed run, error type `Interrupted`), and its id."""

    interrupted: bool
    run_id: str | UnsetType = UNSET


class ListSessionsParams(Params):
    pass


class ListSessionsResult(msgspec.Struct):
    sessions: list[SessionInfo]
