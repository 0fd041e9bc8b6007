"""The Jupyter Kernel Gateway front (docs/jupyter.md) against a live wasmrun with two
tenants: AG2's JupyterCodeExecutor and AutoGen's DockerJupyterCodeExecutor (pinned in the
test extra) pointed at it by a host, a port and a token, and the messages themselves."""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.images import on_data
from tests.jupyterclient import KernelSocket, of_type, reply, start_kernel, stderr, stdout
from tests.liveserver import LiveServer
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")


class Live:
    def __init__(self, server: LiveServer, alice: str, bob: str, dave: str) -> None:
        self.server, self.alice, self.bob, self.dave = server, alice, bob, dave
        self.url = server.base_url

    def get(self, path: str, token: str | None = None) -> httpx2.Response:
        headers = {"Authorization": f"token {token}"} if token else {}
        return httpx2.get(f"{self.url}{path}", headers=headers)

    def delete(self, path: str, token: str) -> httpx2.Response:
        return httpx2.delete(f"{self.url}{path}", headers={"Authorization": f"token {token}"})

    def post(self, path: str, token: str, body: object = None) -> httpx2.Response:
        return httpx2.post(f"{self.url}{path}", json=body, headers={"Authorization": f"token {token}"}, timeout=60)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data = tmp_path_factory.mktemp("jupyter") / "data"
    store = TenantStore(data)
    alice, bob, dave = store.add("alice"), store.add("bob"), store.add("dave", {"sessions": 2})
    server = LiveServer(data)
    try:
        yield Live(server, alice, bob, dave)
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
        live.delete(f"/api/kernels/{kernel_id}", live.alice)


def ag2_executor(live: Live, token: str, output_dir: Path):  # type: ignore[no-untyped-def]
    from autogen.coding.jupyter import JupyterCodeExecutor, JupyterConnectionInfo

    # What a user writes: the server's host, port and a tenant key as the token.
    info = JupyterConnectionInfo(host="127.0.0.1", use_https=False, port=live.server.port, token=token)
    return JupyterCodeExecutor(info, output_dir=output_dir, timeout=120)


def test_ag2_executor_keeps_state_runs_commands_and_reports_errors(live: Live, tmp_path: Path) -> None:
    from autogen.coding import CodeBlock

    executor = ag2_executor(live, live.alice, tmp_path)
    try:
        first = executor.execute_code_blocks([CodeBlock(code="x = 41\nprint('hello')\nx + 1", language="python")])
        assert first.exit_code == 0 and first.output.split() == ["hello", "42"]
        second = executor.execute_code_blocks([CodeBlock(code="!echo from-the-shell\nprint(x * 2)", language="python")])
        assert second.exit_code == 0 and second.output.split() == ["from-the-shell", "82"]
        failed = executor.execute_code_blocks([CodeBlock(code="y = 1\nundefined_name", language="python")])
        assert failed.exit_code == 1
        assert "NameError" in failed.output and "undefined_name" in failed.output
    finally:
        executor.stop()


@pytest.mark.images("data")
def test_ag2_executor_pandas_table_and_matplotlib_chart(live: Live, tmp_path: Path) -> None:
    from autogen.coding import CodeBlock

    executor = ag2_executor(live, live.alice, tmp_path)
    try:
        table = executor.execute_code_blocks([CodeBlock(language="python", code=(
            "import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [4, 19]})\ndf"
        ))])
        assert table.exit_code == 0 and "Oslo" in table.output and "19" in table.output
        html = [Path(f) for f in table.output_files if str(f).endswith(".html")]
        assert html and "<table" in html[0].read_text()
        chart = executor.execute_code_blocks([CodeBlock(language="python", code=(
            "import matplotlib.pyplot as plt\nplt.plot(df['temp'])\nplt.title('temps')\nplt.show()"
        ))])
        assert chart.exit_code == 0, chart.output
        pngs = [Path(f) for f in chart.output_files if str(f).endswith(".png")]
        assert pngs and pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pngs[0].stat().st_size > 2000
    finally:
        executor.stop()


def test_autogen_docker_jupyter_executor_on_an_existing_server(live: Live) -> None:
    """AutoGen's DockerJupyterCodeExecutor takes a JupyterConnectionInfo: no Docker then."""
    from autogen_core import CancellationToken
    from autogen_core.code_executor import CodeBlock
    from autogen_ext.code_executors.docker_jupyter import DockerJupyterCodeExecutor
    from autogen_ext.code_executors.docker_jupyter._jupyter_server import JupyterConnectionInfo

    async def scenario() -> tuple[str, str, int, str]:
        info = JupyterConnectionInfo(host="127.0.0.1", use_https=False, port=live.server.port, token=live.bob)
        async with DockerJupyterCodeExecutor(jupyter_server=info, output_dir=Path(tempfile.mkdtemp())) as executor:
            token = CancellationToken()
            first = await executor.execute_code_blocks([CodeBlock(code="total = sum(range(10))\nprint(total)",
                                                                  language="python")], token)
            second = await executor.execute_code_blocks([CodeBlock(code="total * 3", language="python")], token)
            failed = await executor.execute_code_blocks([CodeBlock(code="raise ValueError('bad input')",
                                                                   language="python")], token)
            await executor.restart()
            after = await executor.execute_code_blocks([CodeBlock(code="'total' in globals()", language="python")], token)
            return first.output.strip(), second.output.strip(), failed.exit_code, failed.output + "|" + after.output

    first, second, failed_code, rest = asyncio.run(scenario())
    assert (first, second, failed_code) == ("45", "135", 1)
    errors, after = rest.split("|")
    assert "ValueError: bad input" in errors and after.strip() == "False"  # a restart is a fresh interpreter


def test_messages_have_the_v5_shape_and_count_executions(live: Live, kernel: KernelSocket) -> None:
    info_request = kernel.send("kernel_info_request")
    info = reply(kernel.until_done(info_request))
    assert info["msg_type"] == "kernel_info_reply" and info["parent_header"]["msg_id"] == info_request["msg_id"]
    language = info["content"]["language_info"]
    assert info["content"]["protocol_version"] == "5.3" and language["name"] == "python"
    assert language["version"] == ("3.15" if on_data() else "3.11")
    got = kernel.execute("a = 2\nprint('out')\na * 21")
    kinds = [m["msg_type"] for m in got]
    assert kinds == ["status", "execute_input", "stream", "execute_result", "execute_reply", "status"]
    assert [m["content"]["execution_state"] for m in of_type(got, "status")] == ["busy", "idle"]
    result = of_type(got, "execute_result")[0]
    assert result["content"]["data"]["text/plain"] == "42" and result["channel"] == "iopub"
    first = reply(got)["content"]
    assert first["status"] == "ok" and first["execution_count"] == result["content"]["execution_count"]
    for message in got:
        assert set(message["header"]) >= {"msg_id", "msg_type", "session", "username", "date", "version"}
        assert message["parent_header"]["msg_type"] == "execute_request"
    again = reply(kernel.execute("a"))["content"]
    assert again["execution_count"] == first["execution_count"] + 1
    error = kernel.execute("def f():\n    return 1 / 0\nf()")
    content = of_type(error, "error")[0]["content"]
    assert (content["ename"], content["evalue"]) == ("ZeroDivisionError", "division by zero")
    assert isinstance(content["traceback"], list) and any("line 2" in line for line in content["traceback"])
    assert reply(error)["content"]["status"] == "error"


def test_output_streams_as_it_is_written(kernel: KernelSocket) -> None:
    got = kernel.execute("import sys, time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')\n"
                         "print('warn', file=sys.stderr)")
    streams = of_type(got, "stream")
    assert stdout(got) == "first\nsecond\n" and stderr(got) == "warn\n"
    assert of_type(got, "status")[-1]["received_at"] - streams[0]["received_at"] > 1.0


def test_commands_magics_and_pip(kernel: KernelSocket) -> None:
    got = kernel.execute("with open('notes.txt', 'w') as f:\n    f.write('kept\\n')\n!cat notes.txt\nprint('and python')")
    assert stdout(got) == "kept\nand python\n" and reply(got)["content"]["status"] == "ok"
    pip = kernel.execute("%pip install -e .\nprint('after')")  # the shell's pip: refused with its reason
    assert "editable" in stderr(pip) and stdout(pip) == "after\n"
    magic = reply(kernel.execute("%timeit 1 + 1"))["content"]
    assert magic["status"] == "error" and "magics do not run" in magic["evalue"]
    assert reply(kernel.execute("%matplotlib inline\n1"))["content"]["status"] == "ok"


def test_interrupt_stops_the_running_cell_and_keeps_the_state(live: Live, kernel: KernelSocket) -> None:
    kernel.execute("kept = 'yes'")
    running = kernel.send("execute_request", {"code": "while True:\n    pass"})
    time.sleep(1.0)
    interrupted = kernel.send("interrupt_request", channel="control")
    got_interrupt = kernel.until_done(interrupted)
    assert reply(got_interrupt)["msg_type"] == "interrupt_reply"
    stopped = kernel.until_done(running)
    assert reply(stopped)["content"]["status"] == "error" and of_type(stopped, "error")
    assert stdout(kernel.execute("print(kept)")) == "yes\n"
    # The REST interrupt: nothing running is fine.
    assert live.post(f"/api/kernels/{kernel.kernel_id}/interrupt", live.alice).status_code == 204  # type: ignore[attr-defined]


def test_a_kernel_survives_its_client_and_a_reconnect_sees_its_state(live: Live) -> None:
    kernel_id = start_kernel(live.url, live.alice)
    try:
        first = KernelSocket(live.url, kernel_id, live.alice)
        first.execute("remembered = [1, 2, 3]")
        first.send("execute_request", {"code": "import time\ntime.sleep(0.5)\nremembered.append(4)"})
        first.ws.close()  # gone mid-cell: the cell still runs
        time.sleep(1.5)
        second = KernelSocket(live.url, kernel_id, live.alice)
        assert stdout(second.execute("print(remembered)")) == "[1, 2, 3, 4]\n"
        model = live.get(f"/api/kernels/{kernel_id}", live.alice).json()
        assert model["connections"] == 1 and model["execution_state"] == "idle"
        second.close()
    finally:
        live.delete(f"/api/kernels/{kernel_id}", live.alice)


def test_rest_kernels_and_tenants(live: Live) -> None:
    assert live.get("/api").json()["version"]
    specs = live.get("/api/kernelspecs", live.alice).json()
    assert specs["default"] == "python3" and specs["kernelspecs"]["python3"]["spec"]["language"] == "python"
    assert live.get("/api/kernelspecs/python3", live.alice).status_code == 200
    assert live.get("/kernelspecs/python3/logo-64x64.png", live.alice).status_code == 404
    created = live.post("/api/kernels", live.alice, {"name": "python3"})
    assert created.status_code == 201
    model = created.json()
    assert set(model) >= {"id", "name", "last_activity", "execution_state", "connections"}
    kernel_id = model["id"]
    try:
        assert kernel_id in [k["id"] for k in live.get("/api/kernels", live.alice).json()]
        assert kernel_id not in [k["id"] for k in live.get("/api/kernels", live.bob).json()]
        # Another tenant's kernel is not found, whatever it asks.
        assert live.get(f"/api/kernels/{kernel_id}", live.bob).status_code == 404
        assert live.delete(f"/api/kernels/{kernel_id}", live.bob).status_code == 404
        assert live.post(f"/api/kernels/{kernel_id}/restart", live.bob).status_code == 404
        with pytest.raises(InvalidStatus) as refused:
            KernelSocket(live.url, kernel_id, live.bob)
        assert refused.value.response.status_code == 404
        assert live.get(f"/api/kernels/{kernel_id}").status_code == 401  # no token
        assert live.get(f"/api/kernels?token={live.alice}").status_code == 200  # the token in the query
        for bad in ("x" * 5000, "%00", "..%2F..%2Fetc"):
            answer = live.get(f"/api/kernels/{bad}", live.alice)
            assert answer.status_code == 404 and "/tmp" not in answer.text and "Traceback" not in answer.text
        assert live.post("/api/kernels", live.alice, {"name": "ruby"}).status_code == 404
        assert live.post("/api/sessions", live.alice, {}).status_code == 404  # not served, said so
    finally:
        assert live.delete(f"/api/kernels/{kernel_id}", live.alice).status_code == 204
    assert live.get(f"/api/kernels/{kernel_id}", live.alice).status_code == 404


def test_kernels_count_against_the_session_quota(live: Live) -> None:
    made = [live.post("/api/kernels", live.dave, {}) for _ in range(3)]
    try:
        assert [m.status_code for m in made] == [201, 201, 429]
        assert "session" in made[2].json()["message"]
    finally:
        for answer in made[:2]:
            live.delete(f"/api/kernels/{answer.json()['id']}", live.dave)
    assert live.post("/api/kernels", live.dave, {}).status_code == 201  # the places are free again


def test_restart_is_a_fresh_interpreter_with_the_same_files(live: Live, kernel: KernelSocket) -> None:
    kernel.execute("v = 1\nopen('kept.txt', 'w').write('file')")
    assert live.post(f"/api/kernels/{kernel.kernel_id}/restart", live.alice).status_code == 200  # type: ignore[attr-defined]
    got = kernel.execute("print(open('kept.txt').read())\nv")
    assert stdout(got) == "file\n" and of_type(got, "error")[0]["content"]["ename"] == "NameError"
    assert reply(got)["content"]["execution_count"] == 1


def test_the_other_requests_are_answered(kernel: KernelSocket) -> None:
    complete = reply(kernel.until_done(kernel.send("complete_request", {"code": "pri", "cursor_pos": 3})))
    assert "print" in complete["content"]["matches"] and complete["content"]["cursor_start"] == 0
    for code, status in (("x = 1", "complete"), ("for i in range(3):", "incomplete"), ("1 +* 2", "invalid")):
        answer = reply(kernel.until_done(kernel.send("is_complete_request", {"code": code})))
        assert answer["content"]["status"] == status
    assert reply(kernel.until_done(kernel.send("inspect_request", {"code": "x", "cursor_pos": 1})))["content"]["found"] is False
    assert reply(kernel.until_done(kernel.send("comm_info_request")))["content"] == {"status": "ok", "comms": {}}
    kernel.execute("h = 'history'")
    history = reply(kernel.until_done(kernel.send("history_request", {"hist_access_type": "tail", "n": 1})))
    assert history["content"]["history"][-1][2] == "h = 'history'"
    unknown = reply(kernel.until_done(kernel.send("frobnicate_request")))
    assert unknown["msg_type"] == "frobnicate_reply" and unknown["content"]["ename"] == "UnsupportedMessage"


def test_hostile_frames_get_errors_and_the_socket_stays(live: Live, kernel: KernelSocket) -> None:
    for frame in ("{not json", "[1, 2]", json.dumps({"content": {}}), json.dumps({"header": {"msg_id": "\x00"}}),
                  json.dumps({"header": {"msg_type": "x" * 5000, "msg_id": "1"}}), b"\x00\x01binary",
                  json.dumps({"header": {"msg_type": "kernel_info_request", "msg_id": "1"}, "channel": "nope"})):
        kernel.ws.send(frame)
        answer = kernel.recv()
        assert answer["msg_type"] == "error" and answer["content"]["ename"] == "BadMessage", frame
    nul = reply(kernel.execute("print(1)\x00"))["content"]
    assert nul["status"] == "error" and "NUL" in nul["evalue"]
    kernel.ws.send(json.dumps({"header": {"msg_type": "execute_request", "msg_id": "big"}, "content": {"code": "#" * (9 << 20)}}))
    assert "over" in kernel.recv()["content"]["evalue"]
    assert stdout(kernel.execute("print('still here')")) == "still here\n"
    other = KernelSocket(live.url, kernel.kernel_id, live.alice)  # type: ignore[attr-defined]
    other.ws.send("#" * (17 << 20))  # past the server's frame limit: that socket is closed
    with pytest.raises(ConnectionClosed):
        for _ in range(10):
            other.recv(timeout=30)
    assert stdout(kernel.execute("print('serving')")) == "serving\n"


def test_a_flood_of_cells_is_bounded(kernel: KernelSocket) -> None:
    requests = [kernel.send("execute_request", {"code": "import time\ntime.sleep(0.3)\n'done'"}) for _ in range(14)]
    replies: dict[str, dict[str, object]] = {}
    deadline = time.monotonic() + 90
    while len(replies) < len(requests) and time.monotonic() < deadline:
        message = kernel.recv()
        if message["channel"] == "shell":
            replies[message["parent_header"]["msg_id"]] = message["content"]
    statuses = [replies[r["msg_id"]].get("ename", "ok") for r in requests]
    assert statuses.count("QueueFull") >= 4 and statuses[:8] == ["ok"] * 8
    assert stdout(kernel.execute("print('after the flood')")) == "after the flood\n"


def test_a_token_that_names_nobody_and_another_origin_are_refused(live: Live, kernel: KernelSocket) -> None:
    with pytest.raises(InvalidStatus) as refused:
        KernelSocket(live.url, kernel.kernel_id, "not-a-key")  # type: ignore[attr-defined]
    assert refused.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as foreign:
        KernelSocket(live.url, kernel.kernel_id, live.alice, origin="https://evil.example")  # type: ignore[attr-defined]
    assert foreign.value.response.status_code == 403
    png = kernel.execute("print('ok')")
    assert stdout(png) == "ok\n"


def test_display_forms_are_mime_bundles(kernel: KernelSocket) -> None:
    got = kernel.execute("display({'a': 1})\n{'b': [1, 2]}")
    shown = [m["content"]["data"] for m in got if m["msg_type"] in ("display_data", "execute_result")]
    assert [s["text/plain"] for s in shown] == ["{'a': 1}", "{'b': [1, 2]}"]
    assert base64  # the PNG forms are base64 text: see the chart tests
