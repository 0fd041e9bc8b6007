"""How a run can end badly: the `error.type` values a result may carry.

Besides these, a run that raised in the guest carries the exception's own
type name (`ValueError`, `SyntaxError`, `MemoryError`, ...) and its guest
traceback.

Who decides a type: the types in HOST_TYPES come only from the host's own
evidence (a trap code, a limit the host enforced, a host call it refused),
never from anything the guest says or prints. Everything in the guest's
reply is the guest's word, so a guest exception whose class name is one of
HOST_TYPES is reported as `Guest<name>` (a guest `Timeout` is
`GuestTimeout`; so is one that differs from a host type only in case,
width, spacing or punctuation, like `TIME_OUT`): a client can always tell
the two apart. The prefix is never doubled: `GuestCrashed`, the one host type
that has it already, claimed by the guest (its runtime says so when it fails
itself, python_wasm/runtime/_boot.py) is `GuestReportedCrash`. `guest_type`
alone names them, and what it gives it gives back unchanged.
`EntrypointNotFound`, `InvalidOutput` (not JSON) and `SystemExit` are
reported by our guest runtime about the guest's own code.
"""

import unicodedata

from wasmrun import abi
from wasmrun.sandbox.contract.tools import TOOL_CALL_LIMIT, TOOL_WAIT_TIMEOUT

# The ones the guest's runtime reports too: named by the contract (wasmrun/abi.py).
ENTRYPOINT_NOT_FOUND = abi.ENTRYPOINT_NOT_FOUND
GUEST_CRASH = abi.GUEST_CRASH
INVALID_OUTPUT = abi.INVALID_OUTPUT
SYSTEM_EXIT = abi.SYSTEM_EXIT

TIMEOUT = "Timeout"  # wall-clock limit (timeout_ms)
CPU_LIMIT = "CPULimitExceeded"  # the run thread's CPU time (cpu_ms)
MEMORY_LIMIT = "MemoryLimitExceeded"  # linear memory cap
STACK_OVERFLOW = "StackOverflow"
WORKSPACE_QUOTA = "WorkspaceQuotaExceeded"  # /workspace bytes or files
SESSION_BYTES = "SessionBytesExceeded"  # a session's new state over the tenant's session_bytes
BLOB_BUDGET = "BlobBudgetExceeded"  # bytes through blob host calls
BLOB_QUOTA = "BlobQuotaExceeded"  # the tenant's stored blob bytes or count, or blobs per run
HOST_CALL_ERROR = "InvalidHostCall"  # the guest passed a bad pointer/length
WORKER_CRASHED = "WorkerCrashed"  # the process running the sandbox died
INTERNAL = "SandboxError"  # a fault on the host side; details only in the server log
# A data-stack import failed on the stdlib image while the data image is being made (warmup.py).
DATA_IMAGE_WARMING_UP = "DataImageWarmingUp"
# A mounted skill past the bounds a run mounts a skill within (files/skillstamp.py): refused, never run.
SKILL_TOO_LARGE = "SkillTooLarge"
# Stopped before it ended because its caller asked (interrupt_session, an E2B sandbox's kill).
INTERRUPTED = "Interrupted"


HOST_TYPES = frozenset({
    TIMEOUT, CPU_LIMIT, MEMORY_LIMIT, STACK_OVERFLOW, WORKSPACE_QUOTA, SESSION_BYTES, BLOB_BUDGET, BLOB_QUOTA,
    HOST_CALL_ERROR, GUEST_CRASH, WORKER_CRASHED, INTERNAL, DATA_IMAGE_WARMING_UP, SKILL_TOO_LARGE, INTERRUPTED,
    # code mode's run failures (contract/tools.py): a limit, so a session's run rolls back
    TOOL_WAIT_TIMEOUT, TOOL_CALL_LIMIT,
})
GUEST_PREFIX = "Guest"
MAX_GUEST_TYPE = 200
# The guest's claim of a host type that begins with GUEST_PREFIX already: one name, not Guest + it.
GUEST_CLAIMS = {GUEST_CRASH: "GuestReportedCrash"}
if {t for t in HOST_TYPES if t.startswith(GUEST_PREFIX)} != GUEST_CLAIMS.keys():
    raise ImportError("every host type named Guest... needs its name in GUEST_CLAIMS")


def _folded(name: str) -> str:
    """A name without case, width, spacing or punctuation: `time_out ` is `timeout`."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", name).casefold() if ch.isalnum())


_HOST_TYPES_FOLDED = {_folded(name): name for name in HOST_TYPES}


def guest_type(name: str) -> str:
    """How a type the guest reported is shown: never as (or like) one of the host's,
    GUEST_PREFIX at most once, at most MAX_GUEST_TYPE characters. Idempotent: a
    name it gives is given back as it is."""
    name = name[:MAX_GUEST_TYPE]
    host = _HOST_TYPES_FOLDED.get(_folded(name))
    if host is None:
        return name
    return GUEST_CLAIMS.get(host) or (GUEST_PREFIX + name)[:MAX_GUEST_TYPE]


class RunAborted(Exception):
    """Raised inside a host call to stop the guest with a given error type."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


def result_too_large(limit: int) -> str:
    return f"the return value is larger than {limit} bytes as JSON; write large data to blobs"


def secret_in_large_output(limit: int) -> str:
    return (
        f"the return value holds a secret and is larger than {limit} bytes as JSON, too large to redact;"
        " write large data to blobs"
    )


def timed_out(timeout_ms: int) -> str:
    return f"the run exceeded its time limit of {timeout_ms} ms"


def interrupted() -> str:
    return "the run was interrupted before it ended: its caller asked (interrupt_session)"


def cpu_limit(cpu_ms: int) -> str:
    return f"the run exceeded its CPU limit of {cpu_ms} ms"


def memory_hint(limit_bytes: int, ceiling_bytes: int) -> str:
    """The line added to a MemoryLimitExceeded (or guest MemoryError) error: the limit and
    how to ask for more."""
    limit = f"this run's memory limit is {limit_bytes} bytes ({limit_bytes >> 20} MiB)"
    if limit_bytes >= ceiling_bytes:
        return (f"hint: {limit}, the server's maximum;"
                " process the data in smaller pieces (stream files, write partial results to blobs)")
    return (f"hint: {limit}; ask for more with limits.memory_mb (within your ceiling)"
            " or process the data in smaller pieces")


def session_bytes_exceeded(new_bytes: int, room: int, cap: int) -> str:
    return (
        f"session_bytes: this session's new state ({new_bytes} bytes of its pages and files) is over"
        f" the {room} bytes your other sessions leave of your session_bytes limit of {cap};"
        " the run's changes were rolled back (close sessions you no longer need)"
    )
