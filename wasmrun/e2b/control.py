"""E2B's control plane (`E2B_API_URL`): create, list, get, kill, set timeout, connect,
pause, resume and fork sandboxes, each one a wasmrun session of the caller's tenant.
Answers are E2B's JSON shapes; errors are `{"code", "message"}` as E2B's API gives."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from wasmrun.e2b import snapshots
from wasmrun.e2b.calls import Front, FrontError, read_json_object, whole_number
from wasmrun.e2b.records import KIND, from_record
from wasmrun.e2b.sandboxes import DEFAULT_CONTEXT, HOME, SANDBOX_ID, CodeContext, E2BSandbox, new_id
from wasmrun.tenants.caller import Caller

ENVD_VERSION = "0.5.7"  # the envd API this front answers (HTTP /files, octet-stream uploads)
CLIENT_ID = "wasmrun"
# Template names code written for E2B asks for: each is the server's own image.
TEMPLATES = frozenset({"code-interpreter-v1", "code-interpreter", "base", "python", "wasmrun"})
DEFAULT_TIMEOUT_S = 300  # E2B's default sandbox timeout
MAX_METADATA = 64
MAX_TEXT = 4096
# A sandbox's metadata all told (keys and values, UTF-8): each sandbox is held by the
# server and sent whole in every list, so 64 keys of 4,096 characters would be 512 KiB.
MAX_METADATA_BYTES = 16 * 1024
MAX_FORKS = 10
LIST_PAGE = 100  # E2B's default and most sandboxes per list answer; `x-next-token` pages on


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _strings(body: dict[str, Any], name: str) -> dict[str, str]:
    value = body.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_METADATA:
        raise FrontError(400, f"{name} must be an object of at most {MAX_METADATA} strings")
    total = 0
    for key, item in value.items():
        if not isinstance(item, str) or len(key) > MAX_TEXT or len(item) > MAX_TEXT or "\x00" in key + item:
            raise FrontError(400, f"{name}.{key[:80]} must be a string of at most {MAX_TEXT} characters")
        try:
            total += len(key.encode()) + len(item.encode())
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for it, none to list it in
            raise FrontError(400, f"{name}.{key[:80]!a} is not valid Unicode text") from None
    if total > MAX_METADATA_BYTES:
        raise FrontError(400, f"{name} must hold at most {MAX_METADATA_BYTES} bytes of keys and values, not {total}")
    return dict(value)


def env_vars(value: Any, name: str) -> dict[str, str]:
    """Environment variables as `os.environ` takes them: names not empty and without '='
    or NUL, values strings without NUL; anything else is 400 naming the member (not a run
    that fails setting them)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FrontError(400, f"{name} must be an object of strings")
    for key, item in value.items():
        if not key or "=" in key or "\x00" in key:
            raise FrontError(400, f"{name}: {key[:80]!r} is not a variable name (empty, or with '=' or NUL)")
        if not isinstance(item, str) or "\x00" in item:
            raise FrontError(400, f"{name}.{key[:80]} must be a string without NUL")
    return dict(value)


def _timeout(body: dict[str, Any], front: Front, default: int | None = DEFAULT_TIMEOUT_S) -> int | None:
    value = body.get("timeout", default)
    if value is None:
        return None
    most = front.session_policy.max_age_s
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise FrontError(400, f"timeout must be a whole number of seconds from 1 to {most} on this server")
    return value


def created(sandbox: E2BSandbox) -> dict[str, Any]:
    """What create, connect and fork answer."""
    return {
        "templateID": sandbox.template, "sandboxID": sandbox.sandbox_id, "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION, "envdAccessToken": sandbox.access_token, "alias": sandbox.template,
        "domain": None,
    }


def detail(sandbox: E2BSandbox, front: Front) -> dict[str, Any]:
    """What get and list answer."""
    limits = front.dispatcher.context.limits.defaults
    return {
        **created(sandbox), "startedAt": _iso(sandbox.started_at), "endAt": _iso(sandbox.end_at),
        "cpuCount": 1, "memoryMB": limits.memory_bytes // (1024 * 1024),
        "diskSizeMB": front.workspace_bytes // (1024 * 1024), "state": sandbox.state,
        "metadata": dict(sandbox.metadata),
    }


async def new_session(front: Front, caller: Caller) -> str:
    """A session for a sandbox or a context: the longest idle timeout the server allows,
    its code at home in /home/user (`start_in`)."""
    params: dict[str, Any] = {"language": "python", "idle_timeout_s": front.session_policy.max_idle_timeout_s}
    if front.workspace_mb is not None:  # the operator's (WASMRUN_E2B_WORKSPACE_MB), else the runs' default
        params["limits"] = {"workspace_mb": front.workspace_mb}
    info = await front.call(caller, "create_session", params)
    session_id: str = info["session_id"]
    if not await start_in(front, caller, session_id, HOME):
        await front.close_session(caller, session_id)
        raise FrontError(500, f"could not make {HOME} the sandbox's working folder")
    return session_id


# E2B's home in the sandbox is /home/user: the run's /workspace mounted again (abi.USER_HOME),
# so the files API's paths and the code's are the same. HOME names it; every run of the
# session starts in `folder` (runtime/_boot.py start_in: a run's working folder is not kept).
START_IN = "import os as _os, runtime._boot as _b\n_os.environ['HOME'] = {home!r}\n{make}_b.start_in({folder!r})\ndel _os, _b\n"


async def start_in(front: Front, caller: Caller, session_id: str, folder: str) -> bool:
    """Whether the session's runs now start in `folder` (a guest path: HOME or under it;
    made when missing), with HOME=/home/user."""
    make = "" if folder == HOME else f"_os.makedirs({folder!r}, exist_ok=True)\n"
    code = START_IN.format(home=HOME, make=make, folder=folder)
    result = await front.call(caller, "run_code", {"language": "python", "code": code, "session_id": session_id})
    return result.get("status") == "completed"


async def set_envs(front: Front, caller: Caller, session_id: str, envs: dict[str, str]) -> None:
    """Sets environment variables in a session (os.environ persists across its runs)."""
    if envs:
        code = f"import os as _os\n_os.environ.update({envs!r})\ndel _os\n"
        result = await front.call(caller, "run_code", {"language": "python", "code": code, "session_id": session_id})
        if result.get("status") != "completed":
            raise FrontError(500, "could not set the sandbox's environment variables")


async def create_sandbox(front: Front, request: Request) -> Response:
    caller = front.api_caller(request)
    body = await read_json_object(request)
    template = body.get("templateID", "code-interpreter-v1")
    saved = await snapshots.find(front, caller, template) if isinstance(template, str) else None
    if saved is None and (not isinstance(template, str) or template not in TEMPLATES):
        shown = template[:80] if isinstance(template, str) else type(template).__name__
        return error(400, f"template {shown!r} is not on this server: wasmrun serves one Python image, "
                     f"named {', '.join(sorted(TEMPLATES))}, and the snapshots its tenant saved")
    timeout = _timeout(body, front) or DEFAULT_TIMEOUT_S
    metadata, envs = _strings(body, "metadata"), env_vars(_strings(body, "envVars"), "envVars")
    await front.prune(caller.tenant)  # sandboxes whose sessions ended free their places first
    if saved is None:
        session_id = await new_session(front, caller)
    else:
        session_id = await snapshots.session_from(front, caller, saved[1])
    now = time.time()
    sandbox = E2BSandbox(
        sandbox_id=new_id(), caller=caller, template=template, metadata=metadata,
        started_at=now, end_at=now + timeout, access_token=new_id(), envs=envs,
    )
    sandbox.contexts[DEFAULT_CONTEXT] = CodeContext(DEFAULT_CONTEXT, session_id, saved[1].cwd if saved else HOME)
    try:
        await set_envs(front, caller, session_id, envs)
        await front.keep(sandbox)
    except FrontError:
        await front.close_session(caller, session_id)
        raise
    return JSONResponse(created(sandbox), status_code=201)


async def _owned(front: Front, request: Request) -> tuple[Caller, E2BSandbox]:
    caller = front.api_caller(request)
    sandbox_id = request.path_params["sandbox_id"]
    sandbox = await front.lookup(sandbox_id, caller.tenant)
    if sandbox is None:
        raise FrontError(404, f"sandbox {sandbox_id[:80]!r} not found")
    return caller, sandbox


def _wanted(request: Request, sandbox: E2BSandbox) -> bool:
    """Whether the list's `state` and `metadata` filters keep the sandbox."""
    states = request.query_params.get("state")
    if states and sandbox.state not in states.split(","):
        return False
    try:
        wanted = urllib.parse.parse_qsl(request.query_params.get("metadata", ""), max_num_fields=MAX_METADATA)
    except ValueError:
        raise FrontError(400, f"metadata filters at most {MAX_METADATA} keys") from None
    # The SDK quotes each key and value, then form-encodes the pairs: undone in that order.
    unquote = urllib.parse.unquote
    return all(sandbox.metadata.get(unquote(key)) == unquote(value) for key, value in wanted)


def _page_query(request: Request) -> tuple[int, tuple[int, str] | None, bool]:
    """The list's `limit` (1 to LIST_PAGE), where it goes on from (`nextToken`, as the
    last answer's `x-next-token` gave it) and its `order` (`asc`, the default, or `desc`)."""
    limit = whole_number(request.query_params.get("limit", str(LIST_PAGE)), digits=3)
    if limit is None or not 1 <= limit <= LIST_PAGE:
        raise FrontError(400, f"limit must be a whole number from 1 to {LIST_PAGE}")
    order = request.query_params.get("order", "asc")
    if order not in ("asc", "desc"):
        raise FrontError(400, "order must be asc or desc")
    token = request.query_params.get("nextToken")
    after = None
    if token:
        started_text, _, sandbox_id = token.partition("-")
        started = whole_number(started_text)
        if started is None or not SANDBOX_ID.fullmatch(sandbox_id):
            raise FrontError(400, "nextToken is not one this server gave")
        after = (started, sandbox_id)
    return limit, after, order == "desc"


def _place(sandbox: E2BSandbox) -> tuple[int, str]:
    return int(sandbox.started_at * 1_000_000), sandbox.sandbox_id


async def list_sandboxes(front: Front, request: Request) -> Response:
    """One page of the tenant's sandboxes that the filters keep, in start order; the
    header `x-next-token` names where the next page starts (the SDK's paginator reads it)."""
    caller = front.api_caller(request)
    limit, after, descending = _page_query(request)
    await front.prune(caller.tenant)
    stored = await front.stored(front.records.owned, KIND, caller.tenant)
    every = sorted((from_record(r, caller) for r in stored), key=_place)
    kept = [s for s in every if _wanted(request, s)]
    if descending:
        kept.reverse()
    if after is not None:
        kept = [s for s in kept if (_place(s) < after if descending else _place(s) > after)]
    page = kept[:limit]
    headers = {"x-next-token": "{}-{}".format(*_place(page[-1]))} if len(kept) > limit else {}
    return JSONResponse([detail(s, front) for s in page], headers=headers)


async def get_sandbox(front: Front, request: Request) -> Response:
    return JSONResponse(detail((await _owned(front, request))[1], front))


async def kill_sandbox(front: Front, request: Request) -> Response:
    _, sandbox = await _owned(front, request)
    if not await front.forget(sandbox):
        return error(404, f"sandbox {sandbox.sandbox_id} not found")
    return Response(status_code=204)


async def set_timeout(front: Front, request: Request) -> Response:
    _, sandbox = await _owned(front, request)
    timeout = _timeout(await read_json_object(request), front, default=None)
    if timeout is None:
        return error(400, "timeout is required")
    await front.change(sandbox, lambda s: setattr(s, "end_at", time.time() + timeout))
    return Response(status_code=204)


async def refresh(front: Front, request: Request) -> Response:
    """Keep-alive: `duration` seconds more from now (E2B's refreshes)."""
    _, sandbox = await _owned(front, request)
    body = await read_json_object(request)
    duration = _timeout({"timeout": body.get("duration", DEFAULT_TIMEOUT_S)}, front)
    await front.change(sandbox, lambda s: setattr(s, "end_at", max(s.end_at, time.time() + (duration or DEFAULT_TIMEOUT_S))))
    return Response(status_code=204)


async def connect(front: Front, request: Request) -> Response:
    """Connect (and resume): a paused sandbox runs again; `timeout` restarts its clock."""
    _, sandbox = await _owned(front, request)
    timeout = _timeout(await read_json_object(request), front, default=None)
    resumed = False

    def resume(s: E2BSandbox) -> None:
        nonlocal resumed
        resumed, s.paused = s.paused, False
        if timeout is not None or resumed:
            s.end_at = time.time() + (timeout or DEFAULT_TIMEOUT_S)

    await front.change(sandbox, resume)
    return JSONResponse(created(sandbox), status_code=201 if resumed else 200)


async def pause(front: Front, request: Request) -> Response:
    """A session's memory and files are kept between runs already: pausing stops the
    sandbox's endpoints until it is resumed (connect or resume), and its timeout: it
    stays paused until its session, unused, ends (the server's longest idle timeout)."""
    _, sandbox = await _owned(front, request)
    paused = False

    def pause_it(s: E2BSandbox) -> None:
        nonlocal paused
        paused, s.paused = s.paused, True
        if not paused:
            s.end_at = time.time() + front.session_policy.max_idle_timeout_s

    await front.change(sandbox, pause_it)
    if paused:
        return error(409, f"sandbox {sandbox.sandbox_id} is already paused")
    return Response(status_code=204)


async def fork(front: Front, request: Request) -> Response:
    """Forks: each a new sandbox on a fork of each of the source's contexts' sessions."""
    caller, sandbox = await _owned(front, request)
    body = await read_json_object(request)
    count = body.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FORKS:
        return error(400, f"count must be from 1 to {MAX_FORKS}")
    timeout = _timeout(body, front, default=None)
    answers: list[dict[str, Any]] = []
    for _ in range(count):
        try:
            answers.append({"sandbox": created(await _fork_one(front, caller, sandbox, timeout))})
        except FrontError as exc:
            answers.append({"error": {"code": exc.status, "message": exc.message}})
    return JSONResponse(answers, status_code=201)


async def _fork_one(front: Front, caller: Caller, source: E2BSandbox, timeout: int | None) -> E2BSandbox:
    now = time.time()
    end_at = now + timeout if timeout is not None else max(source.end_at, now + 1)
    copy = E2BSandbox(
        sandbox_id=new_id(), caller=caller, template=source.template, metadata=dict(source.metadata),
        started_at=now, end_at=end_at, access_token=new_id(), envs=dict(source.envs),
    )
    try:
        for context in list(source.contexts.values()):
            async with context.lock:  # after the cell in progress, as its session allows
                forked = await front.call(caller, "fork_session", {"session_id": context.session_id})
            copy.contexts[context.context_id] = CodeContext(context.context_id, forked["session_id"], context.cwd)
        await front.keep(copy)
    except FrontError:
        await front.end(copy)
        raise
    return copy


async def snapshot(front: Front, request: Request) -> Response:
    caller, sandbox = await _owned(front, request)
    return await snapshots.create_snapshot(front, request, caller, sandbox)


async def metrics(front: Front, request: Request) -> Response:
    await _owned(front, request)
    return JSONResponse([])


async def unknown(front: Front, request: Request) -> Response:
    front.api_caller(request)
    return error(404, f"{request.method} {request.url.path[:200]} is not part of E2B's API that wasmrun serves (docs/e2b.md)")


Endpoint = Callable[[Front, Request], Any]
ENDING: frozenset[Endpoint] = frozenset({kill_sandbox})  # admitted without a request place (front.py)


def control_routes(front: Front, wrap: Callable[[Endpoint, Front], Any]) -> list[BaseRoute]:
    one = "/sandboxes/{sandbox_id}"
    table: list[tuple[str, Endpoint, list[str]]] = [
        ("/sandboxes", create_sandbox, ["POST"]), ("/v2/sandboxes", create_sandbox, ["POST"]),
        ("/sandboxes", list_sandboxes, ["GET"]), ("/v2/sandboxes", list_sandboxes, ["GET"]),
        (one, get_sandbox, ["GET"]), (one, kill_sandbox, ["DELETE"]),
        (f"{one}/timeout", set_timeout, ["POST"]), (f"{one}/refreshes", refresh, ["POST"]),
        (f"{one}/connect", connect, ["POST"]), (f"/v2{one}/connect", connect, ["POST"]),
        (f"{one}/resume", connect, ["POST"]), (f"{one}/pause", pause, ["POST"]),
        (f"{one}/fork", fork, ["POST"]), (f"{one}/metrics", metrics, ["GET"]),
        (f"{one}/snapshots", snapshot, ["POST"]), ("/templates/{template_id}", snapshots.delete_template, ["DELETE"]),
        ("/{rest:path}", unknown, ["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]
    return [Route(path, wrap(endpoint, front), methods=methods) for path, endpoint, methods in table]
