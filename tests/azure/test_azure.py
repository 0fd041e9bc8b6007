"""The Azure Container Apps dynamic-sessions front (wasmrun/azure, docs/azure.md) driven by
the service's own clients from PyPI, pinned in the test extra: LangChain's
`SessionsPythonREPLTool` and LlamaIndex's `AzureCodeInterpreterToolSpec`, pointed at a live
server with two tenants by the two lines a user changes (the pool endpoint, the token)."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.liveserver import LiveServer
from wasmrun.tenants.store import TenantStore

with warnings.catch_warnings():  # the package says its successor is langchain-azure-compute
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_azure_dynamic_sessions import SessionsPythonREPLTool
from llama_index.tools.azure_code_interpreter import AzureCodeInterpreterToolSpec

MiB = 1024 * 1024


class Live:
    def __init__(self, server: LiveServer, alice: str, bob: str) -> None:
        self.server, self.alice, self.bob = server, alice, bob
        self.pool = f"{server.base_url}/azure/pools/agents"

    def tool(self, key: str | None = None, session_id: str | None = None) -> SessionsPythonREPLTool:
        token = key or self.alice
        extra = {"session_id": session_id} if session_id else {}
        return SessionsPythonREPLTool(pool_management_endpoint=self.pool, access_token_provider=lambda: token, **extra)

    def spec(self, key: str | None = None, **options: Any) -> AzureCodeInterpreterToolSpec:
        spec = AzureCodeInterpreterToolSpec(pool_management_endpoint=self.pool, **options)
        token = key or self.alice
        spec.access_token_provider = lambda: token  # in place of DefaultAzureCredential's
        return spec

    def post(self, path: str, identifier: str = "raw", key: str | None = None, headers: dict[str, str] | None = None,
             **kw: Any) -> requests.Response:
        sent = {"Authorization": f"Bearer {key or self.alice}", **(headers or {})}
        return requests.post(f"{self.pool}/{path}", params={"identifier": identifier, "api-version": "2024-02-02-preview"},
                             headers=sent, timeout=60, **kw)

    def get(self, path: str, identifier: str = "raw", key: str | None = None) -> requests.Response:
        return requests.get(f"{self.pool}/{path}", params={"identifier": identifier},
                            headers={"Authorization": f"Bearer {key or self.alice}"}, timeout=60)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data = tmp_path_factory.mktemp("azure") / "data"
    store = TenantStore(data)
    # Each client's tool is an identifier of its own, each a session: more than the default 8 at once.
    alice, bob = store.add("alice", {"sessions": 64}), store.add("bob")
    server = LiveServer(data)
    try:
        yield Live(server, alice, bob)
    finally:
        server.stop()


def code(text: str) -> dict[str, Any]:
    return {"properties": {"codeInputType": "inline", "executionType": "synchronous", "code": text}}


def test_langchain_executes_with_state_across_calls(live: Live) -> None:
    tool = live.tool()
    first = tool.execute("x = 6\nprint('hello')\nx * 7")
    assert first["status"] == "Success" and first["result"] == 42 and first["stdout"] == "hello\n"
    assert first["stderr"] == "" and isinstance(first["executionTimeInMillis"], int)
    content, artifact = tool._run("x + 1")  # what the agent's model reads: result, stdout, stderr
    assert '"result": 7' in content and artifact["status"] == "Success"
    assert tool.execute("'text'")["result"] == "'text'"
    assert tool.execute("import sys\nprint('err', file=sys.stderr)")["stderr"] == "err\n"


def test_an_error_is_failure_with_its_traceback_on_stderr(live: Live) -> None:
    failed = live.tool().execute("def f():\n    return 1 / 0\nf()")
    assert failed["status"] == "Failure" and failed["result"] == ""
    assert failed["stderr"].startswith("Traceback (most recent call last):")
    assert "ZeroDivisionError: division by zero" in failed["stderr"]


def test_shell_lines_run_in_the_session_as_its_kernel_would(live: Live) -> None:
    tool = live.tool()
    tool.upload_file(data=io.BytesIO(b"abc"), remote_file_path="seen.txt")
    ran = tool.execute("x = 1\n!echo in $PWD\n!ls\nprint(x)\nx + 1")
    assert (ran["status"], ran["stdout"], ran["result"]) == ("Success", "in /mnt/data\nseen.txt\n1\n", 2)
    assert tool.execute("!false\n'goes on'")["result"] == "'goes on'"  # an exit status is not an error
    pip = tool.execute("!pip install -e .\nprint('rest')")  # refused with its reason; the rest runs
    assert pip["status"] == "Success" and pip["stdout"] == "rest\n" and "editable" in pip["stderr"]
    magic = tool.execute("%time 1")
    assert magic["status"] == "Failure" and "magics" in magic["stderr"]
    stopped = tool.execute("1/0\n!echo never")
    assert stopped["status"] == "Failure" and "never" not in stopped["stdout"]


@pytest.mark.images("stdlib", "data")  # /mnt/data is mounted by each image's own code
def test_langchain_files_are_the_sessions_mnt_data(live: Live, tmp_path: Path) -> None:
    tool = live.tool()
    meta = tool.upload_file(data=io.BytesIO(b"a,b\n1,2\n3,4\n"), remote_file_path="data.csv")
    assert (meta.filename, meta.size_in_bytes, meta.full_path) == ("data.csv", 12, "/mnt/data/data.csv")
    ran = tool.execute("import os\nprint(os.getcwd())\nprint(open('/mnt/data/data.csv').read() == open('data.csv').read())")
    assert ran["stdout"] == "/mnt/data\nTrue\n", ran
    tool.execute("os.makedirs('out', exist_ok=True)\nopen('/mnt/data/out/r.txt', 'w').write('made in the session')")
    assert sorted((f.filename, f.size_in_bytes) for f in tool.list_files()) == [("data.csv", 12), ("out/r.txt", 19)]
    assert tool.download_file(remote_file_path="out/r.txt").read() == b"made in the session"
    local = tmp_path / "copy.csv"
    tool.download_file(remote_file_path="data.csv", local_file_path=str(local))
    assert local.read_bytes() == b"a,b\n1,2\n3,4\n"
    source = tmp_path / "notes.txt"
    source.write_text("from disk")
    assert tool.upload_file(local_file_path=str(source)).filename == "notes.txt"
    assert tool.execute("open('notes.txt').read()")["result"] == "'from disk'"


def test_llamaindex_code_interpreter_and_files(live: Live, tmp_path: Path) -> None:
    spec = live.spec()
    answer = spec.code_interpreter("total = sum(range(10))\ntotal")
    assert answer["properties"]["status"] == "Success" and answer["properties"]["result"] == 45
    assert spec.code_interpreter("total * 2")["properties"]["result"] == 90  # the same session
    source = tmp_path / "table.txt"
    source.write_bytes(b"\x00\x01binary\xff")
    uploaded = spec.upload_file(local_file_path=str(source))
    assert [(m.filename, m.size_in_bytes, m.file_full_path) for m in uploaded] == [
        ("table.txt", 9, "/mnt/data/table.txt")]
    assert [m.file_full_path for m in spec.list_files()] == ["/mnt/data/table.txt"]
    assert spec.download_file_to_local("/mnt/data/table.txt").read() == b"\x00\x01binary\xff"
    tools = {t.metadata.name for t in spec.to_tool_list()}
    assert tools == {"code_interpreter", "list_files"}


def test_the_same_identifier_is_another_session_for_another_tenant(live: Live) -> None:
    alices, bobs = live.tool(session_id="shared-name"), live.tool(live.bob, session_id="shared-name")
    alices.execute("secret = 'alice only'")
    alices.upload_file(data=io.BytesIO(b"private"), remote_file_path="alice.txt")
    peek = bobs.execute("secret")
    assert peek["status"] == "Failure" and "NameError" in peek["stderr"]
    assert bobs.list_files() == []
    with pytest.raises(requests.HTTPError) as gone:
        bobs.download_file(remote_file_path="alice.txt")
    assert gone.value.response.status_code == 404
    assert alices.execute("secret")["result"] == "'alice only'"


def test_a_wrong_key_is_401(live: Live) -> None:
    with pytest.raises(requests.HTTPError) as refused:
        live.tool("not-a-key").execute("1")
    assert refused.value.response.status_code == 401
    assert refused.value.response.json()["error"]["code"] == "Unauthorized"


def test_deleting_the_session_ends_it(live: Live) -> None:
    live.post("code/execute", "to-delete", json=code("kept = 1"))
    gone = requests.delete(f"{live.pool}/session", params={"identifier": "to-delete"},
                           headers={"Authorization": f"Bearer {live.alice}"}, timeout=30)
    assert gone.status_code == 204
    after = live.post("code/execute", "to-delete", json=code("kept")).json()["properties"]
    assert after["status"] == "Failure" and "NameError" in after["stderr"]
    with live.tool() as tool:  # LangChain's close() deletes its session and takes a new id
        old = tool.session_id
    assert tool.session_id != old


def test_deleting_a_busy_session_stops_its_run_and_its_queued_calls(live: Live) -> None:
    import threading
    import time

    answers: dict[str, requests.Response] = {}

    def send(name: str, text: str) -> None:
        answers[name] = live.post("code/execute", "del-busy", json=code(text))

    live.post("code/execute", "del-busy", json=code("ready = 1"))
    running = threading.Thread(target=send, args=("running", "import time\ntime.sleep(5)\n'done'"))
    running.start()
    time.sleep(0.5)
    queued = threading.Thread(target=send, args=("queued", "'second'"))
    queued.start()
    time.sleep(0.3)
    deleted = requests.delete(f"{live.pool}/session", params={"identifier": "del-busy"},
                              headers={"Authorization": f"Bearer {live.alice}"}, timeout=30)
    running.join(30)
    queued.join(30)
    assert deleted.status_code == 204
    assert answers["running"].json()["properties"]["status"] == "Failure"  # interrupted, not run to its end
    assert "deleted" in _refused(answers["queued"], 404)
    fresh = live.post("code/execute", "del-busy", json=code("'ready' in dir()")).json()["properties"]
    assert fresh["result"] == "False"


def _refused(response: requests.Response, status: int) -> str:
    assert response.status_code == status, response.text
    message: str = response.json()["error"]["message"]
    assert "Traceback" not in message and "/work" not in message and "/tmp/" not in message
    return message


def test_hostile_execute_bodies_are_clear_errors(live: Live) -> None:
    assert "JSON" in _refused(live.post("code/execute", data=b"{not json"), 400)
    assert "properties" in _refused(live.post("code/execute", json={"code": "1"}), 400)
    assert "JSON object" in _refused(live.post("code/execute", json=[1, 2]), 400)
    bad = code("1")
    bad["properties"]["executionType"] = "asynchronous"
    assert "synchronous" in _refused(live.post("code/execute", json=bad), 400)
    assert "NUL" in _refused(live.post("code/execute", json=code("x\x00")), 400)
    assert "over" in _refused(live.post("code/execute", data=b"x" * (17 * MiB)), 413)
    assert live.post("code/execute", json=code("2 + 2")).json()["properties"]["result"] == 4  # still serving


def test_timeout_in_seconds_is_the_runs_time_limit(live: Live) -> None:
    body = code("import time\ntime.sleep(5)")
    body["properties"]["timeoutInSeconds"] = 1
    stopped = live.post("code/execute", "timed", json=body).json()["properties"]
    assert stopped["status"] == "Failure" and "Timeout" in stopped["stderr"], stopped["stderr"]
    assert stopped["executionTimeInMillis"] < 4000
    body["properties"]["timeoutInSeconds"] = "soon"
    assert "timeoutInSeconds" in _refused(live.post("code/execute", "timed", json=body), 400)


def test_an_upload_without_a_file_name_is_refused(live: Live) -> None:
    with pytest.raises(requests.HTTPError) as refused:  # LangChain's upload_file(data=...) with no remote_file_path
        live.tool().upload_file(data=io.BytesIO(b"x"))
    assert refused.value.response.status_code == 400
    assert "no file" in refused.value.response.json()["error"]["message"]


def test_hostile_identifiers_and_pools(live: Live) -> None:
    assert "identifier" in _refused(live.post("code/execute", "x" * 5000, json=code("1")), 400)
    assert "identifier" in _refused(live.post("code/execute", "two words", json=code("1")), 400)
    missing = requests.post(f"{live.pool}/code/execute", json=code("1"), timeout=30,
                            headers={"Authorization": f"Bearer {live.alice}"})
    assert "identifier" in _refused(missing, 400)
    odd_pool = requests.post(f"{live.server.base_url}/azure/pools/{'p' * 100}/code/execute", json=code("1"),
                             params={"identifier": "a"}, headers={"Authorization": f"Bearer {live.alice}"}, timeout=30)
    _refused(odd_pool, 404)
    assert "not served" in _refused(live.post("code/executions"), 404)


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/passwd", "a/../../b", "x" * 5000, "/mnt/data/../etc"])
def test_path_tricks_in_file_names_are_refused(live: Live, name: str) -> None:
    upload = live.post("files/upload", "paths", files=[("file", (name, io.BytesIO(b"x"), "text/plain"))])
    _refused(upload, 400)
    quoted = requests.utils.quote(name, safe="")
    _refused(live.get(f"files/content/{quoted}", "paths"), 400)


def test_a_nul_in_a_file_name_and_a_file_not_there(live: Live) -> None:
    _refused(live.get("files/content/a%00b", "paths"), 400)
    assert "no such file" in _refused(live.get("files/content/nothing.txt", "paths"), 404)
    body = (b'--B\r\nContent-Disposition: form-data; name="file"; filename="a\x00b"\r\n\r\nx\r\n--B--\r\n')
    multipart = {"Content-Type": "multipart/form-data; boundary=B"}
    _refused(live.post("files/upload", "paths", data=body, headers=multipart), 400)
    _refused(live.post("files/upload", "paths", data=b"--B\r\nnot a part", headers=multipart), 400)


def test_a_50_mib_upload_is_streamed_to_disk_and_comes_back_equal(live: Live) -> None:
    import hashlib
    import os

    from tests.e2b.test_e2b_files import rss_growth

    data = os.urandom(50 * MiB)
    tool = live.tool()
    growth = rss_growth(live.server.process.pid, lambda: tool.upload_file(data=io.BytesIO(data), remote_file_path="big.bin"))
    assert growth < 150 * MiB, f"the server grew {growth / MiB:.0f} MiB for a 50 MiB upload"
    assert tool.execute("import os\nos.path.getsize('/mnt/data/big.bin')")["result"] == 50 * MiB
    back = tool.download_file(remote_file_path="big.bin").read()
    assert hashlib.sha256(back).digest() == hashlib.sha256(data).digest()


def test_more_than_100_files_in_one_upload_are_refused(live: Live) -> None:
    parts = [("file", (f"f{i}.txt", io.BytesIO(b"x"), "text/plain")) for i in range(101)]
    assert "multipart" in _refused(live.post("files/upload", "many", files=parts), 400)
    assert live.get("files", "many").json()["value"] == []


def test_an_upload_over_the_workspace_quota_is_refused(live: Live) -> None:
    huge = live.post("files/upload", "quota", files=[("file", ("big.bin", io.BytesIO(b"\0" * (70 * MiB))))])
    assert "quota" in _refused(huge, 507)
    listed = live.get("files", "quota")
    assert listed.json()["value"] == [], listed.text


def test_concurrent_calls_on_one_identifier_run_one_at_a_time(live: Live) -> None:
    live.post("code/execute", "busy", json=code("n = 0"))
    step = code("import time\nm = n\ntime.sleep(0.05)\nn = m + 1\nn")
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: live.post("code/execute", "busy", json=step), range(6)))
    assert [(a.status_code, a.json().get("properties", {}).get("status")) for a in answers] == [(200, "Success")] * 6, \
        answers[0].text
    assert sorted(a.json()["properties"]["result"] for a in answers) == [1, 2, 3, 4, 5, 6]


@pytest.mark.images("data")
def test_a_pandas_table_on_the_data_image(live: Live) -> None:
    tool = live.tool()
    tool.upload_file(data=io.BytesIO(b"city,sales\nOslo,3\nLima,5\nOslo,4\n"), remote_file_path="sales.csv")
    ran = tool.execute("import pandas as pd\ndf = pd.read_csv('/mnt/data/sales.csv')\ndf.groupby('city').sales.sum()")
    assert ran["status"] == "Success", ran
    assert "Lima    5" in ran["result"] and "Oslo    7" in ran["result"]
    assert tool.execute("int(df.sales.sum())")["result"] == 12


@pytest.mark.images("data")
def test_a_matplotlib_chart_is_the_services_image_result(live: Live, tmp_path: Path) -> None:
    chart = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('t')\nplt.show()"
    ran = live.tool().execute(chart)
    result = ran["result"]
    assert ran["status"] == "Success" and result["type"] == "image" and result["format"] == "png"
    assert base64.b64decode(result["base64_data"]).startswith(b"\x89PNG")
    content, _ = live.tool()._run(chart)  # LangChain leaves the picture's bytes out of the model's text
    assert '"type": "image"' in content and "base64_data" not in content
    saved = live.spec(local_save_path=str(tmp_path)).code_interpreter(chart)  # LlamaIndex saves it
    assert saved["properties"]["result"]["saved_to_local_path"] is True
    assert [p.read_bytes()[:4] for p in tmp_path.glob("*.png")] == [b"\x89PNG"]


class _Credential:
    """AutoGen's `credential`: its get_token(scope) gives the tenant key as the token."""

    def __init__(self, key: str) -> None:
        self.key = key

    def get_token(self, *scopes: str, **options: Any) -> Any:
        import time

        from azure.core.credentials import AccessToken

        return AccessToken(self.key, int(time.time()) + 3600)


def _autogen(live: Live) -> Any:
    from autogen_ext.code_executors.azure import ACADynamicSessionsCodeExecutor

    return ACADynamicSessionsCodeExecutor(pool_management_endpoint=live.pool, credential=_Credential(live.alice))


@pytest.mark.xfail(strict=True, reason=(
    "AutoGen's executor lists the sandbox's packages with pkg_resources (setuptools) before its first"
    " block; the guest has no setuptools, and setuptools' pkg_resources needs os.getuid, absent on WASI"
))
def test_autogen_executor_first_call_needs_pkg_resources(live: Live) -> None:
    import asyncio

    from autogen_core import CancellationToken
    from autogen_core.code_executor import CodeBlock

    executor = _autogen(live)
    ran = asyncio.run(executor.execute_code_blocks([CodeBlock(code="print(1)", language="python")], CancellationToken()))
    assert ran.exit_code == 0


def test_autogen_executor_runs_blocks_and_moves_files(live: Live) -> None:
    """AutoGen 0.7.5's ACADynamicSessionsCodeExecutor (pinned with the Jupyter door's extra)
    once its package probe is answered for it: state, an error's exit code, files both ways."""
    import asyncio

    from autogen_core import CancellationToken
    from autogen_core.code_executor import CodeBlock

    executor = _autogen(live)
    executor._available_packages = set()  # its pkg_resources probe (the xfail above), answered
    token = CancellationToken()

    async def steps() -> list[Any]:
        first = await executor.execute_code_blocks([CodeBlock(code="x = 20\nprint(x + 1)", language="python")], token)
        failed = await executor.execute_code_blocks([CodeBlock(code="print(x * 2)\n1/0", language="python")], token)
        (executor.work_dir / "in.txt").write_text("uploaded")
        await executor.upload_files(["in.txt"], token)
        read = await executor.execute_code_blocks([CodeBlock(
            code="print(open('in.txt').read())\nn = open('out.txt', 'w').write('back')", language="python")], token)
        await executor.download_files(["out.txt"], token)
        return [first, failed, read, await executor.get_file_list(token)]

    first, failed, read, listed = asyncio.run(steps())
    assert (first.exit_code, first.output) == (0, "21\n")
    assert failed.exit_code == 1 and "ZeroDivisionError" in failed.output and "40\n" in failed.output
    assert (read.exit_code, read.output) == (0, "uploaded\n")
    assert (executor.work_dir / "out.txt").read_text() == "back" and sorted(listed) == ["in.txt", "out.txt"]
