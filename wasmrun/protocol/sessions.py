"""create_session, run_code with a session_id, fork_session, close_session, list_sessions.

A session is a Python interpreter whose globals, imports, /workspace and /tmp
carry over from one run to the next (see sandbox/sessions/run.py for how, and
docs/sessions.md). What this layer decides:

- one request at a time per session: a second one while a run is in progress
  gets SessionBusy (-32004) at once, never a queue (a session's runs depend on
  each other's state, so a queue would only hide ordering bugs; and a waiting
  request would hold a tenant's slot for nothing);
- an unknown, closed, expired or another tenant's session id is the same
  -32602 error naming `session_id`: nothing tells them apart;
- a session's limits and skills are fixed at creation (its pages were
  made under them); a run may change only its own timeout_ms, cpu_ms and
  output_bytes;
- the tenant's caps: `sessions` open at once, and `session_bytes` (its pages
  and files together) before a run or a fork starts and again for the version a
  run keeps: the worker gets the room left (`SessionRun.max_bytes`) and writes
  no pages past it, and the version is checked again when it is recorded
  (other sessions of the tenant may have grown meanwhile); one that does not
  fit is rolled back as `SessionBytesExceeded`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET

from wasmrun import offload
from wasmrun.protocol import packages, running, runs, toolcalls
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import (
    InvalidParams,
    MethodNotFound,
    QuotaExceeded,
    ServerBusy,
    SessionBusy,
    SessionNotFound,
)
from wasmrun.protocol.run_result import failure_summary
from wasmrun.protocol.streaming import output_listener
from wasmrun.protocol.types import (
    CloseSessionResult,
    CreateSessionParams,
    ExecutionResult,
    ForkSessionResult,
    InterruptSessionResult,
    ListSessionsParams,
    ListSessionsResult,
    RunCodeParams,
    RunError,
    RunLimits,
    SessionInfo,
    SessionRef,
)
from wasmrun.registry.manifest import IDENTIFIER
from wasmrun.sandbox import (
    SESSION_BYTES,
    AddedPackages,
    RunResult,
    SessionOutcome,
    SessionRun,
    new_run_id,
    session_bytes_exceeded,
)
from wasmrun.sessionstore.store import Busy, OverCap, SessionMeta, SessionStore, Unavailable, UnknownSession

# What a run in a session may set for itself; the rest of its limits are the session's.
PER_RUN_LIMITS = ("timeout_ms", "cpu_ms", "output_bytes")
T = TypeVar("T")
NOT_FOUND = "session {!r} does not exist (it may have been closed or have expired)"


def _store(ctx: Context) -> SessionStore:
    if ctx.sessions is None:
        raise MethodNotFound("sessions are not enabled on this server")
    return ctx.sessions


async def _off_loop(
    store: SessionStore, call: Callable[..., T], *args: Any, storage: str | None = None, **kwargs: Any
) -> T:
    """`call` on the session storage pool for tenant `storage` (a call that copies
    or deletes a session's folders: offload.for_session_storage), on a thread when
    the store waits on a database (the shared one), else here: a local store's
    lookups take microseconds, less than the hop to a thread."""
    try:
        if storage is not None:
            return await offload.for_session_storage(storage, call, *args, **kwargs)
        if store.blocking:
            return await asyncio.to_thread(call, *args, **kwargs)
        return call(*args, **kwargs)
    except Unavailable as exc:
        raise ServerBusy(f"server busy: {exc}; try again") from None


async def _session(ctx: Context, session_id: str, field: str = "session_id") -> SessionMeta:
    store = _store(ctx)
    try:
        return await _off_loop(store, store.get, ctx.caller.tenant, session_id)
    except UnknownSession:
        raise SessionNotFound(NOT_FOUND.format(session_id[:128]), field=field) from None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _info(store: SessionStore, session_id: str, meta: SessionMeta) -> SessionInfo:
    return SessionInfo(
        session_id=session_id, language="python", created_at=_iso(meta.created), last_used_at=_iso(meta.last_used),
        expires_at=_iso(meta.expires()), idle_timeout_s=meta.idle_timeout_s, skills=list(meta.skills),
        runs=meta.runs, memory_bytes=meta.memory_bytes, image_bytes=meta.image_bytes,
        files_bytes=meta.files_bytes, busy=store.is_busy(meta), packages=list(meta.packages),
    )


async def _check_room(ctx: Context, store: SessionStore, adding: int = 0) -> None:
    """QuotaExceeded if the tenant's sessions already hold `session_bytes` on disk."""
    cap = ctx.caller.limits.session_bytes
    _, used = await _off_loop(store, store.usage, ctx.caller.tenant)
    if used + adding > cap:
        raise QuotaExceeded(
            f"quota exceeded: your sessions hold {used} bytes on disk, the limit is {cap};"
            " close sessions you no longer need", "session_bytes", cap,
        )


def _over_cap(exc: OverCap) -> QuotaExceeded:
    return QuotaExceeded(
        f"quota exceeded: at most {exc.value} sessions may be open at once; close one first", exc.limit, exc.value,
    )


async def create_session(ctx: Context, p: CreateSessionParams) -> SessionInfo:
    store = _store(ctx)
    policy = store.policy
    idle = p.idle_timeout_s if p.idle_timeout_s is not None else policy.idle_timeout_s
    if idle > policy.max_idle_timeout_s:
        raise InvalidParams(
            f"idle_timeout_s must be from 1 to {policy.max_idle_timeout_s} on this server, not {idle}",
            field="idle_timeout_s", minimum=1, maximum=policy.max_idle_timeout_s,
        )
    running.request_limits(ctx, p.limits)  # -32602 naming a limit out of bounds, now rather than at the first run
    skills = await running.mounted_skills(ctx, p.skills, "skills")
    await _check_room(ctx, store)
    limits = {k: v for k, v in msgspec.structs.asdict(p.limits).items() if v is not None}
    installed = await packages.for_call(ctx, skills, "skills", p.packages)
    pins = (installed.info.pins, installed.info.python) if installed is not None else None
    try:
        session_id, meta = await _off_loop(
            store, store.create, ctx.caller.tenant, idle_timeout_s=idle, limits=limits,
            skills=[f"{s.name}@{s.version}" for s in skills], max_sessions=ctx.caller.limits.sessions,
            packages=pins,
        )
    except OverCap as exc:
        raise _over_cap(exc) from None
    info = _info(store, session_id, meta)
    if installed is not None:
        info.packages_installed = packages.answer(installed)
    return info


async def fork_session(ctx: Context, p: SessionRef) -> ForkSessionResult:
    store = _store(ctx)
    source = await _session(ctx, p.session_id)
    await _check_room(ctx, store, source.disk_bytes)
    await _acquire(store, source)
    try:
        await _ready(store, source)
        session_id, _ = await _off_loop(
            store, store.create, ctx.caller.tenant, storage=ctx.caller.tenant, idle_timeout_s=source.idle_timeout_s,
            limits=dict(source.limits),
            skills=list(source.skills), max_sessions=ctx.caller.limits.sessions, source=source,
        )
    except OverCap as exc:
        raise _over_cap(exc) from None
    finally:
        await _off_loop(store, store.release, source)
    source.last_used = time.time()
    return ForkSessionResult(session_id=session_id, forked_from=p.session_id)


async def close_session(ctx: Context, p: SessionRef) -> CloseSessionResult:
    store = _store(ctx)
    try:
        await _off_loop(store, store.close, ctx.caller.tenant, p.session_id, storage=ctx.caller.tenant)
    except UnknownSession:
        raise SessionNotFound(NOT_FOUND.format(p.session_id), field="session_id") from None
    except Busy:
        raise SessionBusy("session is running a request; close it when the run ends", {"field": "session_id"}) from None
    return CloseSessionResult(closed=True)


async def interrupt_session(ctx: Context, p: SessionRef) -> InterruptSessionResult:
    """Stop the run the caller's session is running on this server, if any: it fails with
    `Interrupted` (after its grace to raise where it is, as a time limit stops it) and the
    session keeps the state it had before that run."""
    await _session(ctx, p.session_id)  # the caller's own, else SessionNotFound
    run_id = ctx.session_runs.of(p.session_id)
    if run_id is None or not ctx.executor.interrupt(run_id):
        return InterruptSessionResult(interrupted=False)
    return InterruptSessionResult(interrupted=True, run_id=run_id)


async def list_sessions(ctx: Context, p: ListSessionsParams) -> ListSessionsResult:
    """The caller's own sessions, oldest first."""
    store = _store(ctx)
    mine = sorted(await _off_loop(store, store.owned, ctx.caller.tenant), key=lambda m: m.created)
    return ListSessionsResult(sessions=[_info(store, m.session_id, m) for m in mine])


async def _acquire(store: SessionStore, meta: SessionMeta) -> None:
    try:
        await _off_loop(store, store.acquire, meta)
    except Busy:
        raise SessionBusy(
            "session is running another request (one at a time): retry when it ends", {"field": "session_id"},
        ) from None
    except UnknownSession:
        raise SessionNotFound(NOT_FOUND.format("(it)"), field="session_id") from None


async def _ready(store: SessionStore, meta: SessionMeta) -> None:
    """`meta`'s state where this server can run it (held by `_acquire`)."""
    try:
        await _off_loop(store, store.ready, meta)
    except UnknownSession:  # its state did not survive: it was ended
        raise SessionNotFound(NOT_FOUND.format("(it)"), field="session_id") from None


def _run_limits(ctx: Context, meta: SessionMeta, asked: RunLimits) -> RunLimits:
    """The session's limits, with what the run may change for itself."""
    limits = dict(meta.limits)
    for name, value in msgspec.structs.asdict(asked).items():
        if value is None:
            continue
        if name not in PER_RUN_LIMITS and value != limits.get(name):
            raise InvalidParams(
                f"limits.{name} is the session's (set at create_session); a run may change only "
                + ", ".join(PER_RUN_LIMITS), field=f"limits.{name}",
            )
        limits[name] = value
    return msgspec.convert(limits, RunLimits)


async def run_code(ctx: Context, p: RunCodeParams) -> ExecutionResult:
    """run_code; with a session_id, inside that session."""
    with toolcalls.relayed_output(bool(p.tools)):  # code mode: the output reaches each answering call's client
        if p.session_id is None:
            return await runs.run_code(ctx, p)
        return await _run_in_session(ctx, p, p.session_id)


async def _run_in_session(ctx: Context, p: RunCodeParams, session_id: str) -> ExecutionResult:
    store = _store(ctx)
    meta = await _session(ctx, session_id)
    _check_in_session(p)
    on_output = output_listener(p.stream)
    args_json = running.args_json(p.args)
    limits = running.request_limits(ctx, _run_limits(ctx, meta, p.limits))
    skills = await running.mounted_skills(ctx, meta.skills, "skills")
    input_blobs = await running.checked_input_blobs(ctx, p.input_blobs)
    await _check_room(ctx, store)
    await _acquire(store, meta)
    run = _SessionRun(store, meta, ctx.caller.limits.session_bytes)
    try:
        await _ready(store, meta)
        room = await _room(ctx, store, meta)
        session = SessionRun(
            folder=str(store.folder(meta)), version=meta.version, reseed=meta.reseed,
            max_bytes=room, cap_bytes=ctx.caller.limits.session_bytes,
        )
        request = await packages.mounted(ctx, meta.packages, meta.package_tag, running.code_request(
            ctx, p, args_json, skills, input_blobs, limits, stream=on_output is not None, session=session
        ))
        if not request.run_id:  # named here: interrupt_session names it to the executor
            request = msgspec.structs.replace(request, run_id=new_run_id())
    except BaseException:
        await offload.for_run(store.release, meta)
        raise

    async def run_and_settle(on_tools: toolcalls.ToolSink | None) -> ExecutionResult:
        ctx.session_runs.start(session_id, request.run_id)
        try:
            return await running.run(ctx, request, skills, on_result=run.keep, on_output=on_output, on_tools=on_tools)
        finally:
            ctx.session_runs.end(session_id, request.run_id)
            # Off the event loop: with the shared backends, keeping a version uploads it.
            # On the run pool: another tenant's fork or close flood cannot hold it up.
            await offload.for_run(run.settle)

    async def settled(on_tools: toolcalls.ToolSink | None) -> ExecutionResult:
        # A call cancelled midway (its client went away) leaves the run going on in
        # its worker, writing the next version: the session stays held until it ends.
        result = await asyncio.shield(asyncio.ensure_future(run_and_settle(on_tools)))
        result.session_rolled_back = not run.kept
        if run.over_cap is not None:
            _fail(result, RunError(type=SESSION_BYTES, message=run.over_cap))
        return result

    if request.tools:  # code mode: the run may pause at its tool calls, the session held (toolcalls.py)
        return await toolcalls.with_tools(ctx, request.run_id, request.tool_limits, settled)
    return await settled(None)


def _check_in_session(p: RunCodeParams) -> None:
    """What a run in a session may not ask for itself: skills and packages are the session's
    (named at create_session); the entrypoint must name a function."""
    if p.mount_skills:
        raise InvalidParams(
            "mount_skills: a session mounts the skills named at create_session in every run", field="mount_skills",
        )
    packages.not_in_a_session(p.packages)
    if not IDENTIFIER.fullmatch(p.entrypoint):
        raise InvalidParams(f"entrypoint {p.entrypoint!r} must be the name of a function", field="entrypoint")


def _fail(result: ExecutionResult, error: RunError) -> None:
    """A completed run undone after the fact (its new state did not fit)."""
    result.status, result.error, result.output = "failed", error, UNSET
    result.summary = failure_summary(error.type, error.message)


async def _room(ctx: Context, store: SessionStore, meta: SessionMeta) -> int:
    """What the tenant's `session_bytes` leaves for `meta`'s next version: the cap
    less what its other sessions hold (this one's current version is replaced)."""
    _, used = await _off_loop(store, store.usage, ctx.caller.tenant)
    return max(0, ctx.caller.limits.session_bytes - (used - meta.disk_bytes))


class _SessionRun:
    """One run's hold on its session: released once, when the run has ended."""

    def __init__(self, store: SessionStore, meta: SessionMeta, cap: int) -> None:
        self.store, self.meta, self.cap = store, meta, cap
        self.outcome: SessionOutcome | None = None
        self.kept = False
        self.over_cap: str | None = None  # why a run that kept its state was undone at the end
        self.packages_added: list[AddedPackages] = []  # sets the run installed from inside (packagecall.py)
        self._settled = False

    def keep(self, result: RunResult) -> None:
        self.outcome = result.session
        self.packages_added = result.packages_added

    def settle(self) -> None:
        if self._settled:
            return
        self._settled = True
        try:
            # The worker's room was figured at the start; the tenant's other sessions may
            # have kept versions since. Checked again and kept under one lock per tenant.
            with self.store.commit_lock(self.meta.owner):
                outcome = self.outcome
                if outcome is not None and outcome.committed:
                    others = self.store.usage(self.meta.owner)[1] - self.meta.disk_bytes
                    new = outcome.image_bytes + outcome.files_bytes
                    if others + new > self.cap:
                        self.over_cap = session_bytes_exceeded(new, max(0, self.cap - others), self.cap)
                        outcome.committed = False
                if outcome is not None and outcome.committed and self.packages_added:
                    # packages the run installed from inside: its later runs mount the set
                    last = self.packages_added[-1]
                    self.meta.packages, self.meta.package_tag = list(last.pins), last.tag
                self.kept = self.store.finish_run(self.meta, outcome)
        finally:
            self.store.release(self.meta)
