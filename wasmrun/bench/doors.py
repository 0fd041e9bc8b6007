"""The doors' rows of `wasmrun bench`: from creating a kernel (Jupyter) or a new identifier's
first call (Azure dynamic sessions) to the first result of `1+1`, each beside a JSON-RPC
`run_code` hello sent through the same client, so the ratio is the door's, not the client's.

Plain clients, both runtime dependencies of wasmrun (pyproject.toml): httpx2 for HTTP (one
keep-alive connection, as an SDK keeps) and websockets for the Jupyter channels. Each sample
ends what it made (the kernel, the identifier's session) after its clock stops: the server
keeps 8 sessions open by default.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from wasmrun.bench.interleave import alternating
from wasmrun.bench.systems import HELLO, as_run_code

if TYPE_CHECKING:
    import httpx2

    from wasmrun.bench.run import Bench

RPC_HELLO = "wasmrun, JSON-RPC run_code hello (same client)"
JUPYTER = "wasmrun, Jupyter: POST /api/kernels + channels + execute 1+1"
AZURE = "wasmrun, Azure: code/execute 1+1, a new identifier"
AZURE_POOL = "/azure/pools/bench"
REPLY_TIMEOUT_S = 60.0


def client(bench: Bench) -> httpx2.Client:
    """The doors' HTTP client for this run, made on first use and closed with the run."""
    made = bench.state.get("doors.client")
    if made is None:
        import httpx2

        headers = {"Authorization": f"Bearer {key}"} if (key := _key(bench)) else {}
        made = httpx2.Client(base_url=f"http://127.0.0.1:{bench.http.port}", headers=headers, timeout=120)
        bench.stack.callback(made.close)
        bench.state["doors.client"] = made
    return made


def _key(bench: Bench) -> str:
    return bench.http.auth.decode().partition("Bearer ")[2].strip()


def rpc_hello(http: httpx2.Client) -> float:
    """A fresh run of print('hello') over JSON-RPC, through `http`."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "run_code",
            "params": {"language": "python", "code": as_run_code(HELLO)}}
    start = time.perf_counter()
    reply = http.post("/rpc", json=body)
    seconds = time.perf_counter() - start
    result = reply.json().get("result") or {}
    if reply.status_code != 200 or result.get("status") != "completed":
        raise RuntimeError(f"run_code answered {reply.status_code}: {reply.text[:300]}")
    return seconds


def _execute_request(code: str) -> dict[str, Any]:
    msg_id = uuid.uuid4().hex
    return {"header": {"msg_id": msg_id, "msg_type": "execute_request", "session": uuid.uuid4().hex,
                       "username": "bench", "date": "", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}


def _until_reply(ws: Any, msg_id: str) -> str | None:
    """The cell's messages until its execute_reply; answers its execute_result's text."""
    result = None
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while True:
        message = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = message.get("msg_type")
        if kind == "execute_result":
            result = message["content"]["data"].get("text/plain")
        elif kind == "execute_reply":
            if message["content"].get("status") != "ok":
                raise RuntimeError(f"the Jupyter door's execute_reply: {message['content']}")
            return result


def jupyter_sample(bench: Bench) -> float:
    """POST /api/kernels, the channels WebSocket opened, `1+1` executed, until its execute_reply.
    The socket's close and the kernel's DELETE come after the clock."""
    from websockets.sync.client import connect

    http = client(bench)
    key = _key(bench)
    request = _execute_request("1+1")
    start = time.perf_counter()
    made = http.post("/api/kernels", json={"name": "python3"})
    if made.status_code != 201:
        raise RuntimeError(f"POST /api/kernels answered {made.status_code}: {made.text[:300]}")
    kernel = made.json()["id"]
    try:
        url = f"ws://127.0.0.1:{bench.http.port}/api/kernels/{kernel}/channels"
        with connect(url, additional_headers={"Authorization": f"token {key}"} if key else None,
                     open_timeout=REPLY_TIMEOUT_S) as ws:
            ws.send(json.dumps(request))
            text = _until_reply(ws, request["header"]["msg_id"])
            seconds = time.perf_counter() - start
    finally:
        http.delete(f"/api/kernels/{kernel}")
    if text != "2":
        raise RuntimeError(f"the Jupyter door answered {text!r} for 1+1")
    return seconds


def azure_sample(bench: Bench) -> float:
    """`code/execute` of `1+1` with an identifier never used (its session made by the call);
    the session's DELETE comes after the clock."""
    http = client(bench)
    params = {"identifier": f"bench-{uuid.uuid4().hex}", "api-version": "2024-02-02-preview"}
    body = {"properties": {"codeInputType": "inline", "executionType": "synchronous", "code": "1+1"}}
    start = time.perf_counter()
    reply = http.post(f"{AZURE_POOL}/code/execute", params=params, json=body)
    seconds = time.perf_counter() - start
    try:
        props = reply.json().get("properties") or {}
        if reply.status_code != 200 or props.get("status") != "Success" or props.get("result") != 2:
            raise RuntimeError(f"the Azure door answered {reply.status_code}: {reply.text[:300]}")
    finally:
        http.delete(f"{AZURE_POOL}/session", params=params)
    return seconds


def jupyter(bench: Bench) -> dict[str, float]:
    http = client(bench)
    return alternating(bench, [(JUPYTER, lambda: jupyter_sample(bench)), (RPC_HELLO, lambda: rpc_hello(http))])


def azure(bench: Bench) -> dict[str, float]:
    http = client(bench)
    return alternating(bench, [(AZURE, lambda: azure_sample(bench)), (RPC_HELLO, lambda: rpc_hello(http))])


__all__ = ["AZURE", "JUPYTER", "RPC_HELLO", "azure", "jupyter"]
