"""The host's check of the guest's display frames (wasmrun/sandbox/guest/displays.py): each
rule a hostile guest could break is refused with a reason, the good frame is kept,
and a run's displays stay bounded in count and bytes. (The same frames from a real
guest, on a real server: tests/protocol/test_display_results.py.)"""

from __future__ import annotations

import json

import pytest

from wasmrun.abi import MAX_DISPLAY_BYTES, MAX_DISPLAYS
from wasmrun.sandbox import Display
from wasmrun.sandbox.guest.displays import RUN_DISPLAY_BYTES, Displays, check

WROTE = ["blob:" + "a" * 32]


def frame(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_a_good_frame_is_kept_as_it_was_sent() -> None:
    sent = frame(data={"text/plain": "x", "image/png": "iVBORw0KGgo=", "application/json": {"a": [1]},
                       "application/vnd.vegalite.v5+json": {"mark": "bar"}},
                 main=True, blobs={"text/html": WROTE[0]})
    assert check(sent, WROTE) == Display(
        data={"text/plain": "x", "image/png": "iVBORw0KGgo=", "application/json": {"a": [1]},
              "application/vnd.vegalite.v5+json": {"mark": "bar"}},
        main=True, blobs={"text/html": WROTE[0]},
    )


@pytest.mark.parametrize(("sent", "why"), [
    (b"not json", "not valid JSON"),
    (b"[" * 1000 + b"]" * 1000, "nested deeper"),
    (b'{"data": {"text/plain": NaN}}', "not valid JSON"),
    (b'{"data": {"text/plain": "\\ud800"}}', "not valid JSON"),
    (frame(data={"Text/Plain": "x"}), "not a MIME type"),
    (frame(data={"text/plain\n": "x"}), "not a MIME type"),
    (frame(data={"x" * 300 + "/y": "x"}), "not a MIME type"),
    (frame(data={"image/png": "not*base64"}), "not base64"),
    (frame(data={"image/png": 12}), "not text"),
    (frame(data={"text/html": ["<b>"]}), "not text"),
    (frame(data={"text/plain": "x"}, blobs={"image/png": "blob:" + "b" * 32}), "not one the run wrote"),
    (frame(data={"text/plain": "x"}, extra=True), "not a display"),
    (frame(data=[1, 2]), "not a display"),
    (frame(data={"text/plain": "x"}, main="yes"), "not a display"),
    (frame(data={f"text/x-{i}": "y" for i in range(20)}), "more than 16 forms"),
    (b" " * (MAX_DISPLAY_BYTES + 1), "larger than"),
])
def test_a_frame_that_breaks_a_rule_is_refused_with_why(sent: bytes, why: str) -> None:
    found = check(sent, WROTE)
    assert isinstance(found, str) and why in found, found


def test_a_runs_displays_are_bounded_in_count_and_bytes() -> None:
    shown = Displays()
    for i in range(MAX_DISPLAYS + 10):
        shown.add(frame(data={"text/plain": str(i)}), [])
    assert len(shown.shown) == MAX_DISPLAYS
    assert shown.warnings() == [f"10 displays were dropped: the run showed more than {MAX_DISPLAYS}"]

    heavy = Displays()
    big = frame(data={"text/plain": "x" * (MAX_DISPLAY_BYTES - 100)})
    for _ in range(RUN_DISPLAY_BYTES // len(big) + 3):
        heavy.add(big, [])
    assert heavy.bytes <= RUN_DISPLAY_BYTES and heavy.dropped_count == 3
    heavy.add(b"junk", [])
    assert "4 displays were dropped" in heavy.warnings()[0] and "not valid JSON" in heavy.warnings()[0]


def test_a_secret_in_a_streamed_display_is_replaced_by_its_placeholder() -> None:
    from wasmrun.egress.secrets import Redactor
    from wasmrun.sandbox import OutputChunk, OutputStream

    sent: list[OutputChunk] = []
    stream = OutputStream(sent.extend, 1 << 20, Redactor({"TOKEN": "s3cr3t-value"}))
    stream.write("stdout", b"before\n")
    stream.display(Display(data={"text/plain": "key=s3cr3t-value", "application/json": {"k": "s3cr3t-value"}}))
    stream.finish()
    assert [c.stream for c in sent] == ["stdout", "display"]
    assert "s3cr3t" not in sent[1].text and json.loads(sent[1].text)["data"]["text/plain"].startswith("key=")


def test_a_secret_in_a_runs_displays_is_replaced_by_its_placeholder(tmp_path: object) -> None:
    from pathlib import Path

    from wasmrun.blobs.store import FileBlobStore
    from wasmrun.sandbox import RunRequest, SandboxEngine

    assert isinstance(tmp_path, Path)
    engine = SandboxEngine(FileBlobStore(tmp_path))
    try:
        code = "import os\ndisplay('token ' + os.environ['TOKEN'])\nos.environ['TOKEN']\n"
        result = engine.run(RunRequest(kind="code", code=code, env={"TOKEN": "s3cr3t-value"}))
    finally:
        engine.close()
    assert result.error is None, result.error
    assert len(result.displays) == 2
    assert "s3cr3t" not in json.dumps([d.data for d in result.displays])


def test_mcp_text_of_hostile_html_is_made_in_one_pass() -> None:
    """A guest's HTML display with no text/plain, as MCP's text content: tags are spaces,
    script and style are gone, and 1 MB of unclosed tags (a regex's rescans: hours of the
    server's loop) ends well inside the bound below."""
    import threading

    from wasmrun.mcp.displays import html_text

    assert html_text("<p>a &amp; b</p><script>x<y</script >c<style>s</style>d<scripty>e</scripty>") == " a & b  c d e "
    answers: list[str] = []
    worker = threading.Thread(
        target=lambda: answers.extend(html_text(t) for t in ("<script" * 150_000, "<" * 1_000_000, "<b " * 300_000)),
        daemon=True,
    )
    worker.start()
    worker.join(120)  # a bound against the quadratic (hours), not a speed check
    assert answers == ["", "", ""]
