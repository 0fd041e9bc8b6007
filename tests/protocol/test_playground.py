"""The playground page at `/`, in a real headless Chromium (Debian's `chromium`,
installed by .ci/chromium; driven by playwright's Python package with that
executable, never a downloaded browser) against a real `wasmrun serve`.

The page is held to the API's rules: its calls carry the tenant key typed into it,
and a page served by another origin (or reached through another Host name) cannot
call the server. A screenshot of each browser test is kept in tests/artifacts/.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.images import current
from tests.liveserver import REPO, LiveServer, wasmrun_env

ARTIFACTS = REPO / "tests" / "artifacts"

# A run that prints, returns a value and writes a PNG (made by hand: no imaging library needed).
IMAGE_CODE = """\
import struct, zlib
from runtime import blobs

def png(width, height, rgb):
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    rows = b"".join(b"\\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")

def main(args):
    print("drawing", args["w"], "x", args["h"])
    return {"chart": blobs.write_bytes(png(args["w"], args["h"], (30, 120, 200)), "image/png"), "ok": True}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("playground") / "data")
    yield live
    live.stop()


@pytest.fixture(scope="module")
def tenant_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    data = tmp_path_factory.mktemp("playground-tenants") / "data"
    key = subprocess.run(
        [sys.executable, "-m", "wasmrun", "tenants", "add", "team-a", "--data-dir", str(data)],
        env=wasmrun_env(), capture_output=True, text=True, check=True,
    ).stdout.strip()
    live = LiveServer(data)
    yield live, key
    live.stop()


# -- the page over plain HTTP ------------------------------------------------------


def test_the_page_and_its_files_are_served_with_headers_that_forbid_framing_and_foreign_code(server: LiveServer) -> None:
    page = httpx2.get(server.base_url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "wasmrun playground" in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        asset = httpx2.get(f"{server.base_url}/playground/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
    for bad in ("../cli.py", "..%2fcli.py", "nope.js", "%00"):
        assert httpx2.get(f"{server.base_url}/playground/{bad}").status_code == 404


def _call(server: LiveServer, headers: dict[str, str]) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "list_skills", "params": {}}
    return httpx2.post(server.endpoint, json=body, headers=headers)


def test_the_page_may_call_the_server_that_served_it_and_no_other_page_may(server: LiveServer) -> None:
    own = f"http://127.0.0.1:{server.port}"
    assert _call(server, {"Origin": own}).status_code == 200
    # Another local page (another port), a look-alike, a rebound name, an opaque origin.
    for origin, host in (
        (f"http://127.0.0.1:{server.port + 1}", None),
        (f"http://127.0.0.1:{server.port}.evil.example", None),
        (f"http://evil.example:{server.port}", f"evil.example:{server.port}"),
        ("null", None),
        (f"ftp://127.0.0.1:{server.port}", None),
    ):
        headers = {"Origin": origin} | ({"Host": host} if host else {})
        refused = _call(server, headers)
        assert refused.status_code == 403, origin
    # The page itself is as guarded as the API: a rebound Host name gets nothing.
    assert httpx2.get(server.base_url + "/", headers={"Host": "evil.example"}).status_code == 403


# -- the page in a browser ---------------------------------------------------------


def _shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def test_type_code_run_it_and_see_output_logs_receipt_and_image(browser: Any, server: LiveServer) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(server.base_url + "/")
    page.wait_for_selector("#skills .skill-link")
    page.fill("#code", IMAGE_CODE)
    page.fill("#args", '{"w": 48, "h": 24}')
    page.click("#run")
    page.wait_for_selector("#images img")
    assert page.text_content("#status") == "completed"
    output = page.text_content("#output") or ""
    assert '"ok": true' in output and '"chart": "blob:' in output
    assert "drawing 48 x 24" in (page.text_content("#logs") or "")
    receipt = page.text_content("#receipt") or ""
    assert "run_id" in receipt and "run_" in receipt and "cpu_ms" in receipt
    size = page.eval_on_selector("#images img", "img => [img.naturalWidth, img.naturalHeight]")
    assert size == [48, 24]
    _shot(page, "playground-run")

    # A failing run shows its error type and traceback with the line.
    page.fill("#code", "def main(args):\n    return 1 / 0\n")
    page.click("#run")
    page.wait_for_selector("#error-box:not([hidden])")
    assert page.text_content("#status") == "failed"
    assert page.text_content("#error-type") == "ZeroDivisionError"
    assert "line 2" in (page.text_content("#error") or "")
    # A call the server refuses (bad args) is shown, not swallowed.
    page.fill("#args", "[1, 2]")
    page.click("#run")
    page.wait_for_function("() => document.querySelector('#status').textContent === 'call refused'")
    assert "JSON object" in (page.text_content("#error") or "")
    page.close()


DISPLAY_CODE = IMAGE_CODE.replace("def main(args):", "def unused(args):") + """
class Table:
    def _repr_html_(self):
        return "<table><tr><th>k</th></tr><tr><td>cell-a</td></tr></table><script>parent.hacked = 1</script>"
    def __repr__(self):
        return "Table()"

class Picture:
    def _repr_png_(self):
        return png(20, 10, (200, 0, 0))

display(Table())
display(Picture())
40 + 2
"""


def test_display_results_show_html_in_a_sandbox_and_pictures_as_images(browser: Any, server: LiveServer) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(server.base_url + "/")
    page.fill("#code", DISPLAY_CODE)
    page.fill("#args", "{}")
    page.click("#run")
    page.wait_for_selector("#displays .display.main")
    assert page.is_visible("#displays-head")
    shown = page.query_selector_all("#displays .display")
    assert len(shown) == 3
    frame = page.query_selector("#displays iframe")
    assert frame is not None and frame.get_attribute("sandbox") == ""
    inner = frame.content_frame()
    assert inner is not None and "cell-a" in (inner.text_content("td") or "")
    assert page.evaluate("() => window.hacked") is None  # the HTML's script never ran
    size = page.eval_on_selector("#displays img", "img => [img.naturalWidth, img.naturalHeight]")
    assert size == [20, 10]
    assert "42" in (page.text_content("#displays .display.main") or "")
    _shot(page, "playground-displays")
    page.close()


def test_browse_a_skill_read_its_skill_md_and_run_it(browser: Any, server: LiveServer) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(server.base_url + "/")
    page.click("#skills .skill-link[data-skill='text.stats']")
    page.wait_for_function("() => document.querySelector('#doc').textContent.length > 40")
    doc = page.text_content("#doc") or ""
    skill_md = (REPO / "skills" / "text.stats" / "SKILL.md").read_text()
    assert skill_md.split("---")[-1].strip()[:40] in doc
    page.check("input[name=mode][value=skill]")
    page.select_option("#skill-pick", "text.stats")
    page.fill("#args", '{"text": "one two two three three three"}')
    page.click("#run")
    page.wait_for_function("() => ['completed', 'failed'].includes(document.querySelector('#status').textContent)")
    assert page.text_content("#status") == "completed", page.text_content("#error")
    _shot(page, "playground-skill")
    page.close()


def test_with_tenants_the_page_needs_the_key_and_sends_it_as_bearer(
    browser: Any, tenant_server: tuple[LiveServer, str]
) -> None:
    server, key = tenant_server
    context = browser.new_context()
    page = context.new_page()
    page.goto(server.base_url + "/")
    page.wait_for_function("() => document.querySelector('#skills-state').textContent.includes('cannot list')")
    assert "tenant key" in (page.text_content("#skills-state") or "")
    page.fill("#key", key)
    page.click("#key-save")
    page.wait_for_selector("#skills .skill-link")
    assert page.evaluate("sessionStorage.getItem('wasmrun.tenant_key')") == key
    page.fill("#code", "40 + 2")
    page.fill("#args", "{}")
    page.click("#run")
    page.wait_for_function("() => document.querySelector('#status').textContent === 'completed'")
    assert page.text_content("#output") == "42"
    # The key lives in this tab only: a new tab of the same browser starts without it.
    other = context.new_page()
    other.goto(server.base_url + "/")
    assert other.evaluate("sessionStorage.getItem('wasmrun.tenant_key')") is None
    context.close()


def test_open_a_session_run_in_it_upload_a_file_and_see_the_image_served(browser: Any, server: LiveServer) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    page.goto(server.base_url + "/")
    page.wait_for_function("() => document.querySelector('#server-image').textContent.startsWith('image: ')")
    assert (page.text_content("#server-image") or "").startswith(f"image: {current()}")

    page.click("#session-new")
    page.wait_for_selector("#sessions li")
    session_id = page.get_attribute("#sessions li", "data-session") or ""
    assert session_id.startswith("ses_") and page.input_value("#session-pick") == session_id
    for code, wanted in (("total = 20\ntotal", "20"), ("total * 2", "40")):  # state carries over
        page.fill("#code", code)
        page.fill("#args", "{}")
        page.click("#run")
        page.wait_for_function(f"() => document.querySelector('#output').textContent === {wanted!r}")
    page.wait_for_function("() => (document.querySelector('#sessions li small')?.textContent || '').includes('2 runs')")

    data = b"city,sales\nOslo,3\nLima,4\n"
    page.set_input_files("#upload", files=[{"name": "sales.csv", "mimeType": "text/csv", "buffer": data}])
    page.click("#upload-send")
    page.wait_for_function("() => document.querySelector('#upload-state').textContent.includes('blob:')")
    blob_id = page.input_value("#blobs")
    assert blob_id.startswith("blob:") and "," not in blob_id
    page.select_option("#session-pick", "")  # a fresh sandbox, the blob mounted
    page.fill("#code", f"import csv\nrows = list(csv.DictReader(open('/blobs/' + {blob_id!r})))\n"
                       "sum(int(r['sales']) for r in rows)")
    page.click("#run")
    page.wait_for_function("() => document.querySelector('#output').textContent === '7'")
    shot = _shot(page, "playground-session-upload")
    assert shot.stat().st_size > 10_000

    stored = httpx2.post(server.endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "read_blob",
                                                "params": {"blob_id": blob_id, "mode": "full"}}, timeout=60).json()
    assert stored["result"]["content"] == data.decode() and stored["result"]["kind"] == "text/csv"

    page.click(f"#sessions li[data-session='{session_id}'] .session-close")
    page.wait_for_function("() => document.querySelectorAll('#sessions li').length === 0")
    listed = httpx2.post(server.endpoint, json={"jsonrpc": "2.0", "id": 1, "method": "list_sessions", "params": {}},
                         timeout=60).json()
    assert listed["result"]["sessions"] == []
    page.close()
