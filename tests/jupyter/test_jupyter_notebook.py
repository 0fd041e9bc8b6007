"""A real notebook (charts, a table, an error, a `!` command) executed cell by cell through
the Jupyter front by nbclient on jupyter_server's GatewayKernelManager (the gateway client
Jupyter Server itself uses), its outputs compared with those of a native ipykernel on the
same notebook. jupyter_server's gateway WebSocket sends no token, so the server here has
no tenants: open, on loopback only, as every door of such a server is."""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.images import on_data
from tests.liveserver import LiveServer

pytestmark = pytest.mark.images("stdlib", "data")

CELLS = [
    "numbers = [3, 1, 2]\nsorted(numbers)",
    "print('sum', sum(numbers))\nfor n in numbers:\n    print(n)",
    "import sys\nprint('to stderr', file=sys.stderr)",
    "display({'shown': True})\nlen(numbers)",
    "def half(x):\n    return x / 2\nhalf(len(numbers))",
    "try:\n    1 / 0\nexcept ZeroDivisionError as exc:\n    print('caught', exc)",
]
DATA_CELLS = [
    "import pandas as pd\ndf = pd.DataFrame({'n': numbers, 'sq': [n * n for n in numbers]})\ndf",
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
    "ax.plot(df['n'], df['sq'])\nplt.show()",
]
FAILING = "undefined_here + 1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("notebook") / "data")
    try:
        yield live
    finally:
        live.stop()


def notebook(cells: list[str]) -> Any:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def gateway_manager(server: LiveServer) -> Any:
    from jupyter_server.gateway.gateway_client import GatewayClient
    from jupyter_server.gateway.managers import GatewayKernelManager

    GatewayClient.clear_instance()
    # What a user sets: the gateway's URL (Jupyter Server's --gateway-url).
    GatewayClient.instance(url=server.base_url, ws_url=server.base_url.replace("http", "ws"), request_timeout=120.0)
    return GatewayKernelManager()


def run(nb: Any, **options: Any) -> Any:
    NotebookClient(nb, timeout=120, kernel_name="python3", **options).execute()
    return nb


def shape(nb: Any) -> list[list[tuple[Any, ...]]]:
    """Each cell's outputs as a reader sees them: streams joined per name, displays and
    results by their MIME types and text, errors by name and value."""
    cells = []
    for cell in nb.cells:
        seen: list[tuple[Any, ...]] = []
        streams: dict[str, str] = {}
        for output in cell.outputs:
            kind = output.output_type
            if kind == "stream":
                streams[output.name] = streams.get(output.name, "") + output.text
            elif kind in ("display_data", "execute_result"):
                data = output.data
                png = data.get("image/png")
                seen.append((kind, sorted(m for m in data if m not in ("text/html", "image/png")),
                             data.get("text/plain") if png is None else "figure",
                             png is not None and base64.b64decode(png)[:4] == b"\x89PNG"))
            elif kind == "error":
                seen.append(("error", output.ename, output.evalue))
        cells.append(sorted(streams.items()) + seen)
    return cells


def cells_for_image(server: LiveServer) -> list[str]:
    return CELLS + (DATA_CELLS if on_data() else [])


def test_a_notebook_through_the_gateway_matches_a_native_kernel(server: LiveServer) -> None:
    cells = cells_for_image(server)
    through_gateway = run(notebook(cells), km=gateway_manager(server))
    native = run(notebook(cells))
    assert shape(through_gateway) == shape(native)
    counts = [cell.execution_count for cell in through_gateway.cells]
    assert counts == list(range(1, len(cells) + 1))


def test_a_failing_cell_stops_the_notebook_with_its_error(server: LiveServer) -> None:
    cells = ["value = 1", FAILING, "print('never')"]
    with pytest.raises(CellExecutionError) as through_gateway:
        run(notebook(cells), km=gateway_manager(server))
    with pytest.raises(CellExecutionError) as native:
        run(notebook(copy.deepcopy(cells)))
    assert through_gateway.value.ename == native.value.ename == "NameError"
    assert through_gateway.value.evalue == native.value.evalue
