"""What a run's result becomes in the service's code/execute answer (wasmrun/azure/results.py),
as pure functions: no server."""

from __future__ import annotations

import base64

import msgspec

from wasmrun.azure import results
from wasmrun.sandbox import OutputChunk

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nrest").decode()


def raw(value: object) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(value))


def test_the_main_display_is_the_result_a_number_as_a_number() -> None:
    assert results.result_value({"data": {"text/plain": raw("42")}, "main": True}) == 42
    assert results.result_value({"data": {"text/plain": raw("-2.5e3")}, "main": True}) == -2500.0
    assert results.result_value({"data": {"text/plain": raw("'text'")}, "main": True}) == "'text'"
    assert results.result_value({"data": {"text/plain": raw("nan")}, "main": True}) == "nan"
    assert results.result_value({"data": {"application/json": raw({"a": [1]}), "text/plain": raw("x")}}) == {"a": [1]}
    assert results.result_value(None) == ""


def test_a_picture_is_the_services_image_inline_or_from_its_blob() -> None:
    shown = {"data": {"image/png": raw(PNG), "text/plain": raw("<Figure>")}}
    assert results.result_value(shown) == {"type": "image", "format": "png", "base64_data": PNG}
    kept = {"data": {"text/plain": raw("<Figure>")}, "blobs": {"image/jpeg": "blob-1"}}
    assert results.result_value(kept, {"blob-1": b"\xff\xd8jpeg"}.get) == {
        "type": "image", "format": "jpeg", "base64_data": base64.b64encode(b"\xff\xd8jpeg").decode()}
    assert results.image_blob({"displays": [kept]}) == "blob-1"


def test_the_main_display_wins_then_the_last_picture() -> None:
    picture = {"data": {"image/png": raw(PNG)}}
    main = {"data": {"text/plain": raw("3")}, "main": True}
    assert results.chosen_display([picture, main]) is main
    assert results.chosen_display([{"data": {"text/html": raw("<b>")}}, picture]) is picture
    assert results.chosen_display([{"data": {"text/html": raw("<b>")}}]) is None
    assert results.chosen_display("not a list") is None


def test_a_failure_has_its_traceback_or_its_limit_on_stderr() -> None:
    tb = 'Traceback (most recent call last):\n  File "<cell 1>", line 1, in <module>\n    1/0\n'
    failed = {"status": "failed", "error": {"type": "ZeroDivisionError", "message": tb + "ZeroDivisionError: division by zero"}}
    output = results.Output()
    output.feed([OutputChunk("stdout", "before\n"), OutputChunk("stderr", "warn\n"), OutputChunk("display", "{}")])
    props = results.properties(failed, output, 7)
    assert props == {"status": "Failure", "stdout": "before\n", "result": "", "executionTimeInMillis": 7,
                     "stderr": "warn\n" + tb + "ZeroDivisionError: division by zero\n"}
    stopped = results.error_text({"type": "Timeout", "message": tb})
    assert stopped.startswith(tb) and stopped.endswith("Timeout: the run was stopped by its limit (docs/run-contract.md)\n")
    assert results.error_text({"type": "MemoryLimitExceeded", "message": "over 256 MiB"}) == "MemoryLimitExceeded: over 256 MiB\n"
    assert results.error_text("junk") == "Error: the run failed\n"


def test_output_past_its_bound_is_cut_and_said() -> None:
    output = results.Output(most=10)
    output.feed([OutputChunk("stdout", "x" * 8), OutputChunk("stdout", "y" * 8)])
    props = results.properties({"status": "completed"}, output, 1)
    assert props["stdout"] == "x" * 8 + "yy" and "cut at 10" in props["stderr"]
