"""The data image's fast start keeps every run fresh (real runs, no timing).

What changed for speed (wasmrun/sandbox/images/datastart.py): runs enter the guest as a
turn with no source, spares have the pages data runs touch copied in ahead, the
image's own objects are frozen out of the collector and numpy's global
generator is reseeded from host entropy with init_by_array. None of it may let
state leak between runs, repeat a random stream, or stop the collector from
freeing a run's own garbage.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from python_wasm import dataimage
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import DataSandboxEngine, RunRequest


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataSandboxEngine]:
    store = FileBlobStore(tmp_path_factory.mktemp("blobs"))
    with DataSandboxEngine(store, tmp_path_factory.mktemp("work")) as engine:
        yield engine


def output(runner: DataSandboxEngine, code: str) -> object:
    result = runner.run(RunRequest(kind="code", code=code))
    assert result.status == "completed", result.error
    return json.loads(result.output_json)


def test_spares_are_made_ahead_with_the_data_runs_pages(runner: DataSandboxEngine) -> None:
    assert runner.loop.supply.hot.pages > 0
    runner.wait_idle()
    result = runner.run(RunRequest(kind="code", code="def main(args):\n    return 1\n"))
    assert result.status == "completed" and result.usage.prepared_ahead


FRESH = (
    "import gc, random, sys, numpy as np, pandas as pd, matplotlib.pyplot as plt\n"
    "def main(args):\n"
    "    seen = [hasattr(np, 'leak'), hasattr(pd, 'leak'), 'leak' in sys.modules, len(plt.get_fignums())]\n"
    "    np.leak = pd.leak = 1\n    sys.modules['leak'] = np\n    plt.figure()\n"
    "    return {'seen': seen, 'random': random.random(), 'legacy': np.random.random_sample(4).tolist(),\n"
    "            'gauss': float(np.random.standard_normal()), 'rng': int(np.random.default_rng().integers(1 << 62)),\n"
    "            'frozen': gc.get_freeze_count() > 0}\n"
)


def test_runs_from_prepared_spares_share_no_state_and_no_random_stream(runner: DataSandboxEngine) -> None:
    outs = []
    for i in range(6):
        if i % 2:
            runner.wait_idle()  # half from a spare made ahead, half made on the spot
        out = output(runner, FRESH)
        assert isinstance(out, dict)
        outs.append(out)
    for out in outs:
        assert out["seen"] == [False, False, False, 0]
        assert out["frozen"], "the image's objects are frozen out of the collector"
    for key in ("random", "gauss", "rng"):
        assert len({json.dumps(out[key]) for out in outs}) == len(outs), f"{key} repeats between runs"
    draws = [x for out in outs for x in out["legacy"]]
    assert len(set(draws)) == len(draws), "numpy's global RandomState repeats between runs"


def test_numpy_seeding_inside_a_run_is_still_reproducible(runner: DataSandboxEngine) -> None:
    code = (
        "import numpy as np\n"
        "def main(args):\n"
        "    np.random.seed(7)\n    a = np.random.rand(3).tolist()\n"
        "    np.random.seed(7)\n    b = np.random.rand(3).tolist()\n"
        "    return [a == b, a]\n"
    )
    first, second = output(runner, code), output(runner, code)
    assert isinstance(first, list) and first[0] is True
    assert first == second  # a seed the code sets is the code's: the same stream in every run


def test_the_collector_still_frees_a_runs_own_cycles(runner: DataSandboxEngine) -> None:
    code = (
        "import gc\n"
        "def main(args):\n"
        "    for _ in range(1000):\n        a = []\n        a.append(a)\n"
        "    return gc.collect()\n"
    )
    freed = output(runner, code)
    assert isinstance(freed, int) and freed >= 999  # (the last one is still bound to `a`)


def test_a_turn_with_source_text_still_runs_it(runner: DataSandboxEngine) -> None:
    """Only a turn with no source is the fast path: text (how the image is made) runs as before."""
    fresh = runner.image.new_instance()
    try:
        fresh.store.set_epoch_deadline(1 << 30)
        workspace = Path(runner.loop.workspace_root) / "turn-text"
        workspace.mkdir()
        import wasmtime

        wasi = wasmtime.WasiConfig()
        for host, guest in dataimage.preopens(runner.image.interp):
            wasi.preopen_dir(host, guest, fs_mutable=False)
        for guest in dataimage.WRITABLE_MOUNTS + dataimage.RUN_MOUNTS:
            (workspace / guest.strip("/")).mkdir()
            wasi.preopen_dir(str(workspace / guest.strip("/")), guest, fs_mutable=False)
        fresh.store.set_wasi(wasi)
        exports = fresh.run._exports  # type: ignore[attr-defined]
        assert dataimage.turn(fresh.store, exports, "x = 6 * 7") == 0
        assert dataimage.turn(fresh.store, exports, "assert x == 42") == 0
    finally:
        fresh.store.close()
