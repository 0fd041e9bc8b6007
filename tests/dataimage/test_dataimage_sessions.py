"""Sessions on the data image, over HTTP: a notebook's back and forth with pandas and
matplotlib (a DataFrame kept across runs, a chart returned as a blob), numpy's random
state per session, and fresh runs beside a session still fresh (docs/sessions.md).

The session suite itself (tests/sessionstore/test_sessions.py) runs on the data image too
(marked for the data image, tests/images.py); these are the data stack's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.liveserver import LiveServer, wasmrun_env
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import RunRequest, RunResult, SessionRun, data_engine, make_engine, ready_image
from wasmrun.sessionstore.store import SessionStore

pytestmark = pytest.mark.images("data")  # the data image only (tests/images.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    ready_image(data_engine(), quiet=False)  # built here, with progress, not inside the server's start-up wait
    # One worker: a data-image worker holds ~450 MB; and a session's runs then find their instance warm.
    live = LiveServer(tmp_path_factory.mktemp("data"), "--workers", "1", env=wasmrun_env() | {"WASMRUN_IMAGE": "data"})
    try:
        yield live
    finally:
        live.stop()


def rpc(server: LiveServer, method: str, **params: Any) -> Any:
    reply = httpx2.post(server.endpoint, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout=120)
    body: dict[str, Any] = reply.json()
    assert "result" in body, body
    return body["result"]


def run(server: LiveServer, code: str, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = rpc(server, "run_code", language="python", code=code, **params)
    return result


CSV = "city,month,temp\n" + "".join(
    f"{city},{month},{temp}\n"
    for city, temps in (("oslo", (1, 3, 9)), ("rome", (12, 14, 18)), ("lima", (22, 21, 19)))
    for month, temp in enumerate(temps, 1)
)


def test_a_dataframe_is_loaded_once_then_grouped_then_plotted(server: LiveServer) -> None:
    blob = rpc(server, "create_blob", content=CSV, kind="text/csv")["blob_id"]
    sid = rpc(server, "create_session", language="python")["session_id"]
    loaded = run(server, f"import pandas as pd\ndf = pd.read_csv('/blobs/{blob}')\nlist(df.shape)",
                 session_id=sid, input_blobs=[blob])
    assert loaded["status"] == "completed" and loaded["output"] == [9, 3], loaded

    grouped = run(server, "means = df.groupby('city').temp.mean().round(2)\nmeans.to_dict()", session_id=sid)
    assert grouped["status"] == "completed", grouped
    assert grouped["output"] == {"lima": 20.67, "oslo": 4.33, "rome": 14.67}
    assert "images" not in grouped

    plotted = run(server, (
        "import matplotlib.pyplot as plt\n"
        "ax = means.plot.bar(title='mean temperature')\n"
        "plt.savefig('/workspace/means.png')\n"
        "plt.close('all')\n"
        "len(df)"
    ), session_id=sid)
    assert plotted["status"] == "completed" and plotted["output"] == 9, plotted
    [image] = plotted["images"]
    assert image["kind"] == "image/png" and image["name"] == "means.png"
    png = rpc(server, "read_blob", blob_id=image["blob_id"], mode="full")
    assert png["kind"] == "image/png"

    # the picture stays in the session's /workspace, but is returned by the run that drew it, not by every later one
    later = run(server, "import os\n[sorted(os.listdir('/workspace')), round(float(means.max()), 2)]", session_id=sid)
    assert later["output"] == [["means.png"], 20.67] and "images" not in later, later
    redrawn = run(server, "plt.plot([1, 2])\nplt.savefig('/workspace/means.png')\nplt.close('all')", session_id=sid)
    assert [i["name"] for i in redrawn["images"]] == ["means.png"], redrawn  # rewritten: returned again

    # a plain run beside it starts fresh: no df, pandas' state as the image has it
    plain = run(server, "'df' in globals()")
    assert plain["output"] is False
    rpc(server, "close_session", session_id=sid)


def test_a_rolled_back_run_leaves_the_dataframe_as_it_was(server: LiveServer) -> None:
    sid = rpc(server, "create_session", language="python")["session_id"]
    run(server, "import numpy as np, pandas as pd\ndf = pd.DataFrame({'v': np.arange(5)})", session_id=sid)
    stopped = run(server, "df['v'] = -1\ndf.drop(index=0, inplace=True)\nwhile True:\n    pass",
                  session_id=sid, limits={"timeout_ms": 500})
    assert stopped["error"]["type"] == "Timeout" and stopped["session_rolled_back"] is True
    assert run(server, "df.v.tolist()", session_id=sid)["output"] == [0, 1, 2, 3, 4]
    fork = rpc(server, "fork_session", session_id=sid)["session_id"]
    run(server, "df['v'] *= 10", session_id=fork)
    assert run(server, "df.v.sum()", session_id=fork)["output"] == 100
    assert run(server, "df.v.sum()", session_id=sid)["output"] == 10
    for session in (sid, fork):
        rpc(server, "close_session", session_id=session)


def test_numpy_random_is_reseeded_per_session_and_a_seed_holds_across_runs(server: LiveServer) -> None:
    draw = "import numpy as np\nfloat(np.random.random())"
    first = [run(server, draw, session_id=rpc(server, "create_session", language="python")["session_id"])["output"]
             for _ in range(2)]
    assert first[0] != first[1], "two sessions' first runs drew the same numbers"
    sid = rpc(server, "create_session", language="python")["session_id"]
    run(server, "import numpy as np\nnp.random.seed(7)", session_id=sid)
    seeded = run(server, "float(np.random.random())", session_id=sid)["output"]
    assert seeded == run(server, "import numpy as np\nnp.random.seed(7)\nfloat(np.random.random())")["output"]
    fork = rpc(server, "fork_session", session_id=sid)["session_id"]
    draws = [run(server, "float(np.random.random())", session_id=s)["output"] for s in (sid, fork)]
    assert draws[0] != draws[1]  # the fork's first run was reseeded; the session kept its seeded stream
    for session in (sid, fork):
        rpc(server, "close_session", session_id=session)


def test_a_session_made_on_the_stdlib_image_says_so_on_the_data_image(tmp_path: Path) -> None:
    """A server on `auto` serves stdlib while the data image is being made, then data: a
    session made meanwhile cannot resume on the other image, and its next run says why."""
    store = SessionStore(tmp_path / "sessions")
    _, meta = store.create("o", idle_timeout_s=600, limits={}, skills=[], max_sessions=10)

    def run_on(image: str) -> RunResult:
        engine = make_engine(image, FileBlobStore(tmp_path / "blobs"), workspace_root=tmp_path / image)
        try:
            session = SessionRun(folder=str(store.folder(meta)), version=meta.version, reseed=meta.reseed)
            result = engine.run(RunRequest(kind="code", code="x = 1\nx", session=session))
            if result.session is not None:
                store.finish_run(meta, result.session)
            return result
        finally:
            engine.close()

    assert run_on("stdlib").status == "completed"
    refused = run_on("data")
    assert refused.status == "failed" and refused.error is not None
    assert "made on the stdlib image and this server now runs the data image" in refused.error.message
    assert refused.session is not None and refused.session.committed is False
