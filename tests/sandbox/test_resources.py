"""Many runs leave the host as they found it: descriptors, threads, workspaces."""

from __future__ import annotations

import os
import threading

from wasmrun.sandbox.memory.instances import HARD_MAX_RETIRED


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_two_hundred_runs_leak_nothing(run_code, engine):
    code = (
        "import os\n"
        "def main(args):\n"
        "    open('/workspace/f.txt', 'w').write('x' * 1000)\n"
        "    os.mkdir('/workspace/d')\n"
        "    print('hello')\n"
        "    if args['i'] % 3 == 0:\n"
        "        raise ValueError('some fail')\n"
        "    return args['i']\n"
    )
    run_code(code, args={"i": 1})  # warm up lazily created state
    engine.drain()
    fds, threads = _open_fds(), threading.active_count()
    for i in range(200):
        result = run_code(code, args={"i": i})
        assert result.status == ("failed" if i % 3 == 0 else "completed")
    run_code("def main(args):\n    while True: pass", timeout_ms=50)
    engine.drain()  # teardown runs on the reaper thread, after each result
    assert _open_fds() <= fds
    assert threading.active_count() <= threads
    # Workspaces are emptied after each run and their directories recycled:
    # what remains is a few empty spares (bounded by how many runs can await
    # teardown at once: HARD_MAX_RETIRED when runs come faster than teardown,
    # as on a loaded machine), never a file a run wrote.
    # (`roots` beside them holds the guest's read-only `/` folders, see guestroot.py, and
    # `empty` the engine's folder that stays empty, mounted where a run has nothing to see.)
    assert os.listdir(engine.loop.dirs.empty) == []
    spares = [name for name in os.listdir(engine.loop.workspace_root) if name not in ("roots", engine.loop.dirs.empty.name)]
    assert len(spares) <= HARD_MAX_RETIRED + 2
    for name in spares:  # each run folder keeps its empty workspace, tmp and blobs (and the data image's skills)
        run_folder = engine.loop.workspace_root / name
        assert sorted(os.listdir(run_folder)) == sorted(engine.loop.dirs.subfolders)
        assert all(os.listdir(run_folder / sub) == [] for sub in os.listdir(run_folder))


def test_used_instances_never_pile_up_past_the_bound(engine):
    from wasmrun.sandbox.contract.types import RunRequest

    request = RunRequest(kind="code", code="def main(args):\n    return 1")
    supply = engine.loop.supply
    # Back to back, faster than a quiet moment: the housekeeper never gets one.
    for _ in range(3 * HARD_MAX_RETIRED):
        assert engine.run(request).output == 1
        assert len(supply._retired) <= HARD_MAX_RETIRED
