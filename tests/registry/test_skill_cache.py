"""The bounded cache of created skills' folders (registry/bundle.py), on a real
filesystem, with real processes sharing one cache folder as servers on one
machine do."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.backends.test_shared_database import call, skill_params
from tests.liveserver import REPO, LiveServer, wasmrun_env
from tests.postgres import database_url, postgres_server  # noqa: F401  (fixtures)
from wasmrun.registry.bundle import BundleMissing, SkillCache, digest, pack


def bundle(tmp_path: Path, n: int, size: int = 100) -> bytes:
    folder = tmp_path / f"src-{n}"
    (folder / "code").mkdir(parents=True, exist_ok=True)
    (folder / "code" / "main.py").write_text(f"N = {n}\n" + "#" * size + "\n")
    (folder / "skill.toml").write_text(f'name = "s{n}"\n')
    return pack(folder)


def entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def use(cache: SkillCache, data: bytes) -> str:
    with cache.held(digest(data), lambda: data) as folder:
        return (folder / "code" / "main.py").read_text().splitlines()[0]


def test_the_cache_keeps_the_most_recently_used_within_its_count(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = SkillCache(root, max_entries=3)
    bundles = [bundle(tmp_path, n) for n in range(6)]
    for data in bundles[:3]:
        use(cache, data)
    use(cache, bundles[0])  # used again: now the most recent
    for data in bundles[3:5]:
        use(cache, data)
    assert entries(root) == sorted(digest(b) for b in (bundles[0], bundles[3], bundles[4]))
    # An evicted version is unpacked again on its next use, the same files under the same name.
    assert use(cache, bundles[1]) == "N = 1"
    assert len(entries(root)) == 3 and digest(bundles[1]) in entries(root)
    # Nothing of the evictions is left behind: no half-deleted folder, no lock file of a gone entry.
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == [".locks"]
    assert sorted(p.name for p in (root / ".locks").iterdir()) == entries(root)


def test_the_cache_keeps_within_its_bytes(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = SkillCache(root, max_entries=100, max_bytes=250_000)
    for n in range(8):
        use(cache, bundle(tmp_path, n, size=100_000))
    held = entries(root)
    assert len(held) == 2  # two of ~100 kB fit in 250 kB, a third does not
    assert sum(f.stat().st_size for e in held for f in (root / e).rglob("*") if f.is_file()) <= 250_000
    # A new server on the folder with lower bounds trims it at once.
    SkillCache(root, max_entries=1)
    assert len(entries(root)) == 1


def test_a_bundle_that_is_gone_or_not_the_named_one_is_never_cached(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = SkillCache(root)
    data = bundle(tmp_path, 1)
    with pytest.raises(BundleMissing), cache.held(digest(data), lambda: None):
        pass
    with pytest.raises(BundleMissing), cache.held(digest(data), lambda: bundle(tmp_path, 2)):
        pass
    assert entries(root) == []
    for bad in ("../x", "a" * 63, "A" * 64, "g" * 64, "\0" * 64):
        with pytest.raises(ValueError):
            cache.path(bad)


HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from wasmrun.registry.bundle import SkillCache, digest
    data = Path(sys.argv[2]).read_bytes()
    cache = SkillCache(Path(sys.argv[1]), max_entries=1)
    with cache.held(digest(data), lambda: data) as folder:
        print("held", flush=True)
        sys.stdin.readline()
        print((folder / "code" / "main.py").read_text().splitlines()[0], flush=True)
    """
)


def test_an_entry_another_process_uses_survives_eviction(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    mine = bundle(tmp_path, 0)
    (tmp_path / "bundle").write_bytes(mine)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), str(tmp_path / "bundle")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        # Another server on the folder, under pressure: a cache of one entry, five others used.
        cache = SkillCache(root, max_entries=1)
        for n in range(1, 6):
            assert use(cache, bundle(tmp_path, n)) == f"N = {n}"
        assert digest(mine) in entries(root)  # over the bound, while in use
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "N = 0"  # its files stayed whole to the end
        assert holder.wait(60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    cache.trim()
    assert digest(mine) not in entries(root) and len(entries(root)) == 1


HAMMER = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from wasmrun.registry.bundle import SkillCache, digest
    bundles = [p.read_bytes() for p in sorted(Path(sys.argv[2]).iterdir())]
    cache = SkillCache(Path(sys.argv[1]), max_entries=2)
    rng = random.Random(int(sys.argv[3]))
    for _ in range(150):
        n = rng.randrange(len(bundles))
        data = bundles[n]
        with cache.held(digest(data), lambda: data) as folder:
            assert (folder / "code" / "main.py").read_text().startswith(f"N = {n}\\n"), n
            assert (folder / "skill.toml").read_text() == f'name = "s{n}"\\n', n
    print("ok")
    """
)


def test_servers_sharing_the_cache_never_see_a_partial_or_vanishing_folder(tmp_path: Path) -> None:
    """Three processes using and evicting six versions through a cache of two at once:
    every folder a process holds is whole for as long as it holds it."""
    root = tmp_path / "cache"
    sources = tmp_path / "bundles"
    sources.mkdir()
    for n in range(6):
        (sources / f"{n}").write_bytes(bundle(tmp_path, n, size=20_000))
    workers = [
        subprocess.Popen([sys.executable, "-c", HAMMER, str(root), str(sources), str(seed)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        for seed in range(3)
    ]
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0 and out.strip() == "ok", err
    SkillCache(root, max_entries=2)
    assert len(entries(root)) <= 2
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == [".locks"]


def test_a_server_with_a_cache_of_one_serves_every_created_skill(tmp_path: Path, database_url: str) -> None:  # noqa: F811
    """Over HTTP: created skills are evicted from a cache of one entry and put back on use;
    one in a run stays whole while another process on the machine presses on the cache."""
    env = wasmrun_env() | {"WASMRUN_SKILL_CACHE_ENTRIES": "1"}
    server = LiveServer(tmp_path / "data", "--database-url", database_url, env=env)
    root = tmp_path / "data" / "skill-cache"
    try:
        slow = skill_params("user.team.slow", said="slow")
        slow["files"][0]["content"] = (
            "import time\n\ndef main(args):\n    time.sleep(args['s'])\n"
            "    from . import helper\n    return helper.said(args)\n"
        )
        for params in (slow, skill_params("user.team.echo", said="echo")):
            assert "result" in call(server, None, "create_skill", params).json()
        assert len(entries(root)) == 1
        for name in ("user.team.slow", "user.team.echo", "user.team.slow", "user.team.echo"):
            ran = call(server, None, "execute_skill", {"name": name, "args": {"s": 0}}).json()["result"]
            assert ran["status"] == "completed" and list(ran["output"]) == [name.rsplit(".", 1)[1]], ran
            assert len(entries(root)) == 1
        described = call(server, None, "describe_skill", {"name": "user.team.slow", "detail": "full"}).json()
        assert "code/helper.py" in described["result"]["skill"]["files"], described
        # A run of `slow` sleeps, then imports from its folder; meanwhile another process
        # on this machine uses the same cache folder for other versions.
        answers: list[Any] = []
        runner = threading.Thread(target=lambda: answers.append(
            call(server, None, "execute_skill", {"name": "user.team.slow", "args": {"s": 3}}).json()))
        runner.start()
        deadline = time.monotonic() + 60
        while not any((root / ".locks" / e).exists() and _held_elsewhere(root, e) for e in entries(root)):
            assert time.monotonic() < deadline and runner.is_alive(), answers
            time.sleep(0.05)
        other = SkillCache(root, max_entries=1)
        for n in range(3):
            assert use(other, bundle(tmp_path, n)) == f"N = {n}"
        runner.join(120)
        assert answers[0]["result"]["output"] == {"slow": {"s": 3}}, answers
    finally:
        server.stop()


def _held_elsewhere(root: Path, name: str) -> bool:
    """Whether someone holds the entry (its lock cannot be taken exclusively)."""
    try:
        fd = os.open(root / ".locks" / name, os.O_RDWR)
    except FileNotFoundError:  # evicted just now
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_cache_bounds_come_from_the_environment() -> None:
    from wasmrun.settings import Settings

    s = Settings.load({"WASMRUN_SKILL_CACHE_ENTRIES": "7", "WASMRUN_SKILL_CACHE_MB": "3"})
    assert (s.skill_cache_entries, s.skill_cache_bytes) == (7, 3 * 1024 * 1024)
    assert (Settings.load({}).skill_cache_entries, Settings.load({}).skill_cache_bytes) == (256, 1024 << 20)
    for name, value in [("ENTRIES", "0"), ("ENTRIES", "-1"), ("MB", "lots"), ("MB", "9" * 5000)]:
        with pytest.raises(ValueError, match="skill cache"):
            Settings.load({f"WASMRUN_SKILL_CACHE_{name}": value})
