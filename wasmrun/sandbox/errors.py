"""How a run can end badly: the `error.type` values a result may carry.

Besides these, a run that raised in the guest carries the exception's own
type name (`ValueError`, `SyntaxError`, ...) and its guest traceback.
"""

TIMEOUT = "Timeout"  # wall-clock limit (timeout_ms)
CPU_LIMIT = "CPULimitExceeded"  # fuel spent
MEMORY_LIMIT = "MemoryLimitExceeded"  # linear memory cap
STACK_OVERFLOW = "StackOverflow"
WORKSPACE_QUOTA = "WorkspaceQuotaExceeded"  # /workspace bytes or files
BLOB_BUDGET = "BlobBudgetExceeded"  # bytes through blob host calls
BLOB_QUOTA = "BlobQuotaExceeded"  # the tenant's stored blob bytes or count, or blobs per run
ENTRYPOINT_NOT_FOUND = "EntrypointNotFound"
INVALID_OUTPUT = "InvalidOutput"  # return value not JSON, or too large
SYSTEM_EXIT = "SystemExit"
HOST_CALL_ERROR = "InvalidHostCall"  # the guest passed a bad pointer/length
GUEST_CRASH = "GuestCrashed"  # the interpreter trapped for another reason
WORKER_CRASHED = "WorkerCrashed"  # the process running the sandbox died
INTERNAL = "SandboxError"  # a fault on the host side; details only in the server log


class RunAborted(Exception):
    """Raised inside a host call to stop the guest with a given error type."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


def result_too_large(limit: int) -> str:
    return f"the return value is larger than {limit} bytes as JSON; write large data to blobs"


def timed_out(timeout_ms: int) -> str:
    return f"the run exceeded its time limit of {timeout_ms} ms"


def memory_hint(limit_bytes: int, ceiling_bytes: int) -> str:
    """The line added to a MemoryLimitExceeded error: the limit and how to ask for more."""
    limit_mb, ceiling_mb = limit_bytes >> 20, ceiling_bytes >> 20
    if limit_mb >= ceiling_mb:
        return (f"hint: the run had {limit_mb} MiB of memory, the server's maximum;"
                " process the data in smaller pieces (stream files, write partial results to blobs)")
    return (f"hint: the run had {limit_mb} MiB of memory; ask for more with"
            " limits.memory_mb (within your ceiling) or process the data in smaller pieces")
