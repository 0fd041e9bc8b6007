"""The mapping of wasmrun's run results onto the E2B code interpreter's events (pure)."""

from __future__ import annotations

import base64
import json

import pytest
from e2b_code_interpreter.models import Execution, parse_output

from wasmrun.doors.cells import CellRefused, split
from wasmrun.e2b import results
from wasmrun.e2b.calls import FrontError
from wasmrun.e2b.paths import guest_path, relative


def _parsed(events: list[dict[str, object]]) -> Execution:
    """The events as the real SDK reads them."""
    execution = Execution()
    for event in events:
        parse_output(execution, results.line(event).decode())
    return execution


def _sent(event: dict[str, object] | None) -> dict[str, object]:
    """The event as the front sends it (its forms go in as JSON text)."""
    assert event is not None
    sent: dict[str, object] = json.loads(results.line(event))
    return sent


def test_a_display_with_every_form_becomes_one_result() -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    display = {
        "data": {"text/plain": "<Figure>", "text/html": "<b>x</b>", "image/png": png,
                 "image/svg+xml": "<svg/>", "application/json": {"a": [1, 2]}, "text/markdown": "# t"},
        "main": True,
    }
    event = results.display_result(display)
    assert event is not None
    execution = _parsed([event])
    result = execution.results[0]
    assert (result.text, result.html, result.png, result.svg, result.json, result.markdown) == (
        "<Figure>", "<b>x</b>", png, "<svg/>", {"a": [1, 2]}, "# t")
    assert result.is_main_result and execution.text == "<Figure>"


def test_forms_kept_as_blobs_are_read_back_and_binary_ones_base64() -> None:
    blobs = {"blob_png": b"\x89PNG\x00\xff", "blob_html": "<table>é</table>".encode()}
    display = {"data": {"text/plain": "df"}, "main": False, "blobs": {"image/png": "blob_png", "text/html": "blob_html"}}
    event = _sent(results.display_result(display, blobs.get))
    assert base64.b64decode(str(event["png"])) == b"\x89PNG\x00\xff"
    assert event["html"] == "<table>é</table>" and event["is_main_result"] is False
    missing = results.display_result({"data": {}, "blobs": {"image/png": "gone"}}, blobs.get)
    assert missing is None  # a display with nothing to show is no result


def test_unknown_mime_types_go_to_extra() -> None:
    event = _sent(results.display_result({"data": {"text/plain": "x", "application/vnd.custom": {"k": 1}}}))
    assert event["extra"] == {"application/vnd.custom": {"k": 1}}


def test_displays_are_the_results_in_order_with_their_blobs_read_back() -> None:
    done = {"status": "completed", "output": 3, "displays": [
        {"data": {}, "blobs": {"image/png": "blob:1"}},
        {"data": {"image/svg+xml": "<svg/>"}},
        {"data": {"text/plain": "3"}, "main": True},
    ]}
    assert results.image_blobs(done) == ["blob:1"]
    execution = _parsed(results.run_events(done, 1, {"blob:1": b"\x89PNG"}.get))
    assert [r.formats() for r in execution.results] == [["png"], ["svg"], ["text"]]
    assert base64.b64decode(execution.results[0].png) == b"\x89PNG" and not execution.results[0].is_main_result
    assert execution.text == "3" and execution.results[2].is_main_result
    assert _parsed(results.run_events({"status": "completed", "output": None}, 1)).results == []


def test_a_failed_run_is_an_error_with_name_value_and_traceback() -> None:
    message = 'Traceback (most recent call last):\n  File "<cell 2>", line 1, in <module>\nKeyError: \'k\''
    execution = _parsed(results.run_events({"status": "failed", "error": {"type": "KeyError", "message": message}}, 2))
    assert execution.error is not None
    assert (execution.error.name, execution.error.value) == ("KeyError", "'k'")
    assert execution.error.traceback == message and execution.results == []
    plain = results.error_event("Timeout", "the run exceeded its time limit of 2000 ms")
    assert plain["value"] == "the run exceeded its time limit of 2000 ms"
    assert plain["traceback"].startswith("Timeout: ")


def test_error_values_keep_their_lines_and_lose_a_qualified_type_name() -> None:
    nested = ('Traceback (most recent call last):\n  File "<cell 1>", line 9, in <module>\n    final_answer(1)\n'
              '    ~~~~~~~~~~~~^^^\n  File "<cell 1>", line 7, in final_answer\n    raise FinalAnswerException(x)\n'
              'run_code.final_answer.<locals>.FinalAnswerException: safe:{"a": "b: c"}')
    assert results.error_event("FinalAnswerException", nested)["value"] == 'safe:{"a": "b: c"}'
    multi = ('Traceback (most recent call last):\n  File "<cell 2>", line 1, in <module>\n'
             "ValueError: two\nlines\n  indented too")
    assert results.error_event("ValueError", multi)["value"] == "two\nlines\n  indented too"
    bare = 'Traceback (most recent call last):\n  File "<cell 3>", line 1, in <module>\nKeyboardInterrupt'
    assert results.error_event("KeyboardInterrupt", bare)["value"] == ""
    syntax = '  File "<cell 5>", line 1\n    x = 1 +\n           ^\nSyntaxError: invalid syntax'
    event = results.error_event("SyntaxError", syntax)
    assert event["value"] == "invalid syntax" and event["traceback"] == syntax


def test_output_events_carry_the_stream_and_a_timestamp() -> None:
    execution = _parsed([results.output_event("stdout", "a\n"), results.output_event("stderr", "b\n"),
                         results.output_event("log", "c\n")])
    assert execution.logs.stdout == ["a\n", "c\n"] and execution.logs.stderr == ["b\n"]
    assert isinstance(json.loads(results.line(results.output_event("stdout", "x")))["timestamp"], int)


def test_output_goes_out_in_whole_lines_per_stream() -> None:
    lines = results.Lines()
    fed = [*lines.feed("stdout", "y is"), *lines.feed("stderr", "oops"), *lines.feed("stdout", " 42"),
           *lines.feed("stdout", "\nnext"), *lines.feed("stderr", "\n"), *lines.feed("log", "a\nb\n")]
    assert [(e["type"], e["text"]) for e in fed] == [("stdout", "y is 42\n"), ("stderr", "oops\n"),
                                                     ("stdout", "nexta\nb\n")]
    assert [e["text"] for e in lines.feed("stdout", "no newline")] == []
    assert [(e["type"], e["text"]) for e in lines.flush()] == [("stdout", "no newline")]
    assert lines.flush() == []
    long = lines.feed("stdout", "x" * results.Lines.MAX_PENDING)
    assert len(long) == 1 and len(long[0]["text"]) == results.Lines.MAX_PENDING


def test_cells_split_install_and_shell_lines_into_commands() -> None:
    steps = split("!pip install pandas\n%pip install -q numpy\nx = 1\nx\n!ls -la")
    assert [(s.kind, s.text, s.line) for s in steps] == [
        ("command", "pip install pandas", 1), ("command", "pip install -q numpy", 2),
        ("python", "x = 1\nx", 3), ("command", "ls -la", 5),
    ]
    assert split("!{sys.executable} -m pip install humanize")[0].text == "python -m pip install humanize"
    for refused in ("%timeit x", "if x:\n    !rm -rf /"):
        with pytest.raises(CellRefused):
            split(refused)
    assert [s.kind for s in split("a != b\nx = {'!': 1}")] == ["python"]  # `!=` and a string are Python


def test_paths_map_home_to_the_workspace_and_refuse_escapes() -> None:
    assert relative("/home/user/a/b.txt") == "a/b.txt"
    assert relative("a/./b.txt") == "a/b.txt"
    assert relative("~/x") == "x"
    assert relative("/home/user") == ""
    assert guest_path("/home/user/d") == "/workspace/d"
    for bad in ("/etc/passwd", "../x", "/home/user/../../etc", "a\x00b", "x" * 5000, "", "/home/userx/a",
                "/".join(["d"] * 100)):
        try:
            relative(bad)
        except FrontError as exc:
            assert exc.status == 400
        else:
            raise AssertionError(bad)


def test_forms_of_one_blob_are_made_once_and_counted_each_time_they_are_sent() -> None:
    blob = b"\x89PNG" + b"\x00" * 3000
    reads: list[str] = []

    def read(blob_id: str) -> bytes | None:
        reads.append(blob_id)
        return blob if blob_id == "blob:big" else None

    display = {"data": {"text/plain": "fig"}, "blobs": {"image/png": "blob:big", "image/jpeg": "blob:big"}}
    encoded = len(base64.b64encode(blob))
    # Room for five base64 copies (and the inline texts): the sixth and later are left out.
    budget = 5 * encoded + 100
    events = results.run_events({"status": "completed", "displays": [display] * 4}, 1, read, budget)
    shown = [e for e in events if e["type"] == "result"]
    assert len(shown) == 4 and [("png" in e, "jpeg" in e) for e in shown] == [
        (True, True), (True, True), (True, False), (False, False)]
    assert shown[0]["png"] is shown[1]["jpeg"]  # one value, made once, shared
    assert reads == ["blob:big"]
    note = [e for e in events if e["type"] == "stderr"]
    assert len(note) == 1 and "3 display form(s) left out" in note[0]["text"]
    # A blob gone since (or never readable) leaves its form out and says so.
    gone = results.run_events({"status": "completed", "displays": [{"blobs": {"image/png": "blob:gone"}}]}, 1, read)
    assert [e["type"] for e in gone] == ["stderr", "number_of_executions"]


def test_forms_count_what_is_sent_escapes_included_and_json_stays_text() -> None:
    controls = b"\x01" * 1000  # each goes out as \u0001: six bytes a byte
    blobs = {"blob:ctl": controls, "blob:json": b"[" + b"{}," * 999 + b"{}]"}
    roomy = results.Expansion(blobs.get, budget=10_000)
    form = roomy.from_blob("text/plain", "blob:ctl")
    assert form is not None and len(form) == 6 * 1000 + 2 and roomy.spent == len(form)
    assert results.Expansion(blobs.get, budget=5_000).from_blob("text/plain", "blob:ctl") is None
    # A JSON form is the blob's own text, checked, never a tree of objects.
    made = roomy.from_blob("application/json", "blob:json")
    assert made is not None and bytes(made) == blobs["blob:json"]
    event = _sent(results.display_result({"blobs": {"application/json": "blob:json"}}, blobs.get))
    assert event["json"] == [{}] * 1000
    # An inline form in a text field that is not text is no field of E2B's Result.
    assert results.display_result({"data": {"text/html": {"not": "text"}}}) is None


def test_a_cells_room_is_given_back_once_when_its_client_leaves_mid_way() -> None:
    from wasmrun.e2b.calls import RESULTS_ROOM, Front
    from wasmrun.e2b.interpreter import CellStream

    front = Front.__new__(Front)  # the room's bookkeeping alone: no dispatcher needed
    front._results_held = {}
    first, second = CellStream(front, "t"), CellStream(front, "t")
    assert first.take_room(40 << 20) == 40 << 20 and second.take_room(40 << 20) == RESULTS_ROOM - (40 << 20)
    first.leave()  # its client left while its blobs were read ...
    first.keep(1000)  # ... and the cell, ending, settles what it used: nothing is kept
    assert front.take_room("t", RESULTS_ROOM) == 40 << 20  # given back once, not twice
    second.keep(5 << 20)
    front.give_room("t", 40 << 20)
    assert front.take_room("t", RESULTS_ROOM) == RESULTS_ROOM - (5 << 20)
