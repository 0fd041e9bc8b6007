"""Operator-added packages on the data image (CPython 3.15): `wasmrun packages add
--image data` fills the cp315 layer, which a running `serve --image data` mounts at
/packages from its next run; packages the image has built in (lxml, Pillow,
XlsxWriter, defusedxml...) are not added again, so a pure package that needs them
(python-pptx) can be added. Real pip against the package index, a real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.liveserver import LiveServer
from tests.packages.test_packages import packages, rpc, run_code
from wasmrun.sandbox import data_engine, ready_image

pytestmark = pytest.mark.images("data")  # the data image only (tests/images.py)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    added = packages(folder, "add", "--image", "data", "python-pptx", "python-docx", "tabulate")
    assert added.returncode == 0, added.stderr
    assert "in the image already" in added.stderr and "lxml" in added.stderr and "tabulate" in added.stderr
    return folder


@pytest.fixture(scope="module")
def server(data_dir: Path) -> Iterator[LiveServer]:
    ready_image(data_engine(), quiet=False)  # built here, not inside the server's start-up wait
    live = LiveServer(data_dir, "--image", "data")
    yield live
    live.stop()


def test_layer_leaves_out_what_the_image_has(data_dir: Path) -> None:
    listed = packages(data_dir, "list", "--image", "data").stdout.split()
    names = {line.split("==")[0] for line in listed if "==" in line}
    assert {"python-pptx", "python-docx"} <= names
    assert not names & {"lxml", "pillow", "xlsxwriter", "typing-extensions", "tabulate"}  # the image's own
    info = json.loads((data_dir / "packages" / "cp315" / "current" / "layer.json").read_text())
    assert info["python"] == "cp315" and info["bytecode"] is False  # 3.15 bytecode: made by the guest
    assert packages(data_dir, "list", "--image", "stdlib").stdout == ""  # the stdlib image's layer is another one


def test_added_package_uses_the_image_libraries(server: LiveServer) -> None:
    code = (
        "import pptx, docx, tabulate, lxml, sys\n"
        "from pptx import Presentation\n"
        "deck = Presentation()\n"
        "slide = deck.slides.add_slide(deck.slide_layouts[1])\n"
        "slide.shapes.title.text = 'Quarterly numbers'\n"
        "deck.save('/workspace/deck.pptx')\n"
        "again = Presentation('/workspace/deck.pptx')\n"
        "doc = docx.Document()\n"
        "doc.add_paragraph('First line')\n"
        "doc.save('/workspace/note.docx')\n"
        "[again.slides[0].shapes.title.text, docx.Document('/workspace/note.docx').paragraphs[0].text,\n"
        " pptx.__file__, lxml.__file__.startswith('/usr/local/lib/'), sys.version_info[:2]]"
    )
    result = run_code(server, code)
    assert result["status"] == "completed", result
    title, para, where, lxml_from_image, version = result["output"]
    assert (title, para, lxml_from_image, version) == ("Quarterly numbers", "First line", True, [3, 15])
    assert where == "/packages/pptx/__init__.py"


def test_layer_is_read_only_in_runs(server: LiveServer) -> None:
    result = run_code(server, "open('/packages/docx/__init__.py', 'a').write('x = 1')")
    assert result["status"] == "failed"
    assert "PermissionError" in result["error"]["message"] or "OSError" in result["error"]["message"]


def test_skill_may_require_a_package_the_image_has(server: LiveServer) -> None:
    manifest = {
        "name": "user.pkgs.safe_xml", "version": "0.1.0", "description": "Parses XML safely.",
        "kind": "action", "runtime": {"language": "python", "entrypoint": "code/main.py"},
        "packages": {"requires": ["defusedxml", "python-pptx"]},
    }
    code = "import defusedxml.ElementTree as ET\n\ndef main(args):\n    return ET.fromstring(args['xml']).tag\n"
    created = rpc(server, "create_skill", {
        "manifest": manifest, "skill_md": "# x\n", "files": [{"path": "code/main.py", "content": code}],
    })
    assert "result" in created, created
    ran = rpc(server, "execute_skill", {"name": "user.pkgs.safe_xml", "args": {"xml": "<doc/>"}})
    assert ran["result"]["output"] == "doc", ran


def test_change_seen_by_running_data_server_without_restart(tmp_path: Path) -> None:
    ready_image(data_engine(), quiet=False)
    live = LiveServer(tmp_path, "--image", "data")
    try:
        before = run_code(live, "import humanize")
        assert before["status"] == "failed"
        assert "ModuleNotFoundError" in before["error"]["message"]
        assert run_code(live, "import os\nos.listdir('/packages')")["output"] == []  # mounted, empty
        added = packages(tmp_path, "add", "--image", "data", "humanize")
        assert added.returncode == 0, added.stderr
        after = run_code(live, "import humanize\nhumanize.intcomma(1234567)")
        assert after["output"] == "1,234,567", after
        removed = packages(tmp_path, "remove", "--image", "data", "humanize")
        assert removed.returncode == 0, removed.stderr
        assert run_code(live, "import humanize")["status"] == "failed"
    finally:
        live.stop()
