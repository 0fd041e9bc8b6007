"""Everything a call can fail with at the protocol level, each with its JSON-RPC code.

    RPCError
    ├── ParseError            -32700  the body is not JSON
    ├── InvalidRequest        -32600  not a JSON-RPC 2.0 request (or batch)
    │   ├── RequestTooLarge           the body or batch is over the server's limit
    │   └── RequestTimeout            the body did not arrive in time (HTTP 408)
    ├── MethodNotFound        -32601
    ├── InvalidParams         -32602  `data.field` names the offending param
    │   ├── SkillNotFound
    │   ├── BlobNotFound
    │   ├── InvalidSkill              a manifest, SKILL.md or file list fails validation
    │   ├── SkillExists               create_skill for a name+version already stored
    │   ├── UnsafePath                a path that could leave the skill's folder
    │   ├── NotExecutable             execute_skill on an instruction skill
    │   ├── ContentTooLarge           a full read above the configured limit
    │   └── SessionNotFound           unknown, closed, expired or another tenant's session
    ├── InternalError         -32603  a bug on our side; details only in the server log
    ├── ServerBusy            -32000  every sandbox stayed busy for the whole wait
    ├── Unauthorized          -32001  no API key, or not a valid one (HTTP 401)
    ├── QuotaExceeded         -32002  over one of the tenant's limits; `data` names it
    ├── Forbidden             -32003  a Host or Origin this server does not answer (HTTP 403)
    └── SessionBusy           -32004  the session is running another request

Anything that goes wrong *inside* a run is not here: it is reported in-band,
as a run result with `status: "failed"`.
"""

from __future__ import annotations

from typing import Any


class RPCError(Exception):
    code: int = -32603
    # When the client may try again, in seconds: the wire layer sends it as an HTTP
    # `Retry-After` header (wire/rpc_asgi.py, wire/app.py); None: no such header.
    retry_after_s: int | None = None

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class ParseError(RPCError):
    code = -32700


class InvalidRequest(RPCError):
    code = -32600


class RequestTooLarge(InvalidRequest):
    pass


class RequestTimeout(InvalidRequest):
    pass


class MethodNotFound(RPCError):
    code = -32601


class InvalidParams(RPCError):
    code = -32602

    def __init__(self, message: str, field: str | None = None, **data: Any) -> None:
        if field is not None:
            data = {"field": field, **data}
        super().__init__(message, data or None)


class SkillNotFound(InvalidParams):
    pass


class BlobNotFound(InvalidParams):
    pass


class InvalidSkill(InvalidParams):
    pass


class SkillExists(InvalidParams):
    pass


class UnsafePath(InvalidParams):
    pass


class NotExecutable(InvalidParams):
    pass


class ContentTooLarge(InvalidParams):
    pass


class InternalError(RPCError):
    code = -32603


class ServerBusy(RPCError):
    code = -32000


class Unauthorized(RPCError):
    code = -32001


class QuotaExceeded(RPCError):
    """`data`: {"limit": its name, "value": the tenant's limit, "retry_after_s": for rate limits}."""

    code = -32002

    def __init__(self, message: str, limit: str, value: int, retry_after_s: int | None = None) -> None:
        data: dict[str, Any] = {"limit": limit, "value": value}
        if retry_after_s is not None:
            data["retry_after_s"] = retry_after_s
        super().__init__(message, data)
        self.retry_after_s = retry_after_s


class Forbidden(RPCError):
    code = -32003


class SessionNotFound(InvalidParams):
    """Unknown, closed, expired or another tenant's: the same answer for each."""


class SessionBusy(RPCError):
    """The session is running another request (one at a time; see docs/sessions.md)."""

    code = -32004
