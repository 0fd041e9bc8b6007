"""The data image's fast start keeps every run fresh (real runs, no timing).

What changed for speed (wasmrun/sandbox/images/datastart.py): runs enter the guest as a
turn with no source, spares have the pages data runs touch copied in ahead, the
image's own objects are frozen out of the collector and each run's random state
(`random`'s, numpy's global generator's) is written straight into the generators from
host entropy (runtime/_seeds.py). None of it may let
state leak between runs, repeat a random stream, or stop the collector from
freeing a run's own garbage.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from python_wasm import dataimage
from tests.sandbox.conftest import make_skill
from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import DataSandboxEngine, RunRequest, SessionRun
from wasmrun.sessionstore.store import SessionMeta, SessionStore

pytestmark = pytest.mark.images("data")  # the data image only (tests/images.py)


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


# Each generator's whole state at a run's start: its words (hashed), its position in
# them, and the Gaussian each may hold for its next draw.
START_STATE = (
    "import hashlib, random, numpy as np\n"
    "def main(args):\n"
    "    legacy, inner = np.random.get_state(), random.getstate()\n"
    "    return {'numpy': hashlib.sha256(legacy[1].tobytes()).hexdigest(), 'pos': int(legacy[2]),\n"
    "            'numpy_gauss': int(legacy[3]), 'random': hashlib.sha256(repr(inner[1][:624]).encode()).hexdigest(),\n"
    "            'index': inner[1][624], 'random_gauss': inner[2]}\n"
)


def test_every_run_starts_both_generators_from_whole_new_state(runner: DataSandboxEngine) -> None:
    """runtime/_seeds.py writes each run's state straight into the generators: all 624 words
    new in every run, the position at the end (the first draw twists them all, as after
    seeding) and no Gaussian held over from the snapshot."""
    outs = []
    for i in range(5):
        if i % 2:
            runner.wait_idle()
        out = output(runner, START_STATE)
        assert isinstance(out, dict)
        outs.append(out)
    for out in outs:
        assert (out["pos"], out["index"], out["numpy_gauss"], out["random_gauss"]) == (624, 624, 0, None), out
    for key in ("numpy", "random"):
        assert len({out[key] for out in outs}) == len(outs), f"{key}'s state repeats between runs"


def test_a_forks_first_run_drops_the_gaussian_its_session_held(runner: DataSandboxEngine, tmp_path: Path) -> None:
    """numpy's RandomState draws Gaussians in pairs and keeps the second for the next
    draw; a session's pages keep it. A fork's first run is reseeded: it must not hand
    out the Gaussian its source session holds (the source's next draw)."""
    store = SessionStore(tmp_path / "sessions")

    def run_in(meta: SessionMeta, code: str) -> object:
        session = SessionRun(folder=str(store.folder(meta)), version=meta.version, reseed=meta.reseed)
        result = runner.run(RunRequest(kind="code", code=code, session=session))
        assert result.status == "completed" and result.session is not None, result.error
        store.finish_run(meta, result.session)
        return json.loads(result.output_json)

    _, meta = store.create("o", idle_timeout_s=600, limits={}, skills=[], max_sessions=10)
    run_in(meta, "import numpy as np\nnp.random.seed(3)\nfloat(np.random.standard_normal())")
    store.acquire(meta)
    try:
        _, fork = store.create("o", idle_timeout_s=600, limits={}, skills=[], max_sessions=10, source=meta)
    finally:
        store.release(meta)
    draw = "import numpy as np\n[int(np.random.get_state()[3]), float(np.random.standard_normal())]"
    held, following = run_in(meta, draw)  # type: ignore[misc]
    fork_held, fork_first = run_in(fork, draw)  # type: ignore[misc]
    assert held == 1, "the seeded session keeps its stream, the held Gaussian included"
    assert fork_held == 0 and fork_first != following, "the fork's first run drew its source's held Gaussian"


HOLDS_GAUSSIANS = (
    "import random, numpy as np\n"
    "print('importing the skill')\n"
    "AT_IMPORT = [random.gauss(0, 1), float(np.random.standard_normal())]  # each holds its pair's second\n"
    "def main(args):\n"
    "    return [random.gauss(0, 1), float(np.random.standard_normal())]\n"
)


def test_runs_from_a_skills_pages_never_draw_the_gaussians_its_import_held(
    runner: DataSandboxEngine, tmp_path: Path,
) -> None:
    """A skill's pages are its memory after its import; a Gaussian each generator held
    then must not be every later run's first draw."""
    skill = make_skill(tmp_path, "seeds.held", {"code/main.py": HOLDS_GAUSSIANS})
    request = RunRequest(kind="skill", skill=skill.name, skills=[skill])
    assert runner.run(request).status == "completed"
    assert runner.skill_pages.wait_ready(120)
    results = [runner.run(request) for _ in range(4)]
    for result in results:
        assert result.status == "completed", result.error
        assert "importing the skill" not in result.logs  # started from the skill's pages
    draws = [json.loads(result.output_json) for result in results]
    for i, name in enumerate(("random.gauss", "numpy's standard_normal")):
        assert len({draw[i] for draw in draws}) == len(draws), f"{name} repeats the Gaussian the import held"


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
            (workspace / guest.strip("/")).mkdir(parents=True)
            wasi.preopen_dir(str(workspace / guest.strip("/")), guest, fs_mutable=False)
        fresh.store.set_wasi(wasi)
        exports = fresh.run._exports  # type: ignore[attr-defined]
        assert dataimage.turn(fresh.store, exports, "x = 6 * 7") == 0
        assert dataimage.turn(fresh.store, exports, "assert x == 42") == 0
    finally:
        fresh.store.close()
