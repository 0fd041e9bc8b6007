"""Sessions over HTTP against real servers: state, files, rollback, fork, tenants,
caps, expiry and a restart on the same data dir (docs/sessions.md)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from liveserver import LiveServer, wasmrun_env

from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

Call = Callable[..., dict[str, Any]]


def _caller(server: LiveServer, key: str) -> Call:
    def call(method: str, **params: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = httpx2.post(
            server.endpoint, json=body, headers={"authorization": f"Bearer {key}"}, timeout=120
        )
        answer: dict[str, Any] = response.json()
        return answer

    return call


def _result(answer: dict[str, Any]) -> Any:
    assert "result" in answer, answer
    return answer["result"]


def _run(call: Call, session_id: str, code: str, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = _result(call("run_code", language="python", code=code, session_id=session_id, **params))
    return result


def _new(call: Call, **params: Any) -> str:
    session_id: str = _result(call("create_session", language="python", **params))["session_id"]
    return session_id


class Servers:
    def __init__(self, data: Path) -> None:
        self.data = data
        store = TenantStore(data)
        self.alice_key = store.add("alice", {"sessions": 50})  # the module's tests keep theirs open
        self.bob_key = store.add("bob", {"sessions": 2})
        self.metrics_key = secrets.token_urlsafe(32)
        self.server = LiveServer(data, env={**wasmrun_env(), "WASMRUN_METRICS_KEY": self.metrics_key})
        self.alice = _caller(self.server, self.alice_key)
        self.bob = _caller(self.server, self.bob_key)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    found = Servers(tmp_path_factory.mktemp("sessions") / "data")
    try:
        yield found
    finally:
        found.server.stop()


def test_globals_imports_and_files_carry_over(servers: Servers) -> None:
    call = servers.alice
    sid = _new(call)
    assert len(sid) >= 32 and sid.startswith("ses_")
    first = _run(call, sid, "import json\nx = 41\nopen('/workspace/a.txt', 'w').write('kept')\n"
                            "open('/tmp/t.txt', 'w').write('tmp')\nx")
    assert first["status"] == "completed" and first["output"] == 41 and first["session_rolled_back"] is False
    second = _run(call, sid, "x += 1\n[x, json.dumps([1]), open('/workspace/a.txt').read(), open('/tmp/t.txt').read()]")
    assert second["output"] == [42, "[1]", "kept", "tmp"]
    # main(args) as run_code has it; a later plain script is not mistaken for main
    assert _run(call, sid, "def main(args):\n    return x + args['n']\n", args={"n": 1})["output"] == 43
    assert _run(call, sid, "x * 2")["output"] == 84
    # a Python exception keeps what ran before it, as a notebook does
    failed = _run(call, sid, "y = 'before'\nraise ValueError('boom')")
    assert failed["status"] == "failed" and failed["error"]["type"] == "ValueError"
    assert failed["session_rolled_back"] is False
    assert _run(call, sid, "y")["output"] == "before"
    # a plain run_code beside it still starts fresh
    plain = _result(call("run_code", language="python", code="globals().get('x')"))
    assert plain["output"] is None and "session_rolled_back" not in plain
    listed = _result(call("list_sessions"))["sessions"]
    mine = next(s for s in listed if s["session_id"] == sid)
    assert mine["runs"] == 6 and mine["image_bytes"] > 0
    # each file counts at its size or its blocks where more (as the workspace quota): a block each
    assert len("kept") + len("tmp") <= mine["files_bytes"] <= 2 * 65536


def test_every_run_starts_in_the_workspace_wherever_the_last_one_went(servers: Servers) -> None:
    """A run moves to /workspace only when it is not there already (the guest's
    _to_workspace); a session's memory keeps where its last run went."""
    call = servers.alice
    sid = _new(call)
    moved = _run(call, sid, "import os\nos.chdir('/tmp')\nopen('here.txt', 'w').write('t')\nos.getcwd()")
    assert moved["output"] == "/tmp"
    back = _run(call, sid, "open('here.txt', 'w').write('w')\n[os.getcwd(), open('/tmp/here.txt').read()]")
    assert back["output"] == ["/workspace", "t"]
    assert _run(call, sid, "open('/workspace/here.txt').read()")["output"] == "w"
    plain = _result(call("run_code", language="python", code="import os\nos.getcwd()"))
    assert plain["output"] == "/workspace"
    call("close_session", session_id=sid)


def test_a_run_sees_only_its_own_input_blobs_and_a_version_keeps_only_its_state(servers: Servers) -> None:
    """A session run's /blobs holds what that run was given, nothing of another run's; the
    version on disk holds its memory, /workspace and /tmp, no folder a run mounted."""
    call = servers.alice
    blob = _result(call("create_blob", content="a,b\n1,2\n", kind="text/csv"))["blob_id"]
    sid = _new(call)
    given = _run(call, sid, f"import os\nopen('/blobs/{blob}').read()", input_blobs=[blob])
    assert given["output"] == "a,b\n1,2\n"
    assert _run(call, sid, f"os.path.exists('/blobs/{blob}')")["output"] is False
    assert _run(call, sid, "open('/workspace/k.txt', 'w').write('k')\nsorted(os.listdir('/workspace'))")["output"] == [
        "k.txt"]
    folder = next(p for p in (servers.data / "sessions").iterdir()
                  if (p / "meta.json").exists() and sid in (p / "meta.json").read_text())
    current = folder / f"v{json.loads((folder / 'meta.json').read_text())['version']}"  # (older ones go meanwhile)
    assert sorted(c.name for c in current.iterdir()) in (
        ["memory", "tmp", "workspace"], ["memory", "memory.delta", "tmp", "workspace"])
    call("close_session", session_id=sid)


def test_a_timeout_rolls_back_memory_and_files(servers: Servers) -> None:
    call = servers.alice
    sid = _new(call)
    _run(call, sid, "x = 1\nopen('/workspace/f', 'w').write('v1')")
    stopped = _run(call, sid, "x = 2\nopen('/workspace/f', 'w').write('v2')\nopen('/workspace/g', 'w').write('g')\n"
                              "while True:\n    pass", limits={"timeout_ms": 500})
    assert stopped["status"] == "failed" and stopped["error"]["type"] == "Timeout"
    assert stopped["session_rolled_back"] is True
    import_state = _run(call, sid, "import os\n[x, open('/workspace/f').read(), os.path.exists('/workspace/g')]")
    assert import_state["output"] == [1, "v1", False]


def test_the_memory_limit_rolls_back(servers: Servers) -> None:
    call = servers.alice
    sid = _new(call, limits={"memory_mb": 128})
    _run(call, sid, "keep = list(range(1000))")
    stopped = _run(call, sid, "keep.append('lost')\nopen('/workspace/m', 'w').write('m')\n"
                              "blocks = [bytearray(16 << 20) for _ in range(64)]")
    assert stopped["status"] == "failed" and stopped["session_rolled_back"] is True
    assert stopped["error"]["type"] in ("MemoryLimitExceeded", "MemoryError")
    after = _run(call, sid, "import os\n[len(keep), keep[-1], os.path.exists('/workspace/m')]")
    assert after["output"] == [1000, 999, False]
    refused = call("run_code", language="python", code="1", session_id=sid, limits={"memory_mb": 256})
    assert refused["error"]["code"] == -32602 and refused["error"]["data"]["field"] == "limits.memory_mb"


def test_a_fork_copies_state_then_evolves_apart(servers: Servers) -> None:
    call = servers.alice
    sid = _new(call)
    _run(call, sid, "import random\nv = [1]\nopen('/workspace/f', 'w').write('before')")
    fork = _result(call("fork_session", session_id=sid))
    assert fork["forked_from"] == sid and fork["session_id"] != sid
    other = fork["session_id"]
    assert _run(call, sid, "v.append(2)\nopen('/workspace/f', 'w').write('after')\nv")["output"] == [1, 2]
    assert _run(call, other, "[v, open('/workspace/f').read()]")["output"] == [[1], "before"]
    draws = [_run(call, s, "[random.random() for _ in range(4)]")["output"] for s in (sid, other)]
    assert draws[0] != draws[1]  # the fork was reseeded
    _result(call("close_session", session_id=other))


def test_another_tenant_sees_nothing_and_every_wrong_id_is_one_error(servers: Servers) -> None:
    sid = _new(servers.alice)
    _run(servers.alice, sid, "secret = 'alice'")
    closed = _new(servers.alice)
    _result(servers.alice("close_session", session_id=closed))
    answers = [
        servers.bob("run_code", language="python", code="secret", session_id=sid),
        servers.bob("fork_session", session_id=sid),
        servers.bob("close_session", session_id=sid),
        servers.alice("run_code", language="python", code="1", session_id=closed),
        servers.alice("run_code", language="python", code="1", session_id="ses_" + "A" * 32),
        servers.alice("fork_session", session_id="x" * 128),
    ]
    for answer in answers:
        error = answer["error"]
        assert error["code"] == -32602 and error["data"] == {"field": "session_id"}, answer
        assert "does not exist" in error["message"]
    assert all(s["session_id"] != sid for s in _result(servers.bob("list_sessions"))["sessions"])
    assert _run(servers.alice, sid, "secret")["output"] == "alice"  # untouched by bob's attempts
    too_long = servers.alice("run_code", language="python", code="1", session_id="x" * 5000)
    assert too_long["error"]["code"] == -32602 and too_long["error"]["data"]["field"] == "session_id"


def test_the_tenant_cap_on_open_sessions(servers: Servers) -> None:
    opened = [_new(servers.bob) for _ in range(2)]
    over = servers.bob("create_session", language="python")
    assert over["error"]["code"] == -32002 and over["error"]["data"]["limit"] == "sessions"
    assert servers.bob("fork_session", session_id=opened[0])["error"]["code"] == -32002
    _result(servers.bob("close_session", session_id=opened[0]))
    opened[0] = _new(servers.bob)
    for sid in opened:
        _result(servers.bob("close_session", session_id=sid))
    bad = servers.bob("create_session", language="python", idle_timeout_s=10**9)
    assert bad["error"]["code"] == -32602 and bad["error"]["data"]["field"] == "idle_timeout_s"


def test_one_request_at_a_time(servers: Servers) -> None:
    call = servers.alice
    sid = _new(call)
    slow = threading.Thread(target=_run, args=(call, sid, "import time\ntime.sleep(3)\nx = 1"))
    slow.start()
    try:
        deadline = time.monotonic() + 30
        while not next(s for s in _result(call("list_sessions"))["sessions"] if s["session_id"] == sid)["busy"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        busy = call("run_code", language="python", code="1", session_id=sid)
        assert busy["error"]["code"] == -32004
        assert call("close_session", session_id=sid)["error"]["code"] == -32004
    finally:
        slow.join()
    assert _run(call, sid, "x")["output"] == 1


def test_state_is_private_on_disk_and_deleted_when_the_session_ends(servers: Servers) -> None:
    call = servers.alice
    sid = _new(call, idle_timeout_s=5)  # room for the first run on a loaded machine
    _run(call, sid, "data = 'x' * 100000")
    root = servers.data / "sessions"
    folders = [p for p in root.iterdir() if (p / "meta.json").exists() and sid in (p / "meta.json").read_text()]
    assert len(folders) == 1
    folder = folders[0]
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and stat.S_IMODE(folder.stat().st_mode) == 0o700
    images = list(folder.glob("v*/memory"))
    assert len(images) == 1 and stat.S_IMODE(images[0].stat().st_mode) == 0o600
    time.sleep(5.5)
    expired = call("run_code", language="python", code="data", session_id=sid)
    assert expired["error"]["code"] == -32602 and expired["error"]["data"] == {"field": "session_id"}
    deadline = time.monotonic() + 30
    while folder.exists():  # the sweeper deletes it
        assert time.monotonic() < deadline
        time.sleep(0.2)
    while True:  # the sweeper counts the end after it removed the folder: seen a moment later on a loaded machine
        metrics = httpx2.get(
            servers.server.base_url + "/metrics", headers={"authorization": f"Bearer {servers.metrics_key}"}, timeout=30
        ).text
        if 'wasmrun_sessions_ended_total{reason="expired",tenant="alice"}' in metrics or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert 'wasmrun_sessions_ended_total{reason="expired",tenant="alice"}' in metrics
    assert 'wasmrun_session_rollbacks_total{tenant="alice"}' in metrics
    assert 'wasmrun_sessions_open{tenant="alice"}' in metrics
    audit = [json.loads(line) for line in (servers.data / "audit.log").read_text().splitlines()]
    assert any(entry["method"] == "session_expired" and entry["tenant"] == "alice" for entry in audit)
    assert any(entry.get("session_rolled_back") is True for entry in audit)
    assert not any(sid in json.dumps(entry) for entry in audit)  # the id is a bearer secret


def test_a_session_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    key = TenantStore(data).add("carol")
    server = LiveServer(data)
    try:
        call = _caller(server, key)
        sid = _new(call)
        _run(call, sid, "import statistics\nrows = [3, 1, 2]\nopen('/workspace/r.txt', 'w').write('saved')")
        lost = _new(call)
        _run(call, lost, "x = 1")
    finally:
        server.stop()
    # One session's state gone (as after a machine crash): dropped, never resumed blank.
    for meta in (data / "sessions").glob("*/meta.json"):
        if lost in meta.read_text():
            for version in meta.parent.glob("v*"):
                shutil.rmtree(version)
    (data / "sessions" / ("0" * 64)).mkdir()
    (data / "sessions" / ("0" * 64) / "meta.json").write_text("{not json")
    server = LiveServer(data)
    try:
        call = _caller(server, key)
        after = _run(call, sid, "[statistics.median(rows), open('/workspace/r.txt').read()]")
        assert after["output"] == [2, "saved"]
        assert [s["session_id"] for s in _result(call("list_sessions"))["sessions"]] == [sid]
        gone = call("run_code", language="python", code="x", session_id=lost)
        assert gone["error"]["data"] == {"field": "session_id"}
        _result(call("close_session", session_id=sid))
        assert os.listdir(data / "sessions") == []
    finally:
        server.stop()


def test_the_typed_client_and_the_cli(servers: Servers, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from wasmrun.cli.main import main
    from wasmrun.client import Client

    with Client(servers.server.base_url, api_key=servers.alice_key) as client:
        info = client.create_session({"memory_mb": 256}, idle_timeout_s=120)
        assert info.idle_timeout_s == 120 and info.runs == 0
        assert client.run_code("z = 5", session_id=info.session_id).session_rolled_back is False
        fork = client.fork_session(info.session_id)
        assert client.run_code("z + 1", session_id=fork.session_id).output == 6
        assert {info.session_id, fork.session_id} <= {s.session_id for s in client.list_sessions().sessions}
        assert client.close_session(fork.session_id).closed
    script = tmp_path / "cell.py"
    script.write_text("z * 10\n")
    base = ["session", "--url", servers.server.base_url, "--api-key", servers.alice_key]
    assert main([*base, "run", info.session_id, str(script)]) == 0
    assert json.loads(capsys.readouterr().out)["output"] == 50
    assert main([*base, "close", info.session_id]) == 0
    capsys.readouterr()
    assert main([*base, "run", info.session_id, str(script)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_operator_sets_the_idle_timeout_default_ceiling_and_max_age(tmp_path: Path) -> None:
    from wasmrun.settings import Settings

    env = {"WASMRUN_SESSION_IDLE_S": "30", "WASMRUN_SESSION_MAX_IDLE_S": "90", "WASMRUN_SESSION_MAX_AGE_S": "2"}
    policy = Settings.load(env, data_dir=tmp_path).sessions
    assert (policy.idle_timeout_s, policy.max_idle_timeout_s, policy.max_age_s) == (30, 90, 2)
    with pytest.raises(ValueError, match="SESSION"):
        Settings.load({"WASMRUN_SESSION_MAX_AGE_S": "0"}, data_dir=tmp_path)
    key = TenantStore(tmp_path / "data").add("dave")
    server = LiveServer(tmp_path / "data", env={**wasmrun_env(), **env})
    try:
        call = _caller(server, key)
        info = _result(call("create_session", language="python"))
        assert info["idle_timeout_s"] == 30
        over = call("create_session", language="python", idle_timeout_s=91)
        assert over["error"]["data"] == {"field": "idle_timeout_s", "minimum": 1, "maximum": 90}
        _run(call, info["session_id"], "x = 1")
        time.sleep(2.2)  # past the maximum age, however recently used
        aged = call("run_code", language="python", code="x", session_id=info["session_id"])
        assert aged["error"]["data"] == {"field": "session_id"}
        assert _result(call("list_sessions"))["sessions"] == []
    finally:
        server.stop()


def test_a_large_session_keeps_every_change_across_saves_and_loads(servers: Servers) -> None:
    """A base image, then runs that change a few bytes (saved as deltas over it),
    read back by a fork (a cold load of base and delta) and by the session itself."""
    import hashlib

    call = servers.alice
    sid = _new(call, limits={"memory_mb": 256})
    local = bytearray(range(256)) * (80 * 1024)  # 20 MiB
    _run(call, sid, "import hashlib\nblob = bytearray(range(256)) * (80 * 1024)")
    for step in range(4):
        at = (step * 7_919_993) % len(local)
        local[at] ^= 0xFF
        _run(call, sid, f"blob[{at}] ^= 0xFF")
    expected = hashlib.sha256(local).hexdigest()
    fork = _result(call("fork_session", session_id=sid))["session_id"]
    for session in (fork, sid):
        assert _run(call, session, "hashlib.sha256(blob).hexdigest()")["output"] == expected
    stopped = _run(call, sid, "blob[0] ^= 0xFF\nwhile True: pass", limits={"timeout_ms": 300})
    assert stopped["session_rolled_back"] is True
    assert _run(call, sid, "hashlib.sha256(blob).hexdigest()")["output"] == expected
    info = next(s for s in _result(call("list_sessions"))["sessions"] if s["session_id"] == sid)
    assert info["image_bytes"] < 2 * len(local) + (16 << 20)  # a base and a small delta, not a copy per run
    for session in (fork, sid):
        _result(call("close_session", session_id=session))


def test_tracebacks_name_each_run_as_a_cell(servers: Servers) -> None:
    call = servers.alice
    sid = _new(call)
    _run(call, sid, "def divide(a, b):\n    return a / b\n")
    failed = _run(call, sid, "x = 1\ndivide(x, 0)")
    assert failed["error"]["type"] == "ZeroDivisionError"
    message = failed["error"]["message"]
    assert 'File "<cell 2>", line 2' in message and 'File "<cell 1>", line 2, in divide' in message
    assert "return a / b" in message


def test_the_workspace_quota_counts_what_earlier_runs_left(servers: Servers) -> None:
    call = servers.alice
    sid = _new(call, limits={"workspace_mb": 1})
    _run(call, sid, "open('/workspace/a', 'wb').write(b'a' * 600_000)")
    over = _run(call, sid, "open('/tmp/b', 'wb').write(b'b' * 600_000)")
    assert over["status"] == "failed" and over["error"]["type"] == "WorkspaceQuotaExceeded"
    assert over["session_rolled_back"] is True
    after = _run(call, sid, "import os\n[os.path.getsize('/workspace/a'), os.path.exists('/tmp/b')]")
    assert after["output"] == [600_000, False]


def test_skills_named_at_creation_are_mounted_in_every_run(servers: Servers) -> None:
    call = servers.alice
    sid = _new(call, skills=["text.stats"])
    info = next(s for s in _result(call("list_sessions"))["sessions"] if s["session_id"] == sid)
    assert len(info["skills"]) == 1 and info["skills"][0].startswith("text.stats@")
    _run(call, sid, "from skills.text import stats\nfirst = stats.main({'text': 'a b c'})")
    again = _run(call, sid, "from skills.text import stats as again\n[again is stats, first == again.main({'text': 'a b c'})]")
    assert again["output"] == [True, True]
    refused = call("run_code", language="python", code="1", session_id=sid, mount_skills=["data.csv.profile"])
    assert refused["error"]["data"]["field"] == "mount_skills"


def test_the_cap_holds_under_concurrent_creates(servers: Servers) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: servers.bob("create_session", language="python"), range(6)))
    made = [a["result"]["session_id"] for a in answers if "result" in a]
    refused = [a["error"] for a in answers if "error" in a]
    assert len(made) == 2 and all(e["code"] == -32002 for e in refused)
    for sid in made:
        _result(servers.bob("close_session", session_id=sid))


def test_session_runs_leave_the_worker_making_spares_again(tmp_path: Path) -> None:
    # A session run takes its instance from the worker's supply and keeps (or closes) it
    # itself: the supply must not count it as a run in flight for good, or it stops
    # making spares and tearing down used instances (every later run pays for both).
    key = TenantStore(tmp_path / "data").add("solo", {})
    server = LiveServer(tmp_path / "data", "--workers", "1")
    try:
        call = _caller(server, key)
        sid = _new(call)
        for i in range(3):
            assert _run(call, sid, f"v = {i}\nv")["output"] == i
        prepared = []
        for _ in range(8):  # more runs than the worker keeps spares: each must have been refilled
            time.sleep(0.3)  # idle: the housekeeper's quiet moment
            plain = _result(call("run_code", language="python", code="1"))
            prepared.append(plain["usage"]["prepared_ahead"])
        assert all(prepared[-4:]), prepared
    finally:
        server.stop()


def test_a_long_session_of_file_writes_runs_on(servers: Servers) -> None:
    """Each run goes through the host's WASI guard (a file written): a session's warm
    instance serves run after run, past the pool's 128 instances, each run's file kept."""
    call = servers.alice
    session = _new(call)
    try:
        for i in range(150):
            result = _run(call, session, f"open('f{i}', 'w').write('{i}')\nn = {i}")
            assert result["status"] == "completed", (i, result.get("error"))
        last = _run(call, session, "import os\n(n, len(os.listdir('.')), open('f149').read())")
        assert last["output"] == [149, 150, "149"], last
    finally:
        call("close_session", session_id=session)
