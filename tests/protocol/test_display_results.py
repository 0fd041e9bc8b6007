"""Results a model can read (issue #31, items 2 and 3), on a real `wasmrun serve`:
values keep their labels and types in JSON, NaN becomes null with a warning saying
where, values with no JSON form come back as text with a warning, and display
results (`display(obj)`, a last expression, `plt.show()`) come back in order with
their MIME forms over JSON-RPC, streamed as `run/display`, over MCP and through the
typed client. A hostile guest's displays are checked, never trusted.

Runs on the stdlib image (objects with `_repr_html_` and friends) and, with
on the data image too (tests/images.py), where pandas, numpy and
matplotlib results are checked as well (docs/run-contract.md)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp import Client as MCPClient

from tests.liveserver import LiveServer
from wasmrun.client import Client, Display, DisplayEvent, ExecutionResult, OutputEvent

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

needs_data = pytest.mark.images("data")  # pandas, numpy, matplotlib
PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = LiveServer(tmp_path_factory.mktemp("display-data"))
    yield srv
    srv.stop()


def run(server: LiveServer, code: str, **params: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "run_code", "params": {"language": "python", "code": code, **params}}
    answer = httpx2.post(server.endpoint, json=body, timeout=120).json()
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def forms(result: dict[str, Any]) -> list[tuple[bool, list[str]]]:
    return [(d["main"], list(d["data"])) for d in result.get("displays", [])]


RICH = '''
class Table:
    def __repr__(self):
        return "Table(2 rows)"
    def _repr_html_(self):
        return "<table><tr><td>a</td></tr></table>"
    def _repr_markdown_(self):
        return "| a |"

class Dot:
    def _repr_png_(self):
        import base64
        return base64.b64decode(PNG)
    def _repr_svg_(self):
        return "<svg xmlns='http://www.w3.org/2000/svg'/>"

class Data:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"application/json": {"k": [1, 2]}, "text/plain": "Data!"}

class Broken:
    def _repr_html_(self):
        raise RuntimeError("no html today")
    def __repr__(self):
        return "Broken()"

print("one")
display(Table())
print("two")
display(Dot(), Data(), Broken())
Table()
'''


def test_display_results_come_in_order_with_their_mime_forms(server: LiveServer) -> None:
    result = run(server, f"PNG = {PNG_1PX!r}\n" + RICH)
    assert result["status"] == "completed", result
    assert forms(result) == [
        (False, ["text/plain", "text/html", "text/markdown"]),
        (False, ["text/plain", "image/svg+xml", "image/png"]),
        (False, ["text/plain", "application/json"]),
        (False, ["text/plain"]),  # its _repr_html_ raised: the other forms stand
        (True, ["text/plain", "text/html", "text/markdown"]),  # the last expression: main
    ]
    table, dot, data, broken, last = result["displays"]
    assert table["data"]["text/html"] == "<table><tr><td>a</td></tr></table>"
    assert table["data"]["text/plain"] == "Table(2 rows)"
    assert base64.b64decode(dot["data"]["image/png"]).startswith(b"\x89PNG")
    assert data["data"] == {"text/plain": "Data!", "application/json": {"k": [1, 2]}}
    assert broken["data"] == {"text/plain": "Broken()"}
    assert last["blobs"] == {}
    # `output` is as before: the last expression's JSON form (a Table has none: its text, with a warning)
    assert result["output"] == "Table(2 rows)"
    assert any("no JSON form" in w and "Table" in w for w in result["warnings"]), result["warnings"]
    assert result["logs_preview"] == "one\ntwo\n"
    assert "Showed 5 displays" in result["summary"]


def test_ipython_display_names_work_without_ipython(server: LiveServer) -> None:
    code = (
        "from IPython.display import display, HTML, Markdown, JSON\n"
        "import IPython\n"
        "display(HTML('<b>bold</b>'), Markdown('# title'))\n"
        "display(JSON({'a': 1}))\n"
        "IPython.get_ipython() is None\n"
    )
    result = run(server, code)
    assert result["status"] == "completed", result
    assert [d["data"].get("text/html") or d["data"].get("text/markdown") or d["data"].get("application/json")
            for d in result["displays"][:3]] == ["<b>bold</b>", "# title", {"a": 1}]
    assert result["output"] is True


def test_main_returns_no_main_display_and_none_shows_nothing(server: LiveServer) -> None:
    assert "displays" not in run(server, "def main(args):\n    return {'a': 1}\n")
    assert "displays" not in run(server, "x = 1\nNone\n")
    plain = run(server, "[1, 2, 3]\n")
    assert plain["displays"] == [{"data": {"text/plain": "[1, 2, 3]"}, "main": True, "blobs": {}}]


def test_nan_and_infinities_become_null_with_a_warning_saying_where(server: LiveServer) -> None:
    code = "def main(args):\n    return {'v': [1.0, float('nan'), 3.0], 'w': {'top': float('-inf')}, 'ok': 2}\n"
    result = run(server, code)
    assert result["status"] == "completed", result
    assert result["output"] == {"v": [1.0, None, 3.0], "w": {"top": None}, "ok": 2}
    (warning,) = result["warnings"]
    assert "2 NaN" in warning and 'output["v"][1]' in warning and 'output["w"]["top"]' in warning
    assert "written as null" in result["summary"] or "became null" in result["summary"]


def test_stdlib_values_keep_their_meaning(server: LiveServer) -> None:
    code = (
        "import datetime, decimal, uuid\n"
        "def main(args):\n"
        "    return {'day': datetime.date(2024, 3, 1), 'at': datetime.datetime(2024, 3, 1, 12, 30),\n"
        "            'price': decimal.Decimal('19.99'), 'exact': decimal.Decimal('0.1000000000000000000001'),\n"
        "            'tags': {'b', 'a'}, 'pair': (1, 2), 1: 'int key', (2, 3): 'tuple key',\n"
        "            'id': uuid.UUID(int=1), 'blob': b'raw', 'later': datetime.timedelta(hours=1)}\n"
    )
    result = run(server, code)
    assert result["status"] == "completed", result
    assert result["output"] == {
        "day": "2024-03-01", "at": "2024-03-01T12:30:00", "price": 19.99,
        "exact": "0.1000000000000000000001", "tags": ["a", "b"], "pair": [1, 2], "1": "int key",
        "(2, 3)": "tuple key", "id": "00000000-0000-0000-0000-000000000001", "blob": "b'raw'", "later": "1:00:00",
    }
    (warning,) = result["warnings"]
    assert 'output["blob"] (bytes)' in warning


def test_values_json_cannot_carry_still_fail_clearly(server: LiveServer) -> None:
    deep = "def main(args):\n    v = []\n    v.append(v)\n    return v\n"
    result = run(server, deep)
    assert result["status"] == "failed" and result["error"]["type"] == "InvalidOutput"
    assert "nested too deeply" in result["error"]["message"]
    assert run(server, "def main(args):\n    return 'a\\ud800'\n")["error"]["type"] == "InvalidOutput"


LIARS = """
class DataFrame:  # says it is pandas'
    __module__ = "pandas.core.frame"
class ndarray:  # says it is numpy's, with a dtype of integers it does not have
    __module__ = "numpy"
    class dtype:
        kind = "i"
    def tolist(self):
        raise RuntimeError("not an array")
class Meta(type):
    @property
    def __module__(cls):
        raise RuntimeError("no module")
class Nameless(metaclass=Meta):
    def __repr__(self):
        return "Nameless()"
"""


@pytest.mark.parametrize("value", ["DataFrame()", "ndarray()", "Nameless()"])
def test_a_value_that_lies_about_its_type_is_its_text(server: LiveServer, value: str) -> None:
    """As the output of main and as a last expression: its text with a warning, the run completed."""
    for code in (f"{LIARS}def main(args):\n    return [{value}]\n", f"{LIARS}{value}\n"):
        result = run(server, code)
        assert result["status"] == "completed", result.get("error")
        assert any("written as its text" in w for w in result["warnings"]), result["warnings"]
    assert isinstance(result["output"], str) and result["displays"][0]["main"]


def test_displays_before_a_failure_are_kept(server: LiveServer) -> None:
    result = run(server, "display('shown first')\n1/0\n")
    assert result["status"] == "failed"
    assert result["displays"][0]["data"]["text/plain"] == "'shown first'"


HOSTILE_FRAMES = '''
import _wasmrun, json
LEVEL = 0x44495350
def show(frame):
    _wasmrun.log(LEVEL, frame)
show("not json")
show(json.dumps({"data": {"NOT A MIME": "x"}}))
show(json.dumps({"data": {"image/png": "***not base64***"}}))
show(json.dumps({"data": {"text/html": 42}}))
show(json.dumps({"data": {"text/plain": "x"}, "blobs": {"image/png": "blob:" + "0" * 32}}))
show(json.dumps({"data": {"text/plain": "x"}, "extra": 1}))
show("[" * 5000 + "]" * 5000)
show(json.dumps({"data": {"text/plain": "x" * (2 * 1024 * 1024)}}))
show(json.dumps({"data": {f"text/x-{i}": "y" for i in range(40)}}))
show(json.dumps({"data": {"text/plain": "the good one"}, "main": False}))
for i in range(100):
    show(json.dumps({"data": {"text/plain": str(i)}}))
"done"
'''


def test_a_hostile_guests_displays_are_checked_and_bounded(server: LiveServer) -> None:
    result = run(server, HOSTILE_FRAMES)
    assert result["status"] == "completed", result
    shown = [d["data"]["text/plain"] for d in result["displays"]]
    assert shown[0] == "the good one"
    assert len(shown) == 64  # abi.MAX_DISPLAYS: the rest dropped, counted
    assert any("were dropped" in w for w in result["warnings"]), result["warnings"]
    assert run(server, "1 + 1\n")["output"] == 2  # still serving


def test_large_forms_go_to_a_blob(server: LiveServer) -> None:
    code = (
        "class Big:\n"
        "    def _repr_html_(self):\n"
        "        return '<p>' + 'x' * 600_000 + '</p>'\n"
        "display(Big())\n"
    )
    result = run(server, code)
    (display,) = result["displays"]
    assert "text/html" not in display["data"] and "text/plain" in display["data"]
    blob = display["blobs"]["text/html"]
    assert blob in result["output_blobs"]
    read = httpx2.post(server.endpoint, json={"jsonrpc": "2.0", "id": 2, "method": "read_blob",
                                              "params": {"blob_id": blob, "mode": "full"}}, timeout=30).json()
    assert read["result"]["content"].startswith("<p>xxx") and len(read["result"]["content"]) == 600_007


def test_displays_stream_as_run_display_events_in_order(server: LiveServer) -> None:
    code = "print('before')\ndisplay({'a': 1})\nprint('after')\n'last'\n"
    body = {"jsonrpc": "2.0", "id": 1, "method": "run_code",
            "params": {"language": "python", "code": code, "stream": True}}
    with httpx2.stream("POST", server.endpoint, json=body, headers={"accept": "text/event-stream"},
                       timeout=60) as response:
        messages = [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
    kinds: list[tuple[str, str]] = []
    for m in messages[:-1]:
        if m["method"] == "run/display":
            kinds.append((m["method"], m["params"]["display"]["data"]["text/plain"]))
        elif kinds and kinds[-1][0] == m["method"]:  # a print's text and its newline may come apart
            kinds[-1] = (m["method"], kinds[-1][1] + m["params"]["text"])
        else:
            kinds.append((m["method"], m["params"]["text"]))
    assert kinds == [("run/output", "before\n"), ("run/display", "{'a': 1}"), ("run/output", "after\n"),
                     ("run/display", "'last'")]
    assert messages[-1]["result"]["displays"][1]["main"] is True


def test_typed_client_decodes_displays_and_display_events(server: LiveServer) -> None:
    with Client(server.base_url) as client:
        result = client.run_code("display(3)\n4\n")
        assert result.displays == [Display(data={"text/plain": "3"}), Display(data={"text/plain": "4"}, main=True)]
        events = list(client.run_code_stream("print('x')\ndisplay(5)\n"))
    assert isinstance(events[0], OutputEvent) and isinstance(events[1], DisplayEvent)
    assert events[1].display.data == {"text/plain": "5"}
    assert isinstance(events[-1], ExecutionResult)


def test_mcp_gives_displays_as_text_and_image_content(server: LiveServer) -> None:
    code = f"PNG = {PNG_1PX!r}\n" + RICH

    async def call() -> mcp_types.CallToolResult:
        async with MCPClient(server.base_url + "/mcp") as mcp:
            return await mcp.call_tool("run_code", {"language": "python", "code": code})

    answer = asyncio.run(call())
    texts = [c.text for c in answer.content if isinstance(c, mcp_types.TextContent)]
    images = [c for c in answer.content if isinstance(c, mcp_types.ImageContent)]
    assert "displays: 5" in texts[0]
    assert texts[1].startswith("display:\nTable(2 rows)") and "text/html" in texts[1]
    assert texts[-1].startswith("result:\nTable(2 rows)")
    assert [i.mime_type for i in images] == ["image/png"] and images[0].data == PNG_1PX
    assert isinstance(answer.structured_content, dict) and len(answer.structured_content["displays"]) == 5


def test_a_session_runs_last_expression_is_its_main_display(server: LiveServer) -> None:
    with Client(server.base_url) as client:
        session = client.create_session()
        client.run_code("x = 41\n", session_id=session.session_id)
        result = client.run_code("x + 1\n", session_id=session.session_id)
        client.close_session(session.session_id)
    assert result.output == 42
    assert result.displays == [Display(data={"text/plain": "42"}, main=True)]


# --- the data image: pandas, numpy, matplotlib ------------------------------------------

FRAME = "import numpy as np, pandas as pd\ndf = pd.DataFrame({'k': ['a', 'b', 'a', 'c'], 'v': [1, 2, 3, np.nan]})\n"


@needs_data
def test_groupby_results_keep_their_labels(server: LiveServer) -> None:
    series = run(server, FRAME + "df.groupby('k').v.sum()\n")
    assert series["output"] == {"a": 4.0, "b": 2.0, "c": 0.0}
    frame = run(server, FRAME + "df.groupby('k').sum()\n")
    assert frame["output"] == {"columns": ["v"], "index": ["a", "b", "c"], "data": [[4.0], [2.0], [0.0]],
                               "index_names": ["k"]}
    (main,) = frame["displays"]
    assert main["main"] and "<table" in main["data"]["text/html"] and "k" in main["data"]["text/plain"]


@needs_data
def test_nan_in_series_and_dataframes_is_null_with_where(server: LiveServer) -> None:
    result = run(server, "import numpy as np, pandas as pd\n"
                         "pd.DataFrame({'k': ['a', 'b', None], 'v': [1, np.nan, 3]})\n")
    assert result["status"] == "completed", result
    assert result["output"] == {"columns": ["k", "v"], "index": [0, 1, 2],
                                "data": [["a", 1.0], ["b", None], [None, 3.0]]}
    (warning,) = result["warnings"]
    assert 'output["data"][1][1]' in warning and 'output["data"][2][0]' in warning
    assert "NaN" in result["displays"][0]["data"]["text/plain"]  # the notebook's view shows it
    series = run(server, "import pandas as pd\npd.Series([1.0, None, 3.0], index=['x', 'y', 'z'])\n")
    assert series["output"] == {"x": 1.0, "y": None, "z": 3.0}
    assert 'output["y"]' in series["warnings"][0]


@needs_data
def test_interval_keys_multiindex_and_duplicates(server: LiveServer) -> None:
    counts = run(server, "import pandas as pd\npd.cut(pd.Series([1, 5, 7, 9]), bins=[0, 4, 8, 12]).value_counts()"
                         ".sort_index()\n")
    assert counts["status"] == "completed", counts
    assert counts["output"] == {"(0, 4]": 1, "(4, 8]": 2, "(8, 12]": 1}
    multi = run(server, "import pandas as pd\n"
                        "df = pd.DataFrame({'r': ['n', 'n', 's'], 'y': [1, 2, 1], 'v': [10, 20, 30]})\n"
                        "df.set_index(['r', 'y']).v\n")
    assert multi["output"] == {"index": [["n", 1], ["n", 2], ["s", 1]], "values": [10, 20, 30], "name": "v",
                               "index_names": ["r", "y"]}
    dup = run(server, "import pandas as pd\npd.Series([1, 2], index=['a', 'a'])\n")
    assert dup["output"] == {"index": ["a", "a"], "values": [1, 2]}


@needs_data
def test_numpy_dates_categoricals_and_indexes(server: LiveServer) -> None:
    code = (
        "import numpy as np, pandas as pd\n"
        "def main(args):\n"
        "    return {'arr': np.array([[1, 2], [3, 4]]), 'f': np.float32(0.5), 'n': np.int64(7),\n"
        "            'nan': np.array([1.0, np.nan]), 'when': pd.Timestamp('2024-01-02 03:04'),\n"
        "            'days': pd.Series(pd.date_range('2024-01-01', periods=2)),\n"
        "            'nat': pd.NaT, 'cat': pd.Series(['x', 'y', 'x'], dtype='category'),\n"
        "            'idx': pd.Index(['p', 'q']), 'dt64': np.datetime64('2024-05-06'),\n"
        "            'iv': pd.Interval(0, 1), 'na': pd.array([1, None], dtype='Int64')}\n"
    )
    result = run(server, code)
    assert result["status"] == "completed", result
    assert result["output"] == {
        "arr": [[1, 2], [3, 4]], "f": 0.5, "n": 7, "nan": [1.0, None], "when": "2024-01-02T03:04:00",
        "days": ["2024-01-01T00:00:00", "2024-01-02T00:00:00"], "nat": None, "cat": ["x", "y", "x"],
        "idx": ["p", "q"], "dt64": "2024-05-06", "iv": "(0, 1]", "na": [1, None],
    }
    (warning,) = result["warnings"]
    assert "3 NaN" in warning and 'output["nan"][1]' in warning


@needs_data
def test_display_of_a_dataframe_is_an_html_table(server: LiveServer) -> None:
    result = run(server, FRAME + "display(df.head(2))\nprint('between')\ndisplay(df.v.describe())\n")
    first, second = result["displays"]
    assert "<table" in first["data"]["text/html"] and "text/plain" in first["data"]
    assert "count" in second["data"]["text/plain"]


@needs_data
def test_plt_show_is_a_png_display_and_closes_the_figure(server: LiveServer) -> None:
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3])\n"
        "plt.show()\n"
        "plt.figure(); plt.bar(['a'], [1])\n"
        "plt.show()\n"
        "len(plt.get_fignums())\n"
    )
    result = run(server, code)
    assert result["status"] == "completed", result
    assert result["output"] == 0  # each shown figure was closed
    pictures = [d for d in result["displays"] if "image/png" in d["data"]]
    assert len(pictures) == 2
    for picture in pictures:
        assert binascii.a2b_base64(picture["data"]["image/png"])[:4] == b"\x89PNG"
        assert picture["data"]["text/plain"].startswith("<Figure size")
    assert [i["name"] for i in result["images"]] == ["figure-1.png", "figure-2.png"]  # as before


@needs_data
def test_a_figure_as_the_last_expression_is_its_png(server: LiveServer) -> None:
    result = run(server, "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\nfig\n")
    (main,) = result["displays"]
    assert main["main"] and main["data"]["image/png"]
