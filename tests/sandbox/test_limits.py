"""Each limit stops a run with its own error type, and the host keeps serving."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import msgspec
import pytest

from wasmrun.sandbox.budget import watchdog
from wasmrun.sandbox.contract.limits import LimitPolicy
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.engine import SandboxEngine

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

POLICY = LimitPolicy()


def test_timeout_busy_loop(run_code):
    start = time.monotonic()
    result = run_code("def main(args):\n    while True:\n        pass", timeout_ms=200)
    elapsed = time.monotonic() - start
    assert result.error.type == "Timeout"
    assert "200 ms" in result.error.message
    assert elapsed < 5  # generous: the exact bound is measured by the benchmark


def test_timeout_while_sleeping(run_code):
    start = time.monotonic()
    result = run_code("import time\ndef main(args):\n    time.sleep(30)", timeout_ms=300)
    assert result.error.type == "Timeout"
    assert time.monotonic() - start < 10


def test_short_sleep_completes(run_code):
    result = run_code("import time\ndef main(args):\n    time.sleep(0.05)\n    return 'awake'", timeout_ms=5000)
    assert result.output == "awake"


SPIN = "def main(args):\n    i = 0\n    while True:\n        i += 1"


def test_cpu_budget(run_code):
    start = time.monotonic()
    result = run_code(SPIN, cpu_ms=200, timeout_ms=60_000)
    assert result.error.type == "CPULimitExceeded"
    assert result.error.message.startswith("the run exceeded its CPU limit of 200 ms; it was stopped here:")
    # the loop's line: its `while` (3.11) or its body (3.15, the data image)
    assert any(f'File "<run_code>", line {n}, in main' in result.error.message for n in (3, 4))
    assert result.usage.cpu_ms >= 200  # measured: the run's thread's CPU clock
    assert time.monotonic() - start < 30  # a hang guard only


def test_sleeping_is_not_charged_as_cpu(run_code):
    # 1.5 s asleep within a 200 ms CPU budget: only the CPU the run used counts.
    code = "import time\ndef main(args):\n    time.sleep(1.5)\n    return 'awake'"
    result = run_code(code, cpu_ms=200, timeout_ms=60_000)
    assert result.output == "awake", result.error
    assert 0 < result.usage.cpu_ms < 200


def test_a_sleeping_run_still_stops_at_its_timeout(run_code):
    result = run_code("import time\ndef main(args):\n    time.sleep(60)", cpu_ms=200, timeout_ms=300)
    assert result.error.type == "Timeout"
    assert result.usage.cpu_ms < 200


def test_a_cpu_budget_above_the_timeout_is_a_timeout(run_code):
    result = run_code(SPIN, cpu_ms=600_000, timeout_ms=300)
    assert result.error.type == "Timeout"
    assert "300 ms" in result.error.message


def test_one_run_stopped_leaves_the_others_on_the_same_engine_running(engine):
    """Runs share one engine (and its epoch): stopping one over its budget
    must not stop another in flight at the same time."""
    steady = (
        "import time\n"
        "def main(args):\n"
        "    total = 0\n"
        "    for _ in range(4):\n"
        "        time.sleep(0.2)\n"
        "        total += sum(range(200_000))\n"
        "    return total\n"
    )
    requests = [
        RunRequest(kind="code", code=SPIN, limits=POLICY.resolve(cpu_ms=200, timeout_ms=60_000)),
        RunRequest(kind="code", code=steady, limits=POLICY.resolve(timeout_ms=60_000)),
        RunRequest(kind="code", code=SPIN, limits=POLICY.resolve(cpu_ms=300, timeout_ms=60_000)),
    ]
    with ThreadPoolExecutor(len(requests)) as pool:
        spin1, calm, spin2 = pool.map(engine.run, requests)
    assert (spin1.error.type, spin2.error.type) == ("CPULimitExceeded", "CPULimitExceeded")
    assert calm.status == "completed", calm.error
    assert msgspec.json.decode(calm.output_json) == 4 * sum(range(200_000))


@pytest.mark.parametrize("clock_of_thread", [None, lambda ident: 12345], ids=["no-pthread_getcpuclockid", "refused"])
def test_cpu_limit_where_threads_clocks_cannot_be_read_from_outside(blobs, tmp_path, monkeypatch, clock_of_thread):
    """Without pthread_getcpuclockid (or with a clock the kernel refuses) the watchdog
    advances the epoch every tick and each run's callback reads its own thread's clock."""
    monkeypatch.setattr(watchdog, "_thread_cpu_clock", clock_of_thread)
    with SandboxEngine(blobs, workspace_root=tmp_path) as engine:
        spin = engine.run(RunRequest(kind="code", code=SPIN, limits=POLICY.resolve(cpu_ms=200, timeout_ms=60_000)))
        hello = engine.run(RunRequest(kind="code", code="def main(args):\n    return 'hi'"))
    assert spin.error.type == "CPULimitExceeded"
    assert spin.usage.cpu_ms >= 200
    assert hello.output_json == b'"hi"'


def test_memory_cap_single_allocation(run_code):
    # An allocation the interpreter could refuse is the guest's own MemoryError
    # (the host has no evidence a guest MemoryError came from the limit).
    result = run_code("def main(args):\n    return len(bytearray(200 * 1024 * 1024))", memory_bytes=64 << 20)
    assert result.error.type == "MemoryError"
    assert f"memory limit is {64 << 20} bytes" in result.error.message


def _idle_memory(run_code) -> int:
    """What the image's interpreter holds before the code allocates (the data image's
    numpy, pandas and matplotlib: over 100 MB; the stdlib image's: a few MB)."""
    return int(run_code("def main(args):\n    return 1\n").usage.peak_memory_bytes)


def test_memory_cap_gradual(run_code):
    cap = _idle_memory(run_code) + (64 << 20)
    code = "def main(args):\n    xs = []\n    while True:\n        xs.append('x' * 1_000_000)"
    result = run_code(code, memory_bytes=cap)
    assert result.error.type == "MemoryError"
    assert result.usage.peak_memory_bytes <= cap


def test_memory_under_cap_is_fine(run_code):
    cap = _idle_memory(run_code) + (64 << 20)
    result = run_code("def main(args):\n    return len(bytearray(20 * 1024 * 1024))", memory_bytes=cap)
    assert result.output == 20 * 1024 * 1024


def test_stack_overflow(run_code):
    # C recursion no recursion check stops in time: repr on 3.11 with the limit lifted; on the
    # data image's 3.15 (which bounds repr by its C stack) ast.parse's conversion of a long sum.
    code = (
        "import ast, os, sys\n"
        "def main(args):\n"
        "    sys.setrecursionlimit(10 ** 7)\n"
        "    nested = []\n"
        "    for _ in range(10 ** 6):\n"
        "        nested = [nested]\n"
        "    if sys.version_info >= (3, 15):\n"
        "        return len(ast.parse('+'.join(['a'] * 300_000)).body)\n"
        "    return len(repr(nested))\n"
    )
    result = run_code(code, memory_bytes=1 << 30)  # the stack runs out, not the memory
    assert result.error.type == "StackOverflow"
    assert run_code("def main(args):\n    return 1\n").output == 1  # and the engine runs on


def test_plain_recursion_is_a_python_error(run_code):
    result = run_code("def f(n):\n    return f(n + 1)\ndef main(args):\n    f(0)")
    assert result.error.type == "RecursionError"


def test_workspace_byte_quota(run_code):
    code = (
        "def main(args):\n"
        "    with open('/workspace/big', 'wb') as f:\n"
        "        for _ in range(64):\n"
        "            f.write(b'x' * (1 << 20))\n"
    )
    result = run_code(code, workspace_bytes=8 << 20)
    assert result.error.type == "WorkspaceQuotaExceeded"


def test_workspace_quota_counts_real_usage_not_rewrites(run_code):
    code = (
        "def main(args):\n"
        "    for _ in range(50):\n"
        "        with open('/workspace/same', 'wb') as f:\n"
        "            f.write(b'x' * (1 << 20))\n"
        "    return 'ok'\n"
    )
    result = run_code(code, workspace_bytes=8 << 20)
    assert result.output == "ok"


def test_workspace_sparse_file_is_refused(run_code):
    code = (
        "import os\n"
        "def main(args):\n"
        "    with open('/workspace/sparse', 'wb') as f:\n"
        "        f.truncate(10 ** 12)\n"
    )
    result = run_code(code, workspace_bytes=8 << 20)
    assert result.error.type == "WorkspaceQuotaExceeded"


def test_workspace_file_count_quota(run_code):
    code = "def main(args):\n    for i in range(500):\n        open(f'/workspace/f{i}', 'w').close()"
    result = run_code(code, workspace_files=100)
    assert result.error.type == "WorkspaceQuotaExceeded"


def test_workspace_directories_count(run_code):
    code = "import os\ndef main(args):\n    for i in range(500):\n        os.mkdir(f'/workspace/d{i}')"
    result = run_code(code, workspace_files=100)
    assert result.error.type == "WorkspaceQuotaExceeded"


def test_engine_keeps_serving_after_limits(run_code):
    run_code("def main(args):\n    while True: pass", timeout_ms=100)
    run_code("def main(args):\n    return len(bytearray(500 << 20))", memory_bytes=64 << 20)
    assert run_code("def main(args):\n    return 'still here'").output == "still here"


def test_output_before_a_trap_is_kept(run_code):
    code = "def main(args):\n    print('got this far')\n    while True:\n        pass"
    result = run_code(code, timeout_ms=200)
    assert result.error.type == "Timeout"
    assert result.logs == "got this far\n"


def test_output_before_a_hard_stop_is_kept(run_code):
    """Code that swallows the stop request is stopped hard (a trap, no Python left to flush):
    what it printed is still in the logs, read from the guest's output buffer."""
    code = (
        "def main(args):\n    print('got this far', end='')\n    while True:\n        try:\n"
        "            while True:\n                pass\n        except BaseException:\n            pass\n"
    )
    result = run_code(code, timeout_ms=300)
    assert result.error.type == "Timeout"
    assert result.logs.startswith("got this far")


def test_output_past_the_guest_buffer_keeps_order(run_code):
    code = (
        "import sys\n"
        "def main(args):\n"
        "    for i in range(3000):\n"
        "        print(f'out {i:04d} ' + 'x' * 40)\n"
        "        if i % 1000 == 0:\n"
        "            print(f'err {i}', file=sys.stderr)\n"
    )
    result = run_code(code, output_bytes=1 << 20)
    lines = result.logs.splitlines()
    assert len(lines) == 3003
    assert lines[0].startswith("out 0000") and lines[1] == "err 0"
    assert lines[-1].startswith("out 2999")
    outs = [line for line in lines if line.startswith("out")]
    assert outs == sorted(outs)


def test_the_quota_counts_home_user_as_the_workspace(run_code):
    """/home/user is /workspace's folder mounted again: writing past the quota through it
    stops the run as through /workspace, both paths fill one quota, and a file linked
    under both names counts once."""
    through_home = run_code(
        "def main(args):\n"
        "    with open('/home/user/big', 'wb') as f:\n"
        "        for _ in range(64):\n"
        "            f.write(b'x' * (1 << 20))\n",
        workspace_bytes=8 << 20,
    )
    assert through_home.error.type == "WorkspaceQuotaExceeded"
    sparse = run_code("def main(args):\n    open('/home/user/s', 'wb').truncate(10 ** 12)\n", workspace_bytes=8 << 20)
    assert sparse.error.type == "WorkspaceQuotaExceeded"
    halves = run_code(
        "def main(args):\n"
        "    open('/workspace/a', 'wb').write(b'x' * (5 << 20))\n"
        "    open('/home/user/b', 'wb').write(b'x' * (5 << 20))\n",
        workspace_bytes=8 << 20,
    )
    assert halves.error.type == "WorkspaceQuotaExceeded"
    linked = run_code(
        "import os\n"
        "def main(args):\n"
        "    open('/workspace/a', 'wb').write(b'x' * (5 << 20))\n"
        "    for i in range(4):\n"
        "        os.link('/workspace/a', f'/home/user/l{i}')\n"
        "    open('/home/user/more', 'wb').write(b'x' * (1 << 20))\n"
        "    return sorted(os.listdir('/workspace'))\n",
        workspace_bytes=8 << 20,
    )
    assert linked.output == ["a", "l0", "l1", "l2", "l3", "more"], linked.error
