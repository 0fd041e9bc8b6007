"""The real E2B SDK (`e2b`, `e2b-code-interpreter`, pinned in the test extra) against a
live wasmrun with two tenants: the only change to E2B code is the two URLs and the key."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from e2b import NotFoundException, PtySize, SandboxException, TimeoutException
from e2b.exceptions import SandboxNotFoundException
from e2b_code_interpreter import Sandbox

from tests.e2benv import e2b_environment
from tests.images import on_data
from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.protocol.types import ExecutionResult
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

METRICS_KEY = "operator-metrics-key"


class Live:
    def __init__(self, server: LiveServer, alice: str, bob: str, carol: str, dave: str) -> None:
        self.server, self.alice, self.bob, self.carol, self.dave = server, alice, bob, carol, dave
        self.api = f"{server.base_url}/e2b/api"
        self.sandbox_url = f"{server.base_url}/e2b/sandbox"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data = tmp_path_factory.mktemp("e2b") / "data"
    store = TenantStore(data)
    alice, bob = store.add("alice"), store.add("bob")
    carol = store.add("carol", {"concurrent_requests": 1})
    dave = store.add("dave", {"sessions": 2})
    # Two workers (one per tenant); /metrics open to the operator's key.
    server = LiveServer(data, env=wasmrun_env() | {"WASMRUN_METRICS_KEY": METRICS_KEY})
    # What a user sets: the two URLs and the key (alice's, unless a test says otherwise).
    try:
        with e2b_environment(server, alice):
            yield Live(server, alice, bob, carol, dave)
    finally:
        server.stop()


@pytest.fixture
def sandbox(live: Live) -> Iterator[Sandbox]:
    sb = Sandbox.create()
    try:
        yield sb
    finally:
        sb.kill()


def test_run_code_keeps_state_and_streams_output(sandbox: Sandbox) -> None:
    seen: list[str] = []
    first = sandbox.run_code("x = 41\nprint('hello')\nx + 1", on_stdout=lambda m: seen.append(m.line))
    assert first.text == "42" and first.results[0].is_main_result
    assert first.logs.stdout == ["hello\n"] and seen == ["hello\n"] and first.error is None
    assert sandbox.run_code("x * 2").text == "82"
    assert sandbox.run_code("import sys\nprint('oops', file=sys.stderr)").logs.stderr == ["oops\n"]
    assert sandbox.run_code("y = 1").results == []  # no last expression, no result


def test_the_async_sdk_and_the_result_callback(live: Live) -> None:
    import asyncio

    from e2b_code_interpreter import AsyncSandbox

    async def scenario() -> tuple[str | None, list[str | None], bytes]:
        sandbox = await AsyncSandbox.create()
        try:
            seen: list[str | None] = []
            await sandbox.run_code("items = [3, 1, 2]")
            ran = await sandbox.run_code("sorted(items)", on_result=lambda r: seen.append(r.text))
            await sandbox.files.write("async.bin", b"\x00\x01")
            return ran.text, seen, await sandbox.files.read("async.bin", format="bytes")
        finally:
            await sandbox.kill()

    text, seen, content = asyncio.run(scenario())
    assert text == "[1, 2, 3]" and seen == ["[1, 2, 3]"] and content == b"\x00\x01"


def test_an_error_has_name_value_and_traceback_and_state_survives(sandbox: Sandbox) -> None:
    errors = []
    failed = sandbox.run_code("z = 5\ndef f():\n    raise KeyError('k')\nf()", on_error=errors.append)
    assert failed.error is not None and errors == [failed.error]
    assert (failed.error.name, failed.error.value) == ("KeyError", "'k'")
    assert "line 3, in f" in failed.error.traceback and "Traceback (most recent call last)" in failed.error.traceback
    assert sandbox.run_code("z").text == "5"  # a Python exception keeps state, as in a notebook


def test_an_agent_frameworks_final_answer_exception_comes_back_whole(sandbox: Sandbox) -> None:
    """smolagents ends a run by raising a BaseException subclass defined in a function,
    and reads the answer back from `error.value`."""
    code = (
        "def final_answer(x):\n"
        "    import json\n"
        "    class FinalAnswerException(BaseException):\n"
        "        def __init__(self, value):\n"
        "            self.value = value\n"
        "    raise FinalAnswerException('safe:' + json.dumps(x))\n"
        "print('working')\n"
        "final_answer({'answer': 42, 'text': 'two\\nlines: yes'})\n"
    )
    ran = sandbox.run_code(code)
    assert ran.logs.stdout == ["working\n"] and ran.error is not None
    assert ran.error.name == "FinalAnswerException"
    assert ran.error.value == 'safe:{"answer": 42, "text": "two\\nlines: yes"}'
    multi = sandbox.run_code("raise ValueError('first\\nsecond')")
    assert multi.error is not None and multi.error.value == "first\nsecond"


def test_create_takes_envs_and_metadata_and_lists_them(live: Live) -> None:
    sb = Sandbox.create(envs={"GREETING": "hi there"}, metadata={"job": "e2b-test"}, timeout=120)
    try:
        assert sb.run_code("import os\nos.environ['GREETING']").text == "'hi there'"
        info = sb.get_info()
        assert info.metadata == {"job": "e2b-test"} and info.state.value == "running"
        assert 100 <= (info.end_at - info.started_at).total_seconds() <= 121
        listed = {s.sandbox_id: s for s in Sandbox.list().next_items()}
        assert listed[sb.sandbox_id].metadata == {"job": "e2b-test"}
        sb.set_timeout(600)
        assert (Sandbox.get_info(sb.sandbox_id).end_at - info.started_at).total_seconds() > 500
    finally:
        sb.kill()
    assert sb.sandbox_id not in {s.sandbox_id for s in Sandbox.list().next_items()}
    assert not sb.is_running()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sb.sandbox_id)


def test_list_filters_by_metadata_and_state(live: Live) -> None:
    from e2b import SandboxQuery, SandboxState

    tagged = Sandbox.create(metadata={"team": "a b&c=d"})
    other = Sandbox.create(metadata={"team": "x"})
    try:
        found = Sandbox.list(query=SandboxQuery(metadata={"team": "a b&c=d"})).next_items()
        assert [s.sandbox_id for s in found] == [tagged.sandbox_id]
        other.pause()
        paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert [s.sandbox_id for s in paused] == [other.sandbox_id]
    finally:
        tagged.kill()
        other.kill()


def test_a_sandbox_ends_at_its_timeout(live: Live) -> None:
    sb = Sandbox.create(timeout=1)
    assert sb.run_code("1").text == "1"
    time.sleep(1.5)
    assert not sb.is_running()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sb.sandbox_id)


def test_an_unknown_template_is_refused_clearly(live: Live) -> None:
    with pytest.raises(SandboxException, match="not on this server"):
        Sandbox.create(template="my-custom-gpu-template")


def test_pause_resume_and_connect_keep_memory_and_files(sandbox: Sandbox) -> None:
    sandbox.run_code("kept = [1, 2, 3]\nopen('notes.txt', 'w').write('before pause')")
    sandbox.pause()
    paused = Sandbox.get_info(sandbox.sandbox_id)
    assert paused.state.value == "paused"
    assert (paused.end_at - paused.started_at).total_seconds() > 3000  # kept as long as its session, unused
    with pytest.raises(Exception, match="paused"):
        sandbox.run_code("kept")
    again = Sandbox.connect(sandbox.sandbox_id)
    assert Sandbox.get_info(sandbox.sandbox_id).state.value == "running"
    assert again.run_code("sum(kept)").text == "6"
    assert again.files.read("/home/user/notes.txt") == "before pause"


def test_fork_copies_state_and_then_evolves_apart(sandbox: Sandbox) -> None:
    sandbox.run_code("n = 10")
    [child] = sandbox.fork()
    assert isinstance(child, Sandbox)
    try:
        assert child.sandbox_id != sandbox.sandbox_id
        child.run_code("n += 1")
        assert child.run_code("n").text == "11" and sandbox.run_code("n").text == "10"
    finally:
        child.kill()


def test_files_round_trip_and_the_filesystem_calls(sandbox: Sandbox) -> None:
    payload = bytes(range(256)) * 40
    sandbox.files.write("/home/user/data/blob.bin", payload)
    assert sandbox.files.read("/home/user/data/blob.bin", format="bytes") == payload
    sandbox.files.write("report.txt", "héllo")
    assert sandbox.run_code("open('report.txt', encoding='utf-8').read()").text == "'héllo'"
    sandbox.run_code("open('made_by_code.csv', 'w').write('a,b\\n1,2\\n')")
    assert sandbox.files.read("~/made_by_code.csv") == "a,b\n1,2\n"
    names = {e.name: e for e in sandbox.files.list("/home/user")}
    assert {"data", "report.txt", "made_by_code.csv"} <= set(names) and names["data"].type.value == "dir"
    assert names["report.txt"].size == len("héllo".encode())
    assert sandbox.files.exists("report.txt") and not sandbox.files.exists("nope.txt")
    assert sandbox.files.make_dir("/home/user/new/deep") and not sandbox.files.make_dir("/home/user/new/deep")
    moved = sandbox.files.rename("report.txt", "/home/user/new/report.txt")
    assert moved.path == "/home/user/new/report.txt" and not sandbox.files.exists("report.txt")
    assert sandbox.files.get_info("new/report.txt").type.value == "file"
    sandbox.files.remove("/home/user/new")
    assert not sandbox.files.exists("new/report.txt")
    with pytest.raises(NotFoundException):
        sandbox.files.read("/home/user/missing.txt")


def test_kill_and_fork_during_a_running_cell(live: Live) -> None:
    from concurrent.futures import ThreadPoolExecutor

    sb = Sandbox.create()
    with ThreadPoolExecutor(1) as pool:
        sb.run_code("state = 'forked after the cell'")
        slow = pool.submit(sb.run_code, "import time\ntime.sleep(1.5)\nstate = 'the cell ran first'")
        time.sleep(0.5)
        [child] = sb.fork()  # waits for the cell, as the session allows one request at a time
        assert isinstance(child, Sandbox)
        assert child.run_code("state").text == "'the cell ran first'"
        child.kill()
        busy = pool.submit(sb.run_code, "time.sleep(30)")
        time.sleep(0.5)
        killed = time.monotonic()
        sb.kill()  # answered without waiting for the cell, which is interrupted, then its session closed
        assert not sb.is_running()
        slow.result()
        with pytest.raises(TimeoutException, match="killed"):  # the SDK's own, as for E2B's sandbox killed mid-cell
            busy.result()
        assert time.monotonic() - killed < 15  # not the cell's 30 s


def test_file_paths_outside_home_are_refused(sandbox: Sandbox) -> None:
    for bad in ("/etc/passwd", "/home/user/../../etc/passwd", "../secret", "/tmp/../etc/x", "a" * 5000):
        with pytest.raises(SandboxException):
            sandbox.files.read(bad)
        with pytest.raises(SandboxException):
            sandbox.files.write(bad, "x")
    linked = sandbox.run_code("import os\nos.symlink('/tmp', 'out')")  # no link out of the workspace
    assert linked.error is not None and linked.error.name == "PermissionError"


def test_contexts_are_separate_interpreters(sandbox: Sandbox) -> None:
    sandbox.run_code("where = 'default'")
    context = sandbox.create_code_context()
    assert context.cwd == "/home/user" and context.language == "python"
    assert {c.id for c in sandbox.list_code_contexts()} >= {context.id}
    missing = sandbox.run_code("where", context=context)
    assert missing.error is not None and missing.error.name == "NameError"
    sandbox.run_code("where = 'mine'", context=context)
    assert sandbox.run_code("where", context=context).text == "'mine'"
    sandbox.run_code("import os\nos.makedirs('sub')\nopen('sub/kept.txt', 'w').write('files stay')", context=context)
    sandbox.restart_code_context(context)
    assert sandbox.run_code("where", context=context).error is not None  # a fresh interpreter
    assert sandbox.run_code("open('sub/kept.txt').read()", context=context).text == "'files stay'"
    assert sandbox.run_code("[n for n in globals() if n.startswith('_wasmrun')]", context=context).text == "[]"
    sandbox.remove_code_context(context)
    assert context.id not in {c.id for c in sandbox.list_code_contexts()}
    with pytest.raises(NotFoundException):
        sandbox.run_code("1", context=context)
    assert sandbox.run_code("where").text == "'default'"
    sandbox.files.write("restart.txt", "still here")
    sandbox.restart_code_context("default")
    assert sandbox.run_code("where").error is not None
    assert sandbox.files.read("restart.txt") == "still here"


def test_a_context_with_its_own_folder(sandbox: Sandbox) -> None:
    context = sandbox.create_code_context(cwd="/home/user/project")
    sandbox.run_code("open('here.txt', 'w').write('x')", context=context)
    assert sandbox.run_code("import os\nos.getcwd()", context=context).text == "'/home/user/project'"
    assert sandbox.run_code("open('/home/user/project/here.txt').read()", context=context).text == "'x'"
    # Every cell starts there (a run's folder is not kept), and so after a restart.
    sandbox.run_code("import os\nos.chdir('/tmp')", context=context)
    assert sandbox.run_code("os.getcwd(), os.environ['HOME']", context=context).text == "('/home/user/project', '/home/user')"
    sandbox.restart_code_context(context)
    assert sandbox.run_code("import os\nos.getcwd()", context=context).text == "'/home/user/project'"


def test_home_user_is_the_working_folder_inside_too(sandbox: Sandbox) -> None:
    """The files API's /home/user is the code's /home/user (issue 47): the same files both
    ways, its working folder, HOME, Path.home() and `~` (the folder is /workspace's own,
    mounted again: tests/sandbox/test_path_semantics.py)."""
    sandbox.files.write("/home/user/data.csv", "region,v\nnorth,1\nsouth,2\n")
    read = sandbox.run_code("open('/home/user/data.csv').read()")
    assert read.error is None and read.text == repr("region,v\nnorth,1\nsouth,2\n"), read.error
    if on_data():
        summed = sandbox.run_code("import pandas as pd\nint(pd.read_csv('/home/user/data.csv')['v'].sum())")
        assert summed.error is None and summed.text == "3", summed.error
    wrote = sandbox.run_code("open('/home/user/out.txt', 'w').write('x')")
    assert wrote.error is None, wrote.error
    assert sandbox.files.read("/home/user/out.txt") == "x" == sandbox.files.read("out.txt")
    where = sandbox.run_code(
        "import os, pathlib\n[os.getcwd(), os.environ['HOME'], os.path.expanduser('~'), str(pathlib.Path.home()),"
        " open(os.path.expanduser('~/out.txt')).read(), open('out.txt').read()]"
    )
    assert where.text == repr(["/home/user"] * 4 + ["x", "x"]), where.error
    sandbox.run_code("import os\nos.chdir('/tmp')")
    assert sandbox.run_code("os.getcwd()").text == "'/home/user'"  # each cell starts at home


def test_the_workspace_quota_holds_through_home_user(sandbox: Sandbox) -> None:
    # Past the quota (64 MiB by default) through /home/user: as through /workspace.
    grow = "with open('{folder}/big', 'wb') as f:\n    f.truncate(100 << 20)\n"
    through_home = sandbox.run_code(grow.format(folder="/home/user"))
    through_workspace = sandbox.run_code(grow.format(folder="/workspace"))
    assert through_home.error is not None and through_home.error.name == "WorkspaceQuotaExceeded", through_home.error
    assert through_workspace.error is not None and through_workspace.error.name == through_home.error.name
    assert "big" not in [entry.name for entry in sandbox.files.list("/home/user")]


def test_a_refused_pip_install_says_why_and_the_cell_runs_on(sandbox: Sandbox) -> None:
    """`!pip install` is the guest shell's pip (tests/packages/test_packages_pip_command.py installs for real);
    an editable install is refused with its reason and the rest of the cell runs, as in IPython."""
    ran = sandbox.run_code("!pip install -e .\n1 + 1")
    assert ran.text == "2"
    assert any("editable" in line for line in ran.logs.stderr), ran.logs.stderr


def test_pty_is_refused_and_commands_run(sandbox: Sandbox) -> None:
    """Commands run through the guest's shell (tests/e2b/test_e2b_commands.py); PTY stays refused."""
    assert sandbox.commands.run("echo hi").stdout == "hi\n"
    with pytest.raises(SandboxException, match="PTY is not available"):
        sandbox.pty.create(PtySize(rows=24, cols=80))
    # A cell's `!cmd` line runs in the same shell, in the sandbox's working folder.
    sandbox.files.write("listed-by-ls.txt", "x")
    shell = sandbox.run_code("!ls")
    assert shell.error is None, shell.error
    assert "listed-by-ls.txt" in "".join(shell.logs.stdout).split(), shell.logs


def test_a_timeout_stops_the_wait_and_the_sandbox_serves_on(sandbox: Sandbox) -> None:
    with pytest.raises(TimeoutException):
        sandbox.run_code("import time\ntime.sleep(3)", timeout=1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the cell ends in the sandbox; the next one queues behind it
        if sandbox.run_code("'after'").text == "'after'":
            break
    else:
        raise AssertionError("the sandbox did not serve after a timed-out cell")


def test_a_sandbox_of_another_tenant_does_not_exist(live: Live, sandbox: Sandbox) -> None:
    assert sandbox.sandbox_id not in {s.sandbox_id for s in Sandbox.list(api_key=live.bob).next_items()}
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sandbox.sandbox_id, api_key=live.bob)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox.sandbox_id, api_key=live.bob)
    assert Sandbox.kill(sandbox.sandbox_id, api_key=live.bob) is False
    assert sandbox.run_code("1").text == "1"
    theirs = Sandbox.create(api_key=live.bob)
    try:
        assert theirs.run_code("'bob'").text == "'bob'"
        assert theirs.sandbox_id not in {s.sandbox_id for s in Sandbox.list().next_items()}
    finally:
        theirs.kill()


def test_a_tenants_concurrent_requests_hold_for_the_e2b_front(live: Live) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from e2b import RateLimitException

    sandbox = Sandbox.create(api_key=live.carol)
    try:
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(sandbox.run_code, "import time\ntime.sleep(2)\n'slow'")
            time.sleep(0.8)  # the cell's request is in flight, its stream open
            with pytest.raises(RateLimitException):
                Sandbox.list(api_key=live.carol).next_items()
            assert slow.result().text == "'slow'"
        assert Sandbox.list(api_key=live.carol).next_items()[0].sandbox_id == sandbox.sandbox_id
    finally:
        sandbox.kill()


def test_the_fronts_calls_are_metered_per_tenant(live: Live) -> None:
    def runs(tenant: str) -> float:
        text = httpx2.get(f"{live.server.base_url}/metrics", headers={"authorization": f"Bearer {METRICS_KEY}"},
                          timeout=30).text
        line = f'wasmrun_runs_total{{method="run_code",status="completed",tenant="{tenant}"}} '
        return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(line))

    before = runs("bob")
    sandbox = Sandbox.create(api_key=live.bob)
    try:
        sandbox.run_code("1")
        sandbox.files.write("m.txt", "metered")
    finally:
        sandbox.kill()
    # Making its home the session's folder (control.start_in), the cell and the file write: runs of bob's.
    assert runs("bob") == before + 3


def test_a_wrong_or_missing_key_is_refused(live: Live) -> None:
    from e2b import AuthenticationException

    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_not_a_key_of_this_server")


@pytest.mark.images("data")  # pandas
def test_pandas_on_the_data_image(sandbox: Sandbox) -> None:
    sandbox.run_code("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': [4.0, 5.0, 6.5]})")
    assert sandbox.run_code("int(df['a'].sum())").text == "6"
    assert sandbox.run_code("float(df['b'].mean())").text == "5.166666666666667"


@pytest.mark.images("data")  # matplotlib
def test_a_matplotlib_chart_is_a_png_result(sandbox: Sandbox) -> None:
    import base64

    charts = []
    ran = sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()",
                           on_result=charts.append)
    pngs = [r.png for r in ran.results if r.png]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(b"\x89PNG") and charts == ran.results


@pytest.mark.images("data")  # pandas
@pytest.mark.skipif("displays" not in ExecutionResult.__struct_fields__, reason="display() needs display results")
def test_display_and_a_dataframe_have_their_forms(sandbox: Sandbox) -> None:
    ran = sandbox.run_code("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\ndisplay('<b>x</b>')\ndf")
    assert ran.results[-1].is_main_result and ran.results[-1].html and "<table" in ran.results[-1].html


@pytest.mark.images("data")  # smolagents' executor imports numpy and PIL in the sandbox
def test_smolagents_e2b_executor_runs_unchanged(live: Live) -> None:
    """An agent framework built on the SDK: smolagents' E2BExecutor sends its tools (with a
    `!pip install` line for their imports), variables, steps and the final answer."""
    smolagents = pytest.importorskip("smolagents")
    from smolagents.default_tools import FinalAnswerTool
    from smolagents.monitoring import AgentLogger, LogLevel
    from smolagents.remote_executors import E2BExecutor

    tool = smolagents.tool  # spelled `@tool`: smolagents rewrites that decorator when it sends the source

    @tool
    def double(x: int) -> int:
        """Doubles a number.

        Args:
            x: the number to double
        """
        return 2 * x

    executor = E2BExecutor(additional_imports=["statistics"], logger=AgentLogger(level=LogLevel.OFF))
    try:
        executor.send_tools({"final_answer": FinalAnswerTool(), "double": double})
        executor.send_variables({"start": 21})
        step = executor("y = double(start)\nprint('y is', y)\ny")
        assert (step.output, step.logs, step.is_final_answer) == ("42", "y is 42\n", False)
        done = executor("final_answer({'result': y})")
        assert done.is_final_answer and done.output == {"result": 42}
        with pytest.raises(smolagents.utils.AgentError, match="ZeroDivisionError"):
            executor("1 / 0")
    finally:
        executor.cleanup()


# -- hostile requests straight at the front ---------------------------------------------------


def test_hostile_control_plane_requests(live: Live, sandbox: Sandbox) -> None:
    key = {"X-API-KEY": live.alice}

    def post(path: str, **kw: object) -> httpx2.Response:
        return httpx2.post(f"{live.api}{path}", headers={**key, **kw.pop("headers", {})}, timeout=30, **kw)  # type: ignore[arg-type]

    assert post("/sandboxes", content=b"{not json").status_code == 400
    assert post("/sandboxes", content=b"[1, 2]").status_code == 400
    assert post("/sandboxes", content=b"[" * 100_000 + b"]" * 100_000).status_code in (400, 413)
    assert post("/sandboxes", content=b"x" * (2 * 1024 * 1024)).status_code == 413
    for body in ({"templateID": 7}, {"timeout": "NaN"}, {"timeout": 10**30}, {"timeout": True}, {"timeout": -1},
                 {"metadata": {"k": 1}}, {"metadata": {"k": "v\u0000"}}, {"envVars": ["x"]},
                 {"metadata": {str(i): "v" for i in range(1000)}}):
        answer = post("/sandboxes", json=body)
        assert answer.status_code == 400, body
        assert set(answer.json()) == {"code", "message"}
    for bad_id in ("x" * 5000, "..%2F..%2Fetc", "%00", "é", sandbox.sandbox_id.upper()):
        got = httpx2.get(f"{live.api}/sandboxes/{bad_id}", headers=key, timeout=30)
        assert got.status_code == 404, bad_id
    assert httpx2.get(f"{live.api}/sandboxes/{sandbox.sandbox_id}", timeout=30).status_code == 401
    assert post("/templates").status_code == 404
    assert sandbox.run_code("'still serving'").text == "'still serving'"


def test_hostile_sandbox_requests(live: Live, sandbox: Sandbox) -> None:
    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49999"}
    url = live.sandbox_url

    def post(path: str, **kw: object) -> httpx2.Response:
        return httpx2.post(f"{url}{path}", headers={**headers, **kw.pop("headers", {})}, timeout=30, **kw)  # type: ignore[arg-type]

    assert post("/execute", json={"code": "1"}, headers={"E2b-Sandbox-Id": "f" * 32}).status_code == 502
    assert post("/execute", json={"code": "1"}, headers={"E2b-Sandbox-Id": "x" * 5000}).status_code == 502
    assert post("/execute", json={"code": "1"}, headers={"X-Access-Token": "wrong"}).status_code == 401
    assert post("/execute", json={"code": 1}).status_code == 400
    assert post("/execute", json={"code": "1\x00"}).status_code == 400
    assert post("/execute", json={"code": "1", "language": "r"}).status_code == 400
    assert post("/execute", json={"code": "1", "context_id": "../../x"}).status_code == 404
    assert post("/execute", json={"code": "1", "env_vars": {"A": 1}}).status_code == 400
    assert post("/execute", content=b"\xff\xfe not json").status_code == 400
    assert post("/execute", content=b'{"code": "\\ud800"}').status_code in (200, 400)
    assert post("/execute", content=b"x" * (17 * 1024 * 1024)).status_code == 413
    assert post("/contexts/..%2F..%2Fetc/restart").status_code == 404
    assert httpx2.delete(f"{url}/contexts/default", headers=headers, timeout=30).status_code == 400
    assert post("/contexts", json={"cwd": "/etc"}).status_code == 400
    assert post("/filesystem.Filesystem/Stat", json={"path": "/home/user/\u0000"}).json()["code"] == "invalid_argument"
    assert post("/filesystem.Filesystem/ListDir", json={"path": "/home/user", "depth": 10**9}).status_code == 400
    assert post("/filesystem.Filesystem/Remove", json={"path": "/home/user"}).status_code == 400
    assert post("/filesystem.Filesystem/WatchDir", json={"path": "/home/user"}).status_code == 501
    got = httpx2.get(f"{url}/files", params={"path": "/proc/self/environ"}, headers=headers, timeout=30)
    assert got.status_code == 400 and "outside" in got.json()["message"]
    assert sandbox.run_code("'still serving'").text == "'still serving'"


def test_refused_requests_are_clear_and_leave_no_session_behind(live: Live) -> None:
    """Dave may hold two sessions: his sandbox is one, and after every refusal below a
    context (the second) can still be made, so none of them kept a session open."""
    made = httpx2.post(f"{live.api}/sandboxes", headers={"X-API-KEY": live.dave}, json={}, timeout=60)
    assert made.status_code == 201
    headers = {"E2b-Sandbox-Id": made.json()["sandboxID"], "E2b-Sandbox-Port": "49999"}

    def post(path: str, **kw: object) -> httpx2.Response:
        return httpx2.post(f"{live.sandbox_url}{path}", headers=headers, timeout=60, **kw)  # type: ignore[arg-type]

    try:
        for cwd in ("/etc", "/home/user/../../etc", "x" * 5000, "/home/user/\x00"):
            refused = post("/contexts", json={"cwd": cwd})
            assert refused.status_code == 400 and "path" in refused.text, cwd
        # A string's bytes that are not UTF-8: the body is refused, not a server error.
        assert post("/execute", content=b'{"code": "\xff\xfe"}').status_code == 400
        for envs in ({"A": "x\x00y"}, {"": "x"}, {"A=B": "x"}, ["A"]):
            refused = post("/execute", json={"code": "1", "env_vars": envs})
            assert refused.status_code == 400 and "env_vars" in refused.text, envs
            created = httpx2.post(f"{live.api}/sandboxes", headers={"X-API-KEY": live.dave},
                                  json={"envVars": envs}, timeout=60)
            assert created.status_code == 400 and "envVars" in created.json()["message"], envs
        # A name the sandbox's filesystem refuses: 400 saying why, not a server error.
        too_long = post("/files", params={"path": "a" * 300}, content=b"x")
        assert too_long.status_code == 400 and "too long" in too_long.json()["message"], too_long.text
        context = post("/contexts", json={"cwd": "/home/user/sub"})
        assert context.status_code == 200, context.text
        ran = post("/execute", json={"code": "import os; os.getcwd()", "context_id": context.json()["id"]})
        assert "/home/user/sub" in ran.text
    finally:
        httpx2.delete(f"{live.api}/sandboxes/{headers['E2b-Sandbox-Id']}", headers={"X-API-KEY": live.dave}, timeout=60)


def test_env_urls_alone_move_code_to_wasmrun(live: Live, tmp_path: Path) -> None:
    """A script written for E2B, unchanged, in a process with only the variables set."""
    import subprocess
    import sys

    script = tmp_path / "agent.py"
    script.write_text(
        "from e2b_code_interpreter import Sandbox\n"
        "with Sandbox.create() as sandbox:\n"
        "    sandbox.run_code('x = 1')\n"
        "    execution = sandbox.run_code('x += 1; x')\n"
        "    print(execution.text)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WASMRUN_")}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
