"""Templates made from sandboxes: E2B's `create_snapshot(name)` saves a prepared sandbox
(its interpreter's memory, its files, its envs) and `Sandbox.create(template=<the
snapshot's id or name>)` starts from it. A snapshot here is a fork of the sandbox's own
session, kept as it is (sessions fork in milliseconds, docs/sessions.md), and recorded
beside the sessions (records.py, TEMPLATE_KIND) with its name; each sandbox created from
it is a fork of that session. It counts in the tenant's `sessions` and lives as long as a
session may (its original's maximum age, WASMRUN_SESSION_MAX_AGE_S; unused, its idle
timeout): past that the name is unknown again. `delete_snapshot` ends it."""

from __future__ import annotations

import re
import time

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from wasmrun.e2b.calls import Front, FrontError, read_json_object
from wasmrun.e2b.records import TEMPLATE_KIND
from wasmrun.e2b.sandboxes import DEFAULT_CONTEXT, E2BSandbox, new_id
from wasmrun.sessionstore.records import Record
from wasmrun.tenants.caller import Caller

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


class TemplateDoc(msgspec.Struct):
    name: str
    session_id: str
    base: str  # the template its sandbox was made from
    cwd: str


_decode = msgspec.json.Decoder(TemplateDoc).decode


async def find(front: Front, caller: Caller, template: str) -> tuple[Record, TemplateDoc] | None:
    """The tenant's snapshot named `template` (its id or its name), if there is one."""
    if not NAME.fullmatch(template) and not template.startswith("snap-"):
        return None
    for record in await front.stored(front.records.owned, TEMPLATE_KIND, caller.tenant):
        doc = _decode(record.doc)
        if template in (record.key, doc.name):
            return record, doc
    return None


async def create_snapshot(front: Front, request: Request, caller: Caller, sandbox: E2BSandbox) -> Response:
    body = await read_json_object(request)
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or not NAME.fullmatch(name)):
        raise FrontError(400, "name must be 1 to 63 lowercase letters, digits, '_' or '-', starting with a letter or digit")
    context = sandbox.contexts[DEFAULT_CONTEXT]
    async with context.lock:  # after the cell in progress, as its session allows
        forked = await front.call(caller, "fork_session", {"session_id": context.session_id})
    session_id = forked["session_id"]
    key = "snap-" + new_id()
    doc = TemplateDoc(name=name or key, session_id=session_id, base=sandbox.template, cwd=context.cwd)
    expires = time.time() + front.session_policy.max_age_s
    try:
        replaced = await find(front, caller, name) if name else None
        await front.stored(front.records.insert, TEMPLATE_KIND, Record(
            key, caller.tenant, expires, msgspec.json.encode(doc).decode()))
    except FrontError:
        await front.close_session(caller, session_id)
        raise
    if replaced is not None:  # the name's new build: the old one goes
        await _delete(front, caller, replaced[0], replaced[1])
    return JSONResponse({"snapshotID": doc.name, "names": [doc.name]}, status_code=201)


async def _delete(front: Front, caller: Caller, record: Record, doc: TemplateDoc) -> bool:
    if await front.stored(front.records.delete, TEMPLATE_KIND, record.key) is None:
        return False
    await front.close_session(caller, doc.session_id)
    return True


async def delete_template(front: Front, request: Request) -> Response:
    caller = front.api_caller(request)
    found = await find(front, caller, request.path_params["template_id"])
    if found is None or not await _delete(front, caller, *found):
        return JSONResponse({"code": 404, "message": "no such snapshot"}, status_code=404)
    return Response(status_code=204)


async def session_from(front: Front, caller: Caller, doc: TemplateDoc) -> str:
    """A new session for a sandbox made from the snapshot: a fork of its session."""
    try:
        forked = await front.call(caller, "fork_session", {"session_id": doc.session_id})
    except FrontError as exc:
        if exc.status == 404:
            raise FrontError(404, f"template {doc.name!r} has ended (its session is gone)") from None
        raise
    session_id: str = forked["session_id"]
    return session_id
