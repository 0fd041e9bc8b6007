"""The tool texts, the guide and the MCP tool list state the image a real server serves,
held against the guest itself: its Python version, and each package the texts name
imports there at the version they state (on both images, tests/images.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client as MCPClient

from tests.images import current
from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.imagefacts import image_facts

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

NAMED = re.compile(r"([A-Za-z][A-Za-z0-9_.-]*) ([0-9][0-9A-Za-z.+-]*)(?: \(import ([A-Za-z_][A-Za-z0-9_]*)\))?")


def rpc(server: LiveServer, method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply = httpx2.post(server.endpoint, json=body, timeout=180).json()
    assert "result" in reply, reply
    return reply["result"]


def run(server: LiveServer, code: str) -> Any:
    result = rpc(server, "run_code", {"language": "python", "code": code})
    assert result["status"] == "completed", result
    return result["output"]


def run_code_text(tools: list[dict[str, Any]]) -> str:
    return str(next(t["description"] for t in tools if t["name"] == "run_code"))


def named_packages(text: str) -> list[tuple[str, str, str]]:
    """(distribution, version, import name) of each package the text's `packages:` part names."""
    found = re.search(r"; packages: (.*?); pure-Python packages install on demand", text)
    if found is None:
        return []
    listed = found.group(1).split(" and ")[0]
    return [(m[1], m[2], m[3] or m[1]) for m in NAMED.finditer(listed)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(tmp_path_factory.mktemp("texts-data"))
    yield srv
    srv.stop()


def test_the_texts_state_the_guest_s_python_and_packages(server: LiveServer) -> None:
    tools = httpx2.get(server.base_url + "/tools", timeout=60).json()
    text = run_code_text(tools)
    major_minor = run(server, "import sys\n'%d.%d' % sys.version_info[:2]")
    assert f"CPython {major_minor} " in text, text
    assert "create_session" in text and "session_id" in text, text  # sessions and how to use them
    assert "Limits (default, max): timeout_ms" in text, text
    named = named_packages(text)
    if current() == "data":
        assert [name for name, _, _ in named][:3] == ["numpy", "pandas", "matplotlib"], text
        versions = run(server, "import importlib, importlib.metadata as md\n{d: md.version(d) for d in %r}"
                       % [name for name, _, _ in named])
        for name, version, module in named:
            assert versions[name] == version, (name, versions[name], version)
            run(server, f"import {module}\n1")  # the import name the text gives works
    else:
        assert named == [] and "no third-party packages built in" in text, text
        failed = rpc(server, "run_code", {"language": "python", "code": "import numpy\n1"})
        assert failed["error"]["type"] == "ModuleNotFoundError", failed

    guide = rpc(server, "load_skills_protocol_guide", {})["content"]
    assert f"Image served: {current()}. Python: CPython {major_minor} " in guide
    assert "create_session" in guide and "session_id" in guide


def test_the_texts_state_what_differs_on_this_image_and_it_holds(server: LiveServer) -> None:
    """The image's differences the texts state (docs/images.md), held against the guest."""
    tools = httpx2.get(server.base_url + "/tools", timeout=60).json()
    major_minor = run(server, "import sys\n'%d.%d' % sys.version_info[:2]")
    skill_text = str(next(t["description"] for t in tools if t["name"] == "execute_skill"))
    assert f"Skills run on CPython {major_minor} here (the {current()} image)" in skill_text, skill_text
    assert "keeps to 3.11 syntax" in skill_text, skill_text
    guide = rpc(server, "load_skills_protocol_guide", {})["content"]
    assert "docs/images.md" in guide and f"Skills run on CPython {major_minor} here" in guide
    text = run_code_text(tools)
    listing = rpc(server, "run_code", {"language": "python", "code": "import os\nos.listdir('/')"})
    blobs = run(server, "import os\nos.path.isdir('/blobs')")
    ctypes_use = rpc(server, "run_code", {"language": "python", "code": "import ctypes\nctypes.CDLL(None)"})
    assert "cannot be listed" not in text, text  # both images list `/`: the mount points
    assert listing["status"] == "completed" and {"home", "skills", "tmp", "workspace"} <= set(listing["output"]), listing
    if current() == "data":
        assert "/blobs always exists" in text, text
        assert blobs is True
        assert ctypes_use["status"] == "failed" and ctypes_use["error"]["type"] == "OSError", ctypes_use
    else:
        assert blobs is False  # no input blobs: no /blobs
        assert ctypes_use["status"] == "failed" and ctypes_use["error"]["type"] == "ModuleNotFoundError", ctypes_use


def test_every_surface_states_the_same_image(server: LiveServer) -> None:
    over_http = run_code_text(httpx2.get(server.base_url + "/tools?format=mcp", timeout=60).json())

    async def listed() -> str:
        async with MCPClient(server.base_url + "/mcp") as mcp:
            tools = (await mcp.list_tools()).tools
            return str(next(t.description for t in tools if t.name == "run_code"))

    assert asyncio.run(listed()) == over_http
    env = wasmrun_env()
    printed = subprocess.run([sys.executable, "-m", "wasmrun", "tools", "--format", "mcp"], env=env,
                             capture_output=True, text=True, timeout=120, check=True).stdout
    assert run_code_text(json.loads(printed)) == over_http
    assert f"CPython {image_facts(current()).python} " in over_http


def test_the_operator_s_added_packages_are_named(tmp_path: Path) -> None:
    from wasmrun.capabilities import installed_text
    from wasmrun.imagefacts import ImageFacts, Package

    image = image_facts(current())
    added = ImageFacts(image.name, image.python, image.modules, image.notable, image.built_in,
                       (Package("tinydb", "4.8.0", ""),))
    assert "added by this server's operator: tinydb 4.8.0" in installed_text(added)
