"""The server over HTTP with its real worker pool: nothing a client sends, and
nothing a run returns, can take a worker away or crash one."""

from __future__ import annotations

import itertools
import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.skillfiles import write_skill
from wasmrun.sandbox import BlobOpener, WorkerPool
from wasmrun.server import assemble, create_app
from wasmrun.settings import Settings

WORKERS = 2
_ids = itertools.count(1)


@pytest.fixture()
def pool(settings: Settings, tmp_path: Path) -> Iterator[WorkerPool]:
    p = WorkerPool(
        BlobOpener("wasmrun.blobs.store:FileBlobStore", [str(settings.blobs_dir)]),
        workers=WORKERS,
        queue_timeout=2.0,
        workspace_parent=tmp_path / "workspaces",
    )
    yield p
    p.close()


@pytest.fixture()
def http(settings: Settings, pool: WorkerPool) -> Iterator[TestClient]:
    with TestClient(create_app(assemble(settings, executor=pool)), base_url="http://localhost") as client:
        yield client


def call(http: TestClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = http.post("/rpc", json={"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params})
    assert response.status_code == 200, response.text
    return response.json()


def run_code(http: TestClient, code: str, **params: Any) -> dict[str, Any]:
    return call(http, "run_code", {"language": "python", "code": code, **params})


def assert_serving(http: TestClient) -> None:
    answer = run_code(http, "def main(args):\n    return 'still serving'\n")
    assert answer["result"]["output"] == "still serving", answer


def wait_whole(http: TestClient, timeout: float = 120.0) -> dict[str, Any]:
    give_up = time.monotonic() + timeout
    while True:
        health = http.get("/healthz").json()
        if health["workers"]["free"] == WORKERS and health["workers"]["unavailable"] == 0:
            return health
        assert time.monotonic() < give_up, health
        time.sleep(0.05)


# -- item 2: requests that once wedged the pool --------------------------------


def test_big_int_args_never_wedge_the_pool(http: TestClient) -> None:
    for _ in range(WORKERS * 3):
        answer = call(http, "execute_skill", {"name": "text.stats", "args": {"text": "a b", "top_n": 10**23}})
        # The skill itself refuses a top_n that large: a failed run, not a server error.
        assert "result" in answer, answer
        assert answer["result"]["status"] == "failed"
        assert answer["result"]["error"]["type"] == "ValueError"
    assert_serving(http)
    assert http.get("/healthz").json()["workers"] == {"total": WORKERS, "free": WORKERS, "unavailable": 0}


def test_big_int_args_reach_the_guest_exactly(http: TestClient) -> None:
    answer = run_code(http, "def main(args):\n    return [args['n'] + 1, args['m']]\n", args={"n": 10**30, "m": -(2**70)})
    assert answer["result"]["output"] == [10**30 + 1, -(2**70)]


def test_args_that_cannot_cross_are_refused_and_cost_no_worker(http: TestClient) -> None:
    # Refused where the body is read (its depth bound) or, past that, where the
    # args are encoded for the guest (jsontext): never by a worker taken and lost.
    deep: Any = 1
    for _ in range(300):
        deep = [deep]
    for _ in range(WORKERS * 3):
        answer = run_code(http, "def main(args):\n    return 1\n", args={"deep": deep})
        assert answer["error"]["code"] in (-32700, -32602), answer
        assert "deeper than" in answer["error"]["message"]
    assert_serving(http)
    assert http.get("/healthz").json()["workers"] == {"total": WORKERS, "free": WORKERS, "unavailable": 0}


# -- item 3: big integers returned ------------------------------------------------


@pytest.mark.parametrize(
    "expression, value",
    [
        ("2**64", 2**64),
        ("{'a': 10**30}", {"a": 10**30}),
        ("math.factorial(30)", 265252859812191058636308480000000),
        ("[-(2**100), 2**63 - 1]", [-(2**100), 2**63 - 1]),
    ],
)
def test_big_ints_are_returned_as_exact_json_numbers(http: TestClient, pool: WorkerPool, expression: str, value: Any) -> None:
    pids = pool.worker_pids()
    response = http.post(
        "/rpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "run_code",
              "params": {"language": "python", "code": f"import math\ndef main(args):\n    return {expression}\n"}},
    )
    digits = str(value if isinstance(value, int) else next(iter(value.values())) if isinstance(value, dict) else value[0])
    assert digits in response.text  # a JSON number, not a string or a float
    result = response.json()["result"]
    assert result["status"] == "completed", result
    assert result["output"] == value
    assert pool.worker_pids() == pids  # no worker died


# -- item 8: guest data the host did not expect ----------------------------------

NESTED_300 = "def main(args):\n    v = 1\n    for _ in range(300):\n        v = [v]\n    return v\n"


@pytest.mark.parametrize(
    "code, why",
    [
        ("def main(args):\n    return 'a\\ud800b'\n", "lone surrogate"),
        ("def main(args):\n    return {'\\udc00': 1}\n", "lone surrogate"),
        ("def main(args):\n    return 10**5000\n", "JSON-serialisable"),
        ("import sys\nsys.setrecursionlimit(100000)\n" + NESTED_300, "nested deeper than 256"),
        ("def main(args):\n    v = 1\n    for _ in range(100000):\n        v = [v]\n    return v\n", "nested"),
    ],
)
def test_unpassable_returns_fail_that_run_alone(http: TestClient, pool: WorkerPool, code: str, why: str) -> None:
    pids = pool.worker_pids()
    for _ in range(WORKERS + 1):
        result = run_code(http, code)["result"]
        assert result["status"] == "failed", result
        assert result["error"]["type"] == "InvalidOutput", result
        assert why in result["error"]["message"]
    assert_serving(http)
    assert pool.worker_pids() == pids


# Guest code can replace what the harness hands the host: the host must check the bytes itself.
HOSTILE = (
    "import _wasmrun\n"
    "respond = _wasmrun.respond\n"
    "_wasmrun.respond = lambda response: respond({reply!r})\n"
    "def main(args):\n    return 1\n"
)


@pytest.mark.parametrize(
    "payload",
    [
        b"[1e400]", b"[NaN]", b'"\\ud800"', b'{"\\udc00":1}', b'"\xff\xfe"', b"[" * 100_000,
        b"[" * 300 + b"]" * 300, b"1" * 5000, b"[1,2", b"",
    ],
    ids=["1e400", "NaN", "surrogate", "surrogate-key", "bad-utf8", "deep-open", "deep-300", "long-int", "cut", "empty"],
)
def test_hostile_output_bytes_fail_that_run_alone(http: TestClient, pool: WorkerPool, payload: bytes) -> None:
    pids = pool.worker_pids()
    result = run_code(http, HOSTILE.format(reply=b"C" + payload))["result"]
    assert result["status"] == "failed", result
    assert result["error"]["type"] == "InvalidOutput", result
    assert pool.worker_pids() == pids
    assert_serving(http)


def test_failure_text_with_lone_surrogates_is_reported(http: TestClient, pool: WorkerPool) -> None:
    pids = pool.worker_pids()
    result = run_code(http, "def main(args):\n    raise ValueError('bad \\ud800 value')\n")["result"]
    assert result["error"]["type"] == "ValueError"
    assert "bad \\ud800 value" in result["error"]["message"]
    for reply in [b'F{"type":"\\udc00","message":"m"}', b'F{"type":1}', b"F" + b"[" * 100_000, b"X"]:
        result = run_code(http, HOSTILE.format(reply=reply))["result"]
        assert result["error"]["type"] == "GuestCrashed", result
    assert pool.worker_pids() == pids


@pytest.fixture()
def skills_dir(skills_dir: Path) -> Path:
    root = write_skill(skills_dir, "demo.dangling", code="def main(args):\n    return 'ran'\n")
    (root / "code" / "gone.py").symlink_to(root / "code" / "nowhere.py")
    return skills_dir


def test_a_host_failure_in_one_run_never_costs_a_worker(http: TestClient, pool: WorkerPool) -> None:
    # A dangling .py symlink in an operator skill once raised in the bytecode
    # cache, outside any guard, and killed the worker: whatever the host does
    # with it now, the run gets an answer and the worker stays.
    pids = pool.worker_pids()
    failed = []
    for _ in range(WORKERS + 1):
        result = call(http, "execute_skill", {"name": "demo.dangling"})["result"]
        assert result["status"] == "completed" or result["error"]["type"] == "SandboxError", result
        if result["status"] == "failed":
            assert "pytest" not in result["error"]["message"]  # no host path for the client
            failed.append(result["run_id"])
    assert pool.worker_pids() == pids
    assert_serving(http)
    # The workers' stderr is the server's log: here a file pytest captures into
    # (unless run with -s: a terminal is not read back).
    logs = [Path(f"/proc/{pid}/fd/2") for pid in pids]
    if all(stat.S_ISREG(log.stat().st_mode) for log in logs):
        logged = "".join(log.read_text(errors="replace") for log in logs)
        assert all(f"sandbox host failure in run {run_id}" in logged for run_id in failed)


# -- /healthz ------------------------------------------------------------------------


def test_healthz_is_503_while_no_worker_can_serve(http: TestClient, pool: WorkerPool) -> None:
    assert http.get("/healthz").json() == {
        "status": "ok", "workers": {"total": WORKERS, "free": WORKERS, "unavailable": 0}, "queued": 0,
        "image": {"serving": "stdlib"},
    }
    working = pool._open_blobs
    pool._open_blobs = BlobOpener("wasmrun.no_such_module:open")  # replacements fail to start
    try:
        for pid in pool.worker_pids():
            os.kill(pid, signal.SIGKILL)
        give_up = time.monotonic() + 60
        while (health := http.get("/healthz")).status_code != 503:
            assert time.monotonic() < give_up, health.text
            time.sleep(0.05)
        assert health.json()["status"] == "unavailable"
        assert health.json()["workers"]["unavailable"] == WORKERS
        answer = run_code(http, "def main(args):\n    return 1\n")
        assert answer["error"]["code"] == -32000  # busy, not a server error
        time.sleep(1.5)  # a few failed starts: they are retried, not given up
        assert http.get("/healthz").status_code == 503
    finally:
        pool._open_blobs = working
    wait_whole(http)
    assert_serving(http)


# -- clients that go away mid-run ----------------------------------------------------


@pytest.fixture()
def served(settings: Settings, pool: WorkerPool) -> Iterator[str]:
    """The app behind a real uvicorn on a loopback port, run as `wasmrun serve` runs it: its base URL."""
    from tests.liveserver import serving

    app = create_app(assemble(settings, executor=pool))
    with serving(app, settings) as server:
        yield f"http://127.0.0.1:{server.config.port}"


def test_clients_that_disconnect_mid_run_never_shrink_the_pool(served: str, pool: WorkerPool) -> None:
    import json
    import socket
    from urllib.parse import urlsplit

    import requests

    host, port = urlsplit(served).hostname, urlsplit(served).port
    body = json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "run_code",
        "params": {"language": "python", "code": "import time\ndef main(args):\n    time.sleep(1)\n    return 1\n"},
    }).encode()
    request = (
        f"POST /rpc HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    for _ in range(WORKERS * 2):
        with socket.create_connection((host, port), timeout=30) as client:
            client.sendall(request)
            time.sleep(0.3)  # the run is under way
        # closed: the client is gone before its answer
    give_up = time.monotonic() + 120
    while (health := requests.get(f"{served}/healthz", timeout=30).json())["workers"]["free"] < WORKERS:
        assert time.monotonic() < give_up, health
        time.sleep(0.1)
    answer = requests.post(f"{served}/rpc", timeout=60, json={
        "jsonrpc": "2.0", "id": 2, "method": "run_code",
        "params": {"language": "python", "code": "def main(args):\n    return 'served'\n"},
    }).json()
    assert answer["result"]["output"] == "served"
