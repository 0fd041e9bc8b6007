"""Session storage held to its caps (issue 29), against a real server with two tenants.

- `session_bytes` holds after every run: a run whose new version (memory image
  and files) would take the tenant over it is rolled back as
  `SessionBytesExceeded`, and the disk under the server's sessions folder,
  measured on the host, stays under the cap;
- a file counts at its size: sparse growth (truncate, a write past the end) is
  `WorkspaceQuotaExceeded` at once, in runs and sessions, and a session's
  sparse file stays sparse when the next run stages it;
- a fork keeps its original's age: a chain of forks ends at the first's maximum age;
- /healthz tells a tenanted server's callers "ok" and nothing else, its counts
  only to the operator's metrics key;
- fork and close work on the session storage pool, not the pool that ends runs.

See docs/threat-model.md ("Session storage") and docs/sessions.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

MiB = 1 << 20
CAP = 48 * MiB  # alice's session_bytes
METRICS_KEY = "the-operators-metrics-key-29"

Call = Callable[..., dict[str, Any]]


def _caller(server: LiveServer, key: str) -> Call:
    def call(method: str, **params: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answer: dict[str, Any] = httpx2.post(
            server.endpoint, json=body, headers={"authorization": f"Bearer {key}"}, timeout=120
        ).json()
        return answer

    return call


def _result(answer: dict[str, Any]) -> Any:
    assert "result" in answer, answer
    return answer["result"]


def _run(call: Call, session_id: str | None, code: str, **params: Any) -> dict[str, Any]:
    if session_id is not None:
        params["session_id"] = session_id
    result: dict[str, Any] = _result(call("run_code", language="python", code=code, **params))
    return result


def _new(call: Call, **params: Any) -> str:
    session_id: str = _result(call("create_session", language="python", **params))["session_id"]
    return session_id


def _disk(folder: Path) -> int:
    """What the files under `folder` take, each inode once at max(size, blocks)."""
    seen: set[int] = set()
    total = 0
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            try:
                st = os.lstat(os.path.join(parent, name))
            except OSError:
                continue
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += max(st.st_size, st.st_blocks * 512)
    return total


class TwoTenants:
    def __init__(self, data: Path, **env: str) -> None:
        store = TenantStore(data)
        self.data = data
        self.alice_key = store.add("alice", {"session_bytes": CAP})
        self.bob_key = store.add("bob")
        self.server = LiveServer(data, env={**wasmrun_env(), "WASMRUN_METRICS_KEY": METRICS_KEY, **env})
        self.alice = _caller(self.server, self.alice_key)
        self.bob = _caller(self.server, self.bob_key)

    def close_all(self) -> None:
        for call in (self.alice, self.bob):
            for info in _result(call("list_sessions"))["sessions"]:
                call("close_session", session_id=info["session_id"])


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoTenants]:
    found = TwoTenants(tmp_path_factory.mktemp("sesscap") / "data")
    try:
        yield found
    finally:
        found.server.stop()


@pytest.fixture()
def fresh(tenants: TwoTenants) -> Iterator[TwoTenants]:
    tenants.close_all()
    yield tenants
    tenants.close_all()


def _assert_over_cap(result: dict[str, Any]) -> None:
    assert result["status"] == "failed", result
    assert result["session_rolled_back"] is True, result
    error = result["error"]
    assert error["type"] == "SessionBytesExceeded", error
    assert "session_bytes" in error["message"] and str(CAP) in error["message"], error
    assert "output" not in result


# -- session_bytes, when a version is kept -------------------------------------------------

FILL_MEMORY = """\
def main(args):
    global keep, x
    keep = b'x' * args['mib'] * (1 << 20)
    x = 99
"""


def test_memory_over_session_bytes_is_rolled_back_and_the_disk_stays_under_the_cap(fresh: TwoTenants) -> None:
    sid = _new(fresh.alice, limits={"memory_mb": 256})
    assert _run(fresh.alice, sid, "x = 41")["status"] == "completed"
    # One run writes more memory than the cap: before, it was kept (the check came before the run).
    over = _run(fresh.alice, sid, FILL_MEMORY + "x = 99", args={"mib": 64})
    _assert_over_cap(over)
    assert _disk(fresh.data / "sessions") <= CAP
    # the session is as it was: its state before the run, and it keeps running
    again = _run(fresh.alice, sid, "def main(args):\n    return x + 1\n")
    assert again["status"] == "completed" and again["output"] == 42, again
    (info,) = _result(fresh.alice("list_sessions"))["sessions"]
    assert info["image_bytes"] + info["files_bytes"] <= CAP
    # bob's cap is his own: the same run keeps its state in his session
    theirs = _new(fresh.bob, limits={"memory_mb": 256})
    kept = _run(fresh.bob, theirs, FILL_MEMORY + "x = 99", args={"mib": 64})
    assert kept["status"] == "completed" and kept["session_rolled_back"] is False, kept


FILL_FILES = """\
def main(args):
    chunk = b'y' * (1 << 20)
    with open('/workspace/' + args['name'], 'wb') as f:
        for _ in range(args['mib']):
            f.write(chunk)
"""


def test_files_count_with_the_tenants_other_sessions(fresh: TwoTenants) -> None:
    first, second = _new(fresh.alice), _new(fresh.alice)
    filled = _run(fresh.alice, first, FILL_FILES, args={"name": "a", "mib": 28})
    assert filled["status"] == "completed", filled
    # the second session's files fit its workspace_mb but not what the first leaves of the cap
    over = _run(fresh.alice, second, FILL_FILES, args={"name": "b", "mib": 28})
    _assert_over_cap(over)
    assert _disk(fresh.data / "sessions") <= CAP
    listed = _run(fresh.alice, second, "import os\ndef main(args):\n    return os.listdir('/workspace')\n")
    assert listed["output"] == []
    # closing the first makes room again
    _result(fresh.alice("close_session", session_id=first))
    assert _run(fresh.alice, second, FILL_FILES, args={"name": "b", "mib": 28})["session_rolled_back"] is False


def test_concurrent_runs_of_one_tenant_cannot_share_the_same_room(fresh: TwoTenants) -> None:
    import concurrent.futures

    sessions = [_new(fresh.alice) for _ in range(2)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(
            lambda sid: _run(fresh.alice, sid, FILL_FILES, args={"name": "c", "mib": 28}), sessions,
        ))
    kept = [r for r in results if r["session_rolled_back"] is False]
    assert len(kept) == 1, results
    assert _disk(fresh.data / "sessions") <= CAP


# -- a file counts at its size --------------------------------------------------------------

SPARSE = """\
import os
def main(args):
    how, size = args['how'], args['size']
    fd = os.open('/workspace/sparse', os.O_RDWR | os.O_CREAT)
    try:
        if how == 'ftruncate':
            os.ftruncate(fd, size)
        elif how == 'pwrite':
            os.pwrite(fd, b'x', size - 1)
        else:
            os.lseek(fd, size - 1, os.SEEK_SET)
            os.write(fd, b'x')
    finally:
        os.close(fd)
    return os.stat('/workspace/sparse').st_size
"""


@pytest.mark.parametrize("how", ["ftruncate", "pwrite", "seek"])
def test_sparse_growth_is_refused_by_size_in_runs_and_sessions(fresh: TwoTenants, how: str) -> None:
    ten_gib = 10 << 30
    plain = _run(fresh.alice, None, SPARSE, args={"how": how, "size": ten_gib})
    assert plain["status"] == "failed" and plain["error"]["type"] == "WorkspaceQuotaExceeded", plain
    sid = _new(fresh.bob)
    session = _run(fresh.bob, sid, SPARSE, args={"how": how, "size": ten_gib})
    assert session["status"] == "failed" and session["error"]["type"] == "WorkspaceQuotaExceeded", session
    assert session["session_rolled_back"] is True
    assert _disk(fresh.data / "sessions") < 64 * MiB
    within = _run(fresh.bob, sid, SPARSE, args={"how": how, "size": 8 * MiB})
    assert within["status"] == "completed" and within["output"] == 8 * MiB, within


def test_a_sessions_sparse_file_stays_sparse_when_staged(fresh: TwoTenants) -> None:
    sid = _new(fresh.bob)
    assert _run(fresh.bob, sid, SPARSE, args={"how": "pwrite", "size": 32 * MiB})["status"] == "completed"
    for _ in range(2):  # each run stages a copy of the version before it
        checked = _run(fresh.bob, sid, "import os\ndef main(args):\n    return os.stat('/workspace/sparse').st_size\n")
        assert checked["output"] == 32 * MiB, checked
    seen = 0
    # os.walk, not rglob: an earlier version's folder is deleted in the background, maybe mid-walk.
    for folder, _, files in os.walk(fresh.data / "sessions"):
        if not (folder.endswith("/workspace") and "sparse" in files):
            continue
        copy = Path(folder) / "sparse"
        try:
            st = copy.stat()
        except FileNotFoundError:
            continue  # an earlier version, deleted after its successor was kept
        seen += 1
        assert st.st_size == 32 * MiB and st.st_blocks * 512 < MiB, (copy, st.st_blocks)
    assert seen
    (info,) = _result(fresh.bob("list_sessions"))["sessions"]
    assert info["files_bytes"] >= 32 * MiB  # charged at its size


# -- forks keep their age ------------------------------------------------------------------------


def test_a_chain_of_forks_ends_at_the_originals_maximum_age(tmp_path: Path) -> None:
    max_age = 10
    aged = TwoTenants(tmp_path / "data", WASMRUN_SESSION_MAX_AGE_S=str(max_age))
    try:
        call = aged.alice
        _run(call, None, "1")  # a worker warmed, so the chain is made well within the age
        started = time.monotonic()
        original = _new(call)
        _run(call, original, "x = 1")
        time.sleep(1.1)
        child = _result(call("fork_session", session_id=original))["session_id"]
        time.sleep(1.1)
        grandchild = _result(call("fork_session", session_id=child))["session_id"]
        listed = {s["session_id"]: s for s in _result(call("list_sessions"))["sessions"]}
        assert {listed[s]["created_at"] for s in (original, child, grandchild)} == {listed[original]["created_at"]}
        assert {listed[s]["expires_at"] for s in (child, grandchild)} == {listed[original]["expires_at"]}
        # the idle time starts fresh: the newest fork's last use is its own
        assert listed[grandchild]["last_used_at"] >= listed[original]["last_used_at"]
        assert _run(call, grandchild, "def main(args):\n    return x\n")["output"] == 1
        bobs = _new(aged.bob)  # the other tenant's session, made later, outlives them
        assert time.monotonic() - started < max_age, "the machine is too slow for this test's timing"
        time.sleep(max(0.0, max_age + 0.3 - (time.monotonic() - started)))
        for sid in (original, child, grandchild):
            gone = call("run_code", language="python", code="x", session_id=sid)
            assert gone["error"]["data"] == {"field": "session_id"}, gone
        assert _result(call("list_sessions"))["sessions"] == []
        assert _run(aged.bob, bobs, "y = 1")["status"] == "completed"
    finally:
        aged.server.stop()


# -- /healthz on a server with tenants -----------------------------------------------------------


def test_healthz_shows_counts_only_to_the_operator(tenants: TwoTenants) -> None:
    url = tenants.server.base_url + "/healthz"
    anyone = httpx2.get(url, timeout=30)
    # Anyone sees the status and the image served (the playground shows it), no counts.
    assert anyone.status_code == 200 and set(anyone.json()) == {"status", "image"}
    assert anyone.json()["status"] == "ok"
    tenant = httpx2.get(url, headers={"authorization": f"Bearer {tenants.alice_key}"}, timeout=30)
    assert tenant.json() == anyone.json()
    operator = httpx2.get(url, headers={"authorization": f"Bearer {METRICS_KEY}"}, timeout=30).json()
    assert operator["status"] == "ok" and operator["workers"]["total"] == 2 and "queued" in operator


def test_healthz_keeps_its_counts_on_a_server_without_tenants(tmp_path: Path) -> None:
    server = LiveServer(tmp_path / "data")
    try:
        health = httpx2.get(server.base_url + "/healthz", timeout=30).json()
        assert health["status"] == "ok" and health["workers"]["total"] == 2
    finally:
        server.stop()
