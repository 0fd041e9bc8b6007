"""Run limits a request may ask for (`limits` in run_code, `timeout_ms` in execute_skill),
each up to a ceiling the operator sets; anything else is -32602 naming the member."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from tests.skillfiles import write_skill
from wasmrun.limits import MiB
from wasmrun.protocol.running import run_limits
from wasmrun.protocol.types import RunLimits
from wasmrun.sandbox import CEILING_LIMITS, LimitPolicy
from wasmrun.settings import Settings
from wasmrun.tenants.limits import TenantLimits

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

Rpc = Any


def run_code(rpc: Rpc, code: str, **limits: Any) -> dict[str, Any]:
    return rpc("run_code", {"language": "python", "code": code, "limits": limits})


ALLOCATE_100_MIB = "def main(args):\n    block = bytearray(100 * 1024 * 1024)\n    return len(block)\n"


def test_memory_mb_lowers_the_memory_limit(rpc: Rpc) -> None:
    assert run_code(rpc, ALLOCATE_100_MIB)["result"]["output"] == 100 * MiB
    failed = run_code(rpc, ALLOCATE_100_MIB, memory_mb=64)["result"]
    assert failed["status"] == "failed"
    # A refused allocation is the guest's own MemoryError (the host reserves
    # MemoryLimitExceeded for its own evidence); the message names the limit.
    assert failed["error"]["type"] == "MemoryError"
    assert f"memory limit is {64 * MiB} bytes" in failed["error"]["message"]


SPIN = "def main(args):\n    while True:\n        pass\n"
# Where a stopped run was: on both images the guest raises in the running frame when the
# host calls its `wasmrun_interrupt` export (bridge.c's; on the data image CPython's own
# PyErr_SetInterruptEx, exported when the image is made: python_wasm/dataimage.py).
STOPPED_HERE = "; it was stopped here:"


def test_cpu_ms_is_a_cpu_time_budget(rpc: Rpc) -> None:
    start = time.monotonic()
    failed = run_code(rpc, SPIN, cpu_ms=200, timeout_ms=120_000)["result"]
    assert failed["error"]["type"] == "CPULimitExceeded"
    assert failed["error"]["message"].startswith("the run exceeded its CPU limit of 200 ms" + STOPPED_HERE)
    assert failed["usage"]["cpu_ms"] >= 200
    assert time.monotonic() - start < 30  # a hang guard only


def test_time_asleep_is_not_cpu_time(rpc: Rpc) -> None:
    nap = "import time\ndef main(args):\n    time.sleep(1.5)\n    return 'awake'\n"
    result = run_code(rpc, nap, cpu_ms=200)["result"]
    assert result["output"] == "awake"
    assert 0 < result["usage"]["cpu_ms"] < 200
    sleeper = "import time\ndef main(args):\n    time.sleep(60)\n"
    failed = run_code(rpc, sleeper, cpu_ms=200, timeout_ms=300)["result"]
    assert failed["error"]["type"] == "Timeout"


class TestCpuCeilingForSkills:
    """execute_skill has no cpu_ms of its own: its runs get the server's CPU limit,
    cut to the operator's ceiling (WASMRUN_MAX_CPU_MS)."""

    @pytest.fixture()
    def skills_dir(self, tmp_path: Path) -> Path:
        top = tmp_path / "extra-skills"
        write_skill(top, "demo.spin", code=SPIN)
        return top

    @pytest.fixture()
    def settings(self, settings: Settings) -> Settings:
        return dataclasses.replace(settings, limits=Settings.load({"WASMRUN_MAX_CPU_MS": "300"}).limits)

    def test_a_spinning_skill_stops_at_the_cpu_ceiling(self, rpc: Rpc) -> None:
        failed = rpc("execute_skill", {"name": "demo.spin", "timeout_ms": 120_000})["result"]
        assert failed["error"]["type"] == "CPULimitExceeded"
        message = failed["error"]["message"]
        assert message.startswith("the run exceeded its CPU limit of 300 ms" + STOPPED_HERE)
        # the skill's own loop: its `while` (3.11) or its body (3.15)
        assert any(f'File "/skills/demo.spin/code/main.py", line {n}, in main' in message for n in (2, 3)), message
        assert failed["usage"]["cpu_ms"] >= 300
        error = run_code(rpc, SPIN, cpu_ms=301)["error"]
        assert (error["code"], error["data"]["field"], error["data"]["maximum"]) == (-32602, "limits.cpu_ms", 300)


def test_workspace_mb_bounds_the_workspace(rpc: Rpc) -> None:
    write_2_mib = (
        "def main(args):\n    with open('/workspace/f', 'wb') as f:\n"
        "        f.write(b'x' * (2 * 1024 * 1024))\n    return 'written'\n"
    )
    assert run_code(rpc, write_2_mib)["result"]["output"] == "written"
    failed = run_code(rpc, write_2_mib, workspace_mb=1)["result"]
    assert failed["error"]["type"] == "WorkspaceQuotaExceeded"


def test_output_bytes_bounds_the_captured_output(rpc: Rpc) -> None:
    noisy = "def main(args):\n    print('x' * 1500)\n    return 1\n"
    assert "cut" not in run_code(rpc, noisy)["result"]["logs_preview"]
    logs = run_code(rpc, noisy, output_bytes=100)["result"]["logs_preview"]
    assert "[... 1401 bytes of output cut ...]" in logs


LOCAL = TenantLimits()  # the implicit local tenant's own ceilings, under the server's


@pytest.mark.parametrize(
    "member, ceiling",
    [
        ("timeout_ms", min(CEILING_LIMITS.timeout_ms, LOCAL.max_timeout_ms)),
        ("memory_mb", min(CEILING_LIMITS.memory_bytes // MiB, LOCAL.max_memory_mb)),
        ("cpu_ms", min(CEILING_LIMITS.cpu_ms, LOCAL.max_cpu_ms)),
        ("workspace_mb", CEILING_LIMITS.workspace_bytes // MiB),
        ("output_bytes", CEILING_LIMITS.output_bytes),
    ],
)
def test_every_limit_is_accepted_up_to_its_ceiling_and_refused_above(rpc: Rpc, member: str, ceiling: int) -> None:
    error = run_code(rpc, "def main(args):\n    return 1\n", **{member: ceiling + 1})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, f"limits.{member}")
    assert error["data"]["maximum"] == ceiling
    result = run_code(rpc, "def main(args):\n    return 1\n", **{member: ceiling})["result"]
    assert result["status"] == "completed"


@pytest.mark.parametrize("member", ["timeout_ms", "memory_mb", "cpu_ms", "workspace_mb", "output_bytes"])
@pytest.mark.parametrize("value", [True, 1.5, 10.0, -1, 0, 10**30, "100", [1]], ids=repr)
def test_a_limit_of_the_wrong_kind_names_the_member(rpc: Rpc, member: str, value: Any) -> None:
    error = run_code(rpc, "def main(args):\n    return 1\n", **{member: value})["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, f"limits.{member}")


def test_memory_below_what_a_run_needs_is_refused(rpc: Rpc) -> None:
    error = run_code(rpc, "def main(args):\n    return 1\n", memory_mb=8)["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "limits.memory_mb")
    assert error["data"]["minimum"] == 48


def test_execute_skill_timeout_over_the_ceiling_is_refused(rpc: Rpc) -> None:
    params = {"name": "text.stats", "args": {"text": "a b"}, "timeout_ms": CEILING_LIMITS.timeout_ms + 1}
    error = rpc("execute_skill", params)["error"]
    assert (error["code"], error["data"]["field"]) == (-32602, "timeout_ms")


def test_operator_ceilings_come_from_the_environment() -> None:
    env = {
        "WASMRUN_MAX_TIMEOUT_MS": "5000",
        "WASMRUN_MAX_MEMORY_MB": "128",
        "WASMRUN_MAX_CPU_MS": "1000",
        "WASMRUN_MAX_WORKSPACE_MB": "8",
        "WASMRUN_MAX_OUTPUT_BYTES": "4096",
    }
    policy = Settings.load(env).limits
    assert policy.ceilings.timeout_ms == 5000
    assert policy.ceilings.memory_bytes == 128 * MiB
    assert policy.ceilings.cpu_ms == 1000
    assert policy.ceilings.workspace_bytes == 8 * MiB
    assert policy.ceilings.output_bytes == 4096
    # The defaults above a lowered ceiling come down to it.
    defaults = policy.resolve()
    assert (defaults.timeout_ms, defaults.memory_bytes) == (5000, 128 * MiB)
    with pytest.raises(Exception) as refused:
        run_limits(policy, RunLimits(memory_mb=129))
    assert getattr(refused.value, "data", None) == {"field": "limits.memory_mb", "minimum": 48, "maximum": 128}


@pytest.mark.parametrize(
    "env",
    [{"WASMRUN_MAX_MEMORY_MB": "5000"}, {"WASMRUN_MAX_MEMORY_MB": "16"}, {"WASMRUN_MAX_CPU_MS": "0"},
     {"WASMRUN_MAX_TIMEOUT_MS": "soon"}, {"WASMRUN_BODY_TIMEOUT": "0"}],
)
def test_bad_operator_ceilings_stop_the_start(env: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        Settings.load(env)


def test_the_server_applies_its_configured_ceilings(settings: Settings, rpc_with_policy: Rpc) -> None:
    error = run_code(rpc_with_policy, "def main(args):\n    return 1\n", timeout_ms=2001)["error"]
    assert (error["code"], error["data"]["field"], error["data"]["maximum"]) == (-32602, "limits.timeout_ms", 2000)


@pytest.fixture()
def rpc_with_policy(settings: Settings, blob_store: Any, executor: Any) -> Any:
    import dataclasses

    from starlette.testclient import TestClient

    from wasmrun.server import assemble, create_app

    lowered = dataclasses.replace(
        settings, limits=LimitPolicy(ceilings=dataclasses.replace(CEILING_LIMITS, timeout_ms=2000))
    )
    with TestClient(create_app(assemble(lowered, blobs=blob_store, executor=executor)), base_url="http://localhost") as client:

        def call(method: str, params: Any) -> dict[str, Any]:
            answer: dict[str, Any] = client.post(
                "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            ).json()
            return answer

        yield call
