"""The Jupyter front's channels as ipykernel answers them (docs/jupyter.md), against a live
wasmrun with a real WebSocket client (websockets, tests/jupyterclient.py): a cell that errors
with stop_on_error aborts the cells already queued behind it, and a kernel takes at most
MAX_CONNECTIONS sockets at once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from websockets.exceptions import ConnectionClosed

from tests.jupyterclient import KernelSocket, of_type, reply, start_kernel, stdout
from tests.liveserver import LiveServer
from wasmrun.jupyter.kernels import MAX_CONNECTIONS, TRY_AGAIN_LATER
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")

SLOW_FAILURE = "import time\ntime.sleep(1.5)\nraise ValueError('boom')"


class Live:
    def __init__(self, server: LiveServer, alice: str) -> None:
        self.server, self.alice, self.url = server, alice, server.base_url


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data = tmp_path_factory.mktemp("jupyter_channels") / "data"
    alice = TenantStore(data).add("alice")
    server = LiveServer(data)
    try:
        yield Live(server, alice)
    finally:
        server.stop()


@pytest.fixture
def kernel(live: Live) -> Iterator[KernelSocket]:
    kernel_id = start_kernel(live.url, live.alice)
    socket = KernelSocket(live.url, kernel_id, live.alice)
    socket.kernel_id = kernel_id  # type: ignore[attr-defined]
    try:
        yield socket
    finally:
        socket.close()
        httpx2.delete(f"{live.url}/api/kernels/{kernel_id}", headers={"Authorization": f"token {live.alice}"})


def _all_done(kernel: KernelSocket, headers: list[dict[str, Any]], timeout: float = 90) -> dict[str, list[dict[str, Any]]]:
    """Every message parented to each request, until each has its reply and its idle."""
    wanted = {h["msg_id"] for h in headers}
    got: dict[str, list[dict[str, Any]]] = {msg_id: [] for msg_id in wanted}
    finished: set[str] = set()
    deadline = time.monotonic() + timeout
    while finished != wanted:
        message = kernel.recv(max(0.1, deadline - time.monotonic()))
        msg_id = message["parent_header"].get("msg_id")
        if msg_id not in wanted:
            continue
        got[msg_id].append(message)
        kinds = [(m["channel"], m["msg_type"], m["content"].get("execution_state")) for m in got[msg_id]]
        if any(c == "shell" for c, _, _ in kinds) and ("iopub", "status", "idle") in kinds:
            finished.add(msg_id)
    return got


def test_an_error_aborts_the_cells_queued_behind_it_as_ipykernel_does(kernel: KernelSocket) -> None:
    before = reply(kernel.execute("marker = 'set'"))["content"]["execution_count"]
    failing = kernel.send("execute_request", {"code": SLOW_FAILURE, "silent": False})
    queued = [kernel.send("execute_request", {"code": code, "silent": False})
              for code in ("print('must not print')", "ran_after = True")]
    got = _all_done(kernel, [failing, *queued])
    failed = reply(got[failing["msg_id"]])["content"]
    assert failed["status"] == "error" and failed["ename"] == "ValueError"
    assert failed["execution_count"] == before + 1
    for header in queued:
        messages = got[header["msg_id"]]
        answer = reply(messages)
        assert answer["msg_type"] == "execute_reply" and answer["content"]["status"] == "aborted"
        states = [m["content"]["execution_state"] for m in of_type(messages, "status")]
        assert states == ["busy", "idle"]
        assert not of_type(messages, "execute_input") and not of_type(messages, "stream")  # never ran
    # A request sent after the error's reply runs: the queued cells did not, nor counted.
    after = kernel.execute("print(marker, 'ran_after' in globals())")
    assert stdout(after) == "set False\n"
    assert reply(after)["content"] == {"status": "ok", "execution_count": before + 2, "user_expressions": {}, "payload": []}


def test_stop_on_error_false_and_silent_cells_leave_the_queue_running(kernel: KernelSocket) -> None:
    for options in ({"stop_on_error": False}, {"silent": True}):
        failing = kernel.send("execute_request", {"code": SLOW_FAILURE, "silent": False, **options})
        queued = kernel.send("execute_request", {"code": "print('still runs')", "silent": False})
        got = _all_done(kernel, [failing, queued])
        assert reply(got[failing["msg_id"]])["content"]["status"] == "error", options
        assert reply(got[queued["msg_id"]])["content"]["status"] == "ok", options
        assert stdout(got[queued["msg_id"]]) == "still runs\n", options


def test_a_kernel_takes_a_bounded_number_of_connections(live: Live, kernel: KernelSocket) -> None:
    kernel_id = kernel.kernel_id  # type: ignore[attr-defined]
    others = [KernelSocket(live.url, kernel_id, live.alice) for _ in range(MAX_CONNECTIONS - 1)]
    try:
        refused = KernelSocket(live.url, kernel_id, live.alice)
        with pytest.raises(ConnectionClosed) as closed:
            refused.recv(timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == TRY_AGAIN_LATER
        assert f"its most ({MAX_CONNECTIONS})" in closed.value.rcvd.reason
        # Those open are served, and a place freed is taken again.
        assert stdout(others[-1].execute("print('served')")) == "served\n"
        others.pop().close()
        deadline = time.monotonic() + 10
        while True:
            again = KernelSocket(live.url, kernel_id, live.alice)
            try:
                assert reply(again.until_done(again.send("kernel_info_request")))["msg_type"] == "kernel_info_reply"
                again.close()
                break
            except ConnectionClosed:  # the freed socket's end not yet seen by the server
                assert time.monotonic() < deadline
                time.sleep(0.2)
    finally:
        for other in others:
            other.close()
    assert stdout(kernel.execute("print('first still here')")) == "first still here\n"


def _idle(live: Live, kernel_id: str) -> None:
    deadline = time.monotonic() + 90
    while httpx2.get(f"{live.url}/api/kernels/{kernel_id}",
                     headers={"Authorization": f"token {live.alice}"}).json()["execution_state"] != "idle":
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_reconnect_of_the_same_client_session_gets_what_was_sent_meanwhile(live: Live, kernel: KernelSocket) -> None:
    """As jupyter_server buffers for a client session (`?session_id=`) whose socket went: the
    cell's later output, its result, reply and idle reach the next socket of that session;
    a socket of another session gets none of it, nor does an unusable session id."""
    kernel_id = kernel.kernel_id  # type: ignore[attr-defined]
    kernel.close()
    code = "import time\nprint('one', flush=True)\ntime.sleep(1.5)\nprint('two')\n'three'"
    first = KernelSocket(live.url, kernel_id, live.alice, session_id="client-A")
    header = first.send("execute_request", {"code": code, "silent": False})
    while (m := first.recv())["msg_type"] != "stream":
        pass
    assert m["content"]["text"] == "one\n"
    first.close()  # mid-cell
    _idle(live, kernel_id)
    again = KernelSocket(live.url, kernel_id, live.alice, session_id="client-A")
    try:
        replayed = again.until_done(header, timeout=30)
    finally:
        again.close()
    assert stdout(replayed) == "two\n" and of_type(replayed, "execute_result")[0]["content"]["data"]["text/plain"] == "'three'"
    assert reply(replayed)["content"]["status"] == "ok"

    for session_id in ("client-B", "x" * 5000, "bad\nid"):  # another session; ids that name none: nothing kept
        cell = KernelSocket(live.url, kernel_id, live.alice, session_id="client-A")
        header = cell.send("execute_request", {"code": "import time\ntime.sleep(1)\nprint('lost')", "silent": False})
        cell.recv()  # (the busy status: the cell is under way)
        cell.close()
        _idle(live, kernel_id)
        other = KernelSocket(live.url, kernel_id, live.alice, session_id=session_id)
        try:
            asked = other.send("kernel_info_request")
            seen = []  # every frame, until the kernel_info reply (anything replayed would come first)
            while not seen or seen[-1]["parent_header"].get("msg_id") != asked["msg_id"]:
                seen.append(other.recv(timeout=30))
            assert seen[-1]["msg_type"] == "kernel_info_reply" or seen[-1]["channel"] == "iopub", seen
            assert not [m for m in seen if m["parent_header"].get("msg_id") == header["msg_id"]], session_id[:20]
        finally:
            other.close()
