"""An attacker with a tenant key, against the sandbox's own resources on a real `wasmrun serve`.

The sandbox-side classes of the second round of findings (issue 19): the
workspace quota counts what the host's disk allocates (files unlinked while
open, sparse and past-the-end writes, truncation growth, fallocate), checked
before the write; host memory for a run's output is bounded by its size, not
its number of values; guest work the server starts itself (a skill's
background import run) has its own small limits, is stopped there, shows in
/metrics, and a run with tiny limits cannot spoil a skill's image for others.
See docs/threat-model.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.liveserver import LiveServer, wasmrun_env

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

MiB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    """A server whose workspaces live under a temp folder of its own (TMPDIR), to look at its disk."""
    base = tmp_path_factory.mktemp("hostile-sandbox")
    temp = base / "tmp"
    temp.mkdir()
    live = LiveServer(base / "data", env={**wasmrun_env(), "TMPDIR": str(temp)})
    try:
        yield live, temp
    finally:
        live.stop()


def _call(server: LiveServer, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = httpx2.post(server.endpoint, json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    reply: dict[str, Any] = answer.json()
    return reply


def run_code(server: LiveServer, code: str, args: dict[str, Any] | None = None, **limits: Any) -> dict[str, Any]:
    reply = _call(server, "run_code", {"language": "python", "code": code, "args": args or {}, "limits": limits})
    assert "result" in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def allocated_under(folder: Path) -> int:
    """Bytes the host's disk allocates for the files under `folder`."""
    total = 0
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:
                continue
    return total


def assert_quota_stop(result: dict[str, Any]) -> None:
    assert result["status"] == "failed", result
    assert result["error"]["type"] == "WorkspaceQuotaExceeded", result["error"]


# -- workspace disk: what the host allocates --------------------------------------------

UNLINKED_OPEN = """\
import os
def main(args):
    files = []
    chunk = b'x' * (1 << 20)
    for i in range(args['files']):
        f = open(f'/workspace/f{i}', 'wb', buffering=0)
        os.unlink(f'/workspace/f{i}')
        files.append(f)
        for _ in range(args['mib_each']):
            f.write(chunk)
    return 'kept ' + str(len(files))
"""


@pytest.mark.parametrize("files, mib_each", [(1, 32), (10, 2)])
def test_files_unlinked_while_open_count_against_the_quota(
    server: tuple[LiveServer, Path], files: int, mib_each: int
) -> None:
    live, temp = server
    result = run_code(live, UNLINKED_OPEN, {"files": files, "mib_each": mib_each}, workspace_mb=4)
    assert_quota_stop(result)
    # The run's files are gone with it, the unlinked ones included.
    assert allocated_under(temp) < 4 * MiB


def test_unlinked_files_within_the_quota_complete(server: tuple[LiveServer, Path]) -> None:
    live, _ = server
    result = run_code(live, UNLINKED_OPEN, {"files": 2, "mib_each": 1}, workspace_mb=4)
    assert result["status"] == "completed", result
    assert result["output"] == "kept 2"


SEEK_AHEAD = """\
import os
def main(args):
    with open('/workspace/sparse', 'wb', buffering=0) as f:
        for i in range(args['count']):
            if args['how'] == 'seek':
                f.seek(i * args['step'])
                f.write(b'x')
            else:
                os.pwrite(f.fileno(), b'x', i * args['step'])
    return os.stat('/workspace/sparse').st_size
"""


@pytest.mark.parametrize("how", ["seek", "pwrite"])
def test_a_byte_every_block_is_charged_a_block(server: tuple[LiveServer, Path], how: str) -> None:
    live, temp = server
    # 4,000 blocks of one byte each: 16 MB of disk for 4,000 bytes written.
    result = run_code(live, SEEK_AHEAD, {"how": how, "count": 4000, "step": 4096}, workspace_mb=1)
    assert_quota_stop(result)
    assert allocated_under(temp) < 2 * MiB


@pytest.mark.parametrize("how", ["seek", "pwrite"])
def test_a_write_far_past_the_end_counts_at_the_files_size(server: tuple[LiveServer, Path], how: str) -> None:
    live, temp = server
    # One byte at 1 GiB: a hole, then one block. The hole takes no disk, but anything
    # that copies the file (a session's next run) writes it whole: the size counts.
    result = run_code(live, SEEK_AHEAD, {"how": how, "count": 2, "step": 1 << 30}, workspace_mb=1)
    assert_quota_stop(result)
    assert allocated_under(temp) < 2 * MiB


@pytest.mark.parametrize("how", ["seek", "pwrite"])
def test_a_write_past_the_end_within_the_quota_works(server: tuple[LiveServer, Path], how: str) -> None:
    live, _ = server
    result = run_code(live, SEEK_AHEAD, {"how": how, "count": 2, "step": 512 * 1024}, workspace_mb=1)
    assert result["status"] == "completed", result
    assert result["output"] == 512 * 1024 + 1


GROW = """\
import os
def main(args):
    path = '/workspace/grown'
    open(path, 'wb').close()
    if args['how'] == 'truncate':
        os.truncate(path, args['size'])
    else:
        with open(path, 'r+b') as f:
            f.truncate(args['size'])
    return os.stat(path).st_size
"""


@pytest.mark.parametrize("how", ["truncate", "ftruncate"])
def test_growing_a_file_past_the_quota_is_refused_before_it_grows(server: tuple[LiveServer, Path], how: str) -> None:
    live, temp = server
    result = run_code(live, GROW, {"how": how, "size": 64 * MiB}, workspace_mb=1)
    assert_quota_stop(result)
    assert allocated_under(temp) < 2 * MiB


@pytest.mark.parametrize("how", ["truncate", "ftruncate"])
def test_growing_a_file_within_the_quota_works(server: tuple[LiveServer, Path], how: str) -> None:
    live, _ = server
    result = run_code(live, GROW, {"how": how, "size": 256 * 1024}, workspace_mb=1)
    assert result["status"] == "completed", result
    assert result["output"] == 256 * 1024


def test_ordinary_files_up_to_the_quota_still_fit(server: tuple[LiveServer, Path]) -> None:
    code = (
        "def main(args):\n"
        "    for i in range(40):\n"
        "        with open(f'/workspace/f{i}.csv', 'w') as f:\n"
        "            f.write('a,b,c\\n' * 10_000)\n"
        "    with open('/workspace/big.bin', 'wb') as f:\n"
        "        f.write(b'y' * (40 << 20))\n"
        "    return 'ok'\n"
    )
    live, _ = server
    assert run_code(live, code, workspace_mb=64)["status"] == "completed"


# -- host memory: a run's output costs in proportion to its size ------------------------


def _rss_bytes_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rss_bytes(pid: int) -> int:
    """Resident memory of `pid` and of its children (the sandbox workers)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return _rss_bytes_of(pid) + sum(_rss_bytes_of(int(child)) for child in children)


MANY_CONTAINERS = "def main(args):\n    return [{}] * args['n']\n"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc")
def test_a_return_value_of_millions_of_containers_is_refused_without_costing_the_host(
    server: tuple[LiveServer, Path],
) -> None:
    live, _ = server
    hello = run_code(live, "def main(args):\n    return 'hi'\n")
    assert hello["status"] == "completed"
    before = _rss_bytes(live.process.pid)
    server_before = _rss_bytes_of(live.process.pid)
    for _ in range(2):
        # 29 MiB of JSON, under the 32 MiB result limit: ten million empty objects.
        result = run_code(live, MANY_CONTAINERS, {"n": 10_000_000}, memory_mb=512)
        assert result["status"] == "failed", result["summary"]
        assert result["error"]["type"] == "InvalidOutput"
        assert "arrays and objects" in result["error"]["message"]
    after = _rss_bytes(live.process.pid)
    # Decoding it as objects cost ~900 MiB a run, and stayed. Now the server holds no copy
    # of it, and a worker gives the run's pages back (~200 MiB of guest memory) when it ends.
    assert _rss_bytes_of(live.process.pid) - server_before < 64 * MiB
    assert after - before < 128 * MiB, (before, after)
    assert run_code(live, "def main(args):\n    return 'still serving'\n")["output"] == "still serving"


def test_a_large_return_value_of_many_plain_values_is_passed_on_with_a_bounded_outline(
    server: tuple[LiveServer, Path],
) -> None:
    live, _ = server
    result = run_code(live, "def main(args):\n    return list(range(args['n']))\n", {"n": 2_000_000})
    assert result["status"] == "completed", result
    assert "a list of more than" in result["summary"]
    pointer = result["output"]
    assert pointer["kind"] == "application/json" and pointer["size_bytes"] > 10 * MiB
    # The many-containers bound is about containers: a value of many nested lists under it still passes.
    nested = run_code(live, "def main(args):\n    return [[i] for i in range(args['n'])]\n", {"n": 200_000})
    assert nested["status"] == "completed", nested["summary"]


# -- background guest work: own limits, visible, retried ----------------------------------

METRICS_KEY = "hostile-sandbox-metrics-key-0123"
# Its import spins, or takes a while, only where /blobs holds nothing (the stdlib image has no
# /blobs then, the data image an empty one), as in the import run that builds its image: the
# client's runs of it (given an input blob) complete quickly.
SPINS_AT_IMPORT = """\
import os
if not (os.path.isdir('/blobs') and os.listdir('/blobs')):
    while True:
        pass
def main(args):
    return 'ran'
"""
SLOW_AT_IMPORT = """\
import os, time
print('importing slow.import')
if not (os.path.isdir('/blobs') and os.listdir('/blobs')):
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        pass
def main(args):
    return 'ok'
"""


@pytest.fixture(scope="module")
def skill_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One worker (so that every run meets the same skill images) and two skills of the kind above."""
    from tests.skillfiles import write_skill

    base = tmp_path_factory.mktemp("background")
    skills = base / "skills"
    write_skill(skills, "spin.import", code=SPINS_AT_IMPORT)
    write_skill(skills, "slow.import", code=SLOW_AT_IMPORT)
    live = LiveServer(
        base / "data", "--skills-dir", str(skills), "--workers", "1",
        env={**wasmrun_env(), "WASMRUN_METRICS_KEY": METRICS_KEY},
    )
    try:
        yield live
    finally:
        live.stop()


def _execute(live: LiveServer, name: str, timeout_ms: int | None = None) -> dict[str, Any]:
    blob = _call(live, "create_blob", {"content": "x", "kind": "text/plain"})["result"]["blob_id"]
    params: dict[str, Any] = {"name": name, "args": {}, "input_blobs": [blob]}
    if timeout_ms is not None:
        params["timeout_ms"] = timeout_ms
    reply = _call(live, "execute_skill", params)
    assert "result" in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def _background_metrics(live: LiveServer) -> dict[str, float]:
    page = httpx2.get(live.base_url + "/metrics", headers={"authorization": f"Bearer {METRICS_KEY}"}, timeout=30)
    assert page.status_code == 200, page.text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in page.text.splitlines()
        if line.startswith("wasmrun_background_")
    }


def test_a_skill_spinning_in_its_import_run_is_stopped_at_the_import_runs_own_limits(skill_server: LiveServer) -> None:
    from wasmrun.sandbox import IMPORT_LIMITS

    # The client asks for the ceiling: the import run does not get it.
    first = _execute(skill_server, "spin.import", timeout_ms=900_000)
    assert first["status"] == "completed" and first["output"] == "ran"
    stopped: dict[str, float] = {}
    for _ in range(120):  # the import run reports with the worker's next result
        assert _execute(skill_server, "spin.import")["output"] == "ran"  # runs are served meanwhile
        metrics = _background_metrics(skill_server)
        stopped = {k: v for k, v in metrics.items() if 'kind="import"' in k and "completed" not in k}
        if stopped and any(k.startswith("wasmrun_background_runs") for k in stopped):
            break
        time.sleep(0.5)
    assert any('outcome="CPULimitExceeded"' in k or 'outcome="Timeout"' in k for k in stopped), stopped
    cpu = _background_metrics(skill_server)['wasmrun_background_cpu_seconds_total{kind="import"}']
    assert 0 < cpu <= IMPORT_LIMITS.cpu_ms / 1000 * 1.5  # its own bound (plus what the slow skill below used)
    # Warm-up runs are counted too.
    assert any('kind="warmup"' in k for k in _background_metrics(skill_server))


def test_a_run_with_tiny_limits_does_not_spoil_a_skills_image_for_later_runs(skill_server: LiveServer) -> None:
    # A completed run with a tight timeout asks for the image: the import run (0.5 s) would
    # not fit in 200 ms, and used to take them, fail, and never be tried again.
    for _ in range(20):
        tight = _execute(skill_server, "slow.import", timeout_ms=200)
        if tight["status"] == "completed":
            break
    assert tight["status"] == "completed", tight
    from_image = False
    for _ in range(60):
        later = _execute(skill_server, "slow.import")
        assert later["status"] == "completed"
        if "importing slow.import" not in later["logs_preview"]:
            from_image = True  # started from the skill's image: its import did not run again
            break
        time.sleep(0.5)
    assert from_image
