"""A host-held secret is never in guest memory: the whole linear memory is
searched after a run that used it (and, as a control, the search finds an
env-mode secret, which the guest does hold)."""

from __future__ import annotations

import time

from tests.egress_server import serve
from wasmrun.egress.policy import NetworkGrant
from wasmrun.sandbox.contract.types import RunRequest, RunResult
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.guest.jsontext import encode_args

SECRET = "hv-7d1e0c2b9a5f4e3d"
CODE = """\
import os
from runtime import http

def main(args):
    r = http.post(args["url"], headers={"X-Api-Key": os.environ["API_KEY"]}, body="k=" + os.environ["API_KEY"])
    return r.json()["headers"]["X-Api-Key"]
"""


def _run_and_search(engine: SandboxEngine, request: RunRequest, needle: bytes) -> tuple[RunResult, bool]:
    fresh = engine.loop.supply.take()
    result, workspace = engine.loop.run_in(fresh, request, time.perf_counter())
    try:
        size = fresh.memory.data_len(fresh.store)
        found = False
        step = 1 << 24
        for start in range(0, size, step):  # overlapping windows, so no match falls between two
            chunk = bytes(fresh.memory.read(fresh.store, start, min(size, start + step + len(needle))))
            found = found or needle in chunk
        return result, found
    finally:
        engine.loop.supply.retire(fresh.store, workspace)


def test_host_secret_is_never_in_guest_memory(engine: SandboxEngine) -> None:
    with serve() as server:
        grant = NetworkGrant(subject="skill t", requested=[server.url], granted=[server.url], allow_private=True,
                             host_secrets={"API_KEY": SECRET}, body_secrets=["API_KEY"])
        request = RunRequest(kind="code", code=CODE, args_json=encode_args({"url": server.url + "/echo"}), network=grant,
                             env={"API_KEY": "wasmrun-secret:API_KEY"})
        result, found = _run_and_search(engine, request, SECRET.encode())
        assert result.status == "completed", result.error
        assert server.seen[0].headers["X-Api-Key"] == SECRET  # the server got the value
        assert server.seen[0].body == b"k=" + SECRET.encode()  # in the body too; its echo comes back redacted
        assert result.output == "wasmrun-secret:API_KEY"  # its echo reached the guest redacted
        assert not found

        # control: in env mode the guest holds the value, and the search finds it
        env_request = RunRequest(kind="code", code=CODE, args_json=encode_args({"url": server.url + "/echo"}),
                                 network=NetworkGrant(subject="skill t", requested=[server.url],
                                                      granted=[server.url], allow_private=True),
                                 env={"API_KEY": SECRET})
        result, found = _run_and_search(engine, env_request, SECRET.encode())
        assert result.status == "completed" and found
