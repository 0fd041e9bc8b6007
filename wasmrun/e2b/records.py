"""An E2B sandbox as a record beside the sessions (sessionstore/records.py): what E2B says
about it (template, metadata, envs, paused, access token, start and end time) and its
contexts' sessions, stored where its sessions are. So a sandbox survives a restart of the
server with its sessions, and with the shared backends every server answers for every
sandbox: each request reads the record, each change is made to it (under its row's lock),
a kill or an expiry deletes it (taken by one server, which ends the sessions).

What stays in one server's memory is only what lives while a request does: the contexts'
cell queues and locks, the commands running, the results held (sandboxes.py)."""

from __future__ import annotations

import msgspec

from wasmrun.e2b.sandboxes import CodeContext, E2BSandbox
from wasmrun.sessionstore.records import Record
from wasmrun.tenants.caller import Caller

KIND = "e2b_sandbox"
TEMPLATE_KIND = "e2b_template"


class ContextDoc(msgspec.Struct):
    session_id: str
    cwd: str
    language: str = "python"
    executions: int = 0


class SandboxDoc(msgspec.Struct):
    template: str
    metadata: dict[str, str]
    envs: dict[str, str]
    started_at: float
    access_token: str
    contexts: dict[str, ContextDoc]
    paused: bool = False


_decode_doc = msgspec.json.Decoder(SandboxDoc).decode


def to_record(sandbox: E2BSandbox) -> Record:
    doc = SandboxDoc(
        template=sandbox.template, metadata=dict(sandbox.metadata), envs=dict(sandbox.envs),
        started_at=sandbox.started_at, access_token=sandbox.access_token, paused=sandbox.paused,
        contexts={
            c.context_id: ContextDoc(c.session_id, c.cwd, c.language, c.executions) for c in sandbox.contexts.values()
        },
    )
    return Record(sandbox.sandbox_id, sandbox.caller.tenant, sandbox.end_at, msgspec.json.encode(doc).decode())


def from_record(record: Record, caller: Caller) -> E2BSandbox:
    """A sandbox of its own (no cells, no commands) with what the record says."""
    sandbox = E2BSandbox(
        sandbox_id=record.key, caller=caller, template="", metadata={}, started_at=0.0, end_at=0.0, access_token="",
    )
    apply(sandbox, record)
    return sandbox


def apply(sandbox: E2BSandbox, record: Record) -> None:
    """`sandbox` as its record says: a context it holds keeps its queue and lock (its
    session replaced when the record names another, after a restart elsewhere); one the
    record no longer names is ended (its queued cells dropped)."""
    doc = _decode_doc(record.doc)
    sandbox.template, sandbox.metadata, sandbox.envs = doc.template, doc.metadata, doc.envs
    sandbox.started_at, sandbox.end_at, sandbox.access_token = doc.started_at, record.expires, doc.access_token
    sandbox.paused = doc.paused
    for context_id in [c for c in sandbox.contexts if c not in doc.contexts]:
        sandbox.contexts.pop(context_id).ended = True
    for context_id, stored in doc.contexts.items():
        held = sandbox.contexts.get(context_id)
        if held is None:
            sandbox.contexts[context_id] = CodeContext(
                context_id, stored.session_id, stored.cwd, stored.language, stored.executions,
            )
            continue
        held.session_id, held.cwd, held.language = stored.session_id, stored.cwd, stored.language
        held.executions = stored.executions
