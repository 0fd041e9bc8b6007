"""`make onefile`'s executable, used as a newcomer uses it: copied nowhere special,
run from an empty folder with a bare environment (env -i with PATH, and HOME in a
temporary folder): `run`, `serve` and `mcp` work, the first start loads the
compiled guest it carries instead of compiling, later starts unpack nothing.

Slow (one PyInstaller build, about a minute): built once for the module.
Start times are printed, not asserted (shared machines); scripts/readme_figures.py
measures them for the README.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from tests.liveserver import REPO, free_port

pytestmark = pytest.mark.slow

CODE = "import sys\n\ndef main(args):\n    return {'sum': sum(range(args['n'])), 'python': sys.version.split()[0]}\n"


@dataclass(frozen=True)
class OneFile:
    exe: Path
    home: Path
    cwd: Path

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.home)}

    def run(self, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess[str], float]:
        start = time.monotonic()
        done = subprocess.run([str(self.exe), *args], cwd=self.cwd, env=self.env(), capture_output=True,
                              text=True, timeout=timeout)
        return done, time.monotonic() - start


@pytest.fixture(scope="module")
def onefile(tmp_path_factory: pytest.TempPathFactory) -> OneFile:
    pytest.importorskip("PyInstaller")
    top = tmp_path_factory.mktemp("onefile")
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "onefile.py"), "--out", str(top / "dist")],
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    exe = Path(out.stdout.strip().splitlines()[-1])
    assert exe.name.startswith("wasmrun-") and exe.parent == top / "dist"
    home, cwd = top / "home", top / "empty"
    home.mkdir()
    cwd.mkdir()
    print(f"onefile: {exe.stat().st_size / 1e6:.1f} MB")
    return OneFile(exe, home, cwd)


def test_run_from_an_empty_folder_first_start_loads_the_shipped_compiled_guest(onefile: OneFile) -> None:
    (onefile.cwd / "job.py").write_text(CODE)
    first, first_s = onefile.run("run", "job.py", "--arg", "n=10")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["output"]["sum"] == 45
    assert "compiling" not in first.stderr  # the compiled guest it carries was loaded
    again, again_s = onefile.run("run", "job.py", "--arg", "n=100")
    assert again.returncode == 0 and json.loads(again.stdout)["output"]["sum"] == 4950
    print(f"first start {first_s:.2f} s, later start {again_s:.2f} s")
    # Nothing was written next to the user's file; the cache and data went under HOME.
    assert sorted(p.name for p in onefile.cwd.iterdir()) == ["job.py"]
    assert (onefile.home / ".cache" / "wasmrun" / "onefile").is_dir()
    version, _ = onefile.run("--version")
    assert "packaged" in version.stdout


def test_serve_answers_a_run_and_the_playground(onefile: OneFile) -> None:
    port = free_port()
    server = subprocess.Popen([str(onefile.exe), "serve", "--port", str(port), "--workers", "2"], cwd=onefile.cwd,
                              env=onefile.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.communicate()[1]
            assert time.monotonic() < deadline, "no answer"
            try:
                if httpx2.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                time.sleep(0.1)
        call = {"jsonrpc": "2.0", "id": 1, "method": "run_code",
                "params": {"language": "python", "code": CODE, "args": {"n": 4}}}
        answer = httpx2.post(base + "/rpc", json=call, timeout=60).json()
        assert answer["result"]["output"]["sum"] == 6, answer
        skills = httpx2.post(base + "/rpc", json={"jsonrpc": "2.0", "id": 2, "method": "list_skills"}).json()
        assert "text.stats" in [s["name"] for s in skills["result"]["skills"]]
        assert "wasmrun playground" in httpx2.get(base + "/").text
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
    assert server.returncode == 0


def test_mcp_over_stdio(onefile: OneFile) -> None:
    from mcp import Client as MCPClient
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=str(onefile.exe), args=["mcp", "--workers", "1"], env=onefile.env(),
                                   cwd=str(onefile.cwd))

    async def go() -> tuple[list[str], object]:
        async with MCPClient(params) as mcp:
            tools = [t.name for t in (await mcp.list_tools()).tools]
            ran = await mcp.call_tool("run_code", {"language": "python", "code": CODE, "args": {"n": 3}})
            return tools, ran.structured_content

    tools, ran = asyncio.run(go())
    assert "run_code" in tools and "execute_skill" in tools
    assert isinstance(ran, dict) and ran["output"]["sum"] == 3
