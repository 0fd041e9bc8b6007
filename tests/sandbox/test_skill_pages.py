"""A skill's pages: later runs of a skill start with its modules imported.

The import's print is the visible evidence: a run that imports the skill
itself logs it; a run started from the skill's pages does not (the import
is not repeated). Everything else a run sees must stay as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.sandbox.conftest import make_skill
from wasmrun.sandbox.contract.limits import LimitPolicy
from wasmrun.sandbox.contract.types import MountedSkill, RunRequest, RunResult
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.files.skillstamp import stamp_skill
from wasmrun.sandbox.guest.guestmemory import memory_view
from wasmrun.sandbox.memory import instances
from wasmrun.sandbox.memory.instances import APPLIED_MAX_BYTES, SKILL_PAGE_SPARES, SPARES, Fresh, HotPages, InstanceSupply
from wasmrun.sandbox.memory.skillpages import MAX_PREFAULT_PAGES, SkillPages, SkillPagesCache, pages_key

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

MAIN = """\
import random
print("importing the skill")
SEEN = []
TABLE = {i: str(i) for i in range(1000)}

def main(args):
    SEEN.append(1)
    return {"version": VERSION, "seen": len(SEEN), "rand": random.getrandbits(64), "table": len(TABLE)}
"""


def _skill(root: Path, name: str, version: int = 1, extra: str = "") -> MountedSkill:
    return make_skill(root, name, {"code/main.py": f"VERSION = {version}\n" + MAIN + extra})


def _run(engine: SandboxEngine, skill: MountedSkill, **limits: int) -> RunResult:
    return engine.run(RunRequest(
        kind="skill", skill=skill.name, skills=[skill], limits=LimitPolicy().resolve(**limits),
    ))


def _output(result: RunResult) -> dict:
    assert result.status == "completed", result.error
    return json.loads(result.output_json)


def _warm(engine: SandboxEngine, skill: MountedSkill) -> RunResult:
    """The first run (which imports), then wait for the skill's pages."""
    first = _run(engine, skill)
    assert engine.skill_pages.wait_ready(120)
    return first


def test_later_runs_start_with_the_skill_imported(engine: SandboxEngine, tmp_path: Path) -> None:
    skill = _skill(tmp_path, "img.basic")
    first = _warm(engine, skill)
    assert "importing the skill" in first.logs
    later = [_run(engine, skill) for _ in range(3)]
    for result in later:
        assert "importing the skill" not in result.logs
        out = _output(result)
        # Nothing of one run reaches the next: module state starts where the import left it.
        assert out["seen"] == 1 and out["table"] == 1000 and out["version"] == 1
    # Each run is reseeded: no two runs draw the same numbers.
    draws = {_output(r)["rand"] for r in [first, *later]}
    assert len(draws) == 4


def test_run_code_mounting_exactly_that_skill_uses_its_pages(
    engine: SandboxEngine, tmp_path: Path, run_code
) -> None:
    skill = _skill(tmp_path, "img.code")
    _warm(engine, skill)
    code = "from skills.img.code import main as m\ndef main(args):\n    return m(args)\n"
    result = run_code(code, skills=[skill])
    assert "importing the skill" not in result.logs
    assert _output(result)["seen"] == 1
    other = make_skill(tmp_path, "img.other", {"code/main.py": "def main(args):\n    return 0\n"})
    both = run_code(code, skills=[skill, other])  # not exactly that skill: imports as before
    assert "importing the skill" in both.logs and _output(both)["seen"] == 1


def test_a_changed_file_is_new_pages(engine: SandboxEngine, tmp_path: Path) -> None:
    skill = _skill(tmp_path, "img.change")
    _warm(engine, skill)
    main = Path(skill.root) / "code" / "main.py"
    main.write_text("VERSION = 22\n" + MAIN)
    os.utime(main, ns=(1, 1))  # an old mtime: the size alone changed
    changed = _run(engine, skill)
    assert _output(changed)["version"] == 22 and "importing the skill" in changed.logs
    # A data file the import reads changes the key too.
    data = Path(skill.root) / "code" / "data.txt"
    data.write_text("a")
    reader = _skill(tmp_path, "img.change", 3, 'DATA = open(__file__.rsplit("/", 1)[0] + "/data.txt").read()\n')
    _warm(engine, reader)
    data.write_text("bb")
    result = engine.run(RunRequest(
        kind="code", skills=[reader],
        code="from skills.img.change import DATA\ndef main(args):\n    return DATA\n",
    ))
    assert json.loads(result.output_json) == "bb"


def test_a_new_version_is_new_pages(engine: SandboxEngine, tmp_path: Path) -> None:
    v1 = _skill(tmp_path / "v1", "img.version", 1)
    _warm(engine, v1)
    v2 = _skill(tmp_path / "v2", "img.version", 2)
    result = _run(engine, v2)
    assert _output(result)["version"] == 2 and "importing the skill" in result.logs
    assert _output(_run(engine, v1))["version"] == 1


def test_the_key_names_the_guest_build_and_the_skill(tmp_path: Path) -> None:
    skill = _skill(tmp_path, "img.key")
    key = pages_key("guest-a", skill, stamp_skill(skill))
    assert key == pages_key("guest-a", skill, stamp_skill(skill))
    assert key != pages_key("guest-b", skill, stamp_skill(skill))  # a new guest build
    other = MountedSkill(skill.name, skill.root, "code/other.py")
    assert key != pages_key("guest-a", other, stamp_skill(other))
    (Path(skill.root) / "code" / "new.py").write_text("")
    assert key != pages_key("guest-a", skill, stamp_skill(skill))  # a file added


@pytest.mark.parametrize("changes_files", [False, True])
def test_pages_are_kept_only_if_the_skill_did_not_change_while_they_were_made(tmp_path, changes_files) -> None:
    """A skill's files removed or changed during its import run (a skill-cache folder
    evicted, an operator editing) would make wrong pages under the old key."""
    skill = make_skill(tmp_path, "img.moving", {"code/main.py": "VALUE = 1\n"})

    def make(skill: MountedSkill) -> SkillPages:
        if changes_files:
            (Path(skill.root) / "code" / "main.py").unlink()
        return SkillPages(1 << 20, ((0, bytearray(10)),))

    cache = SkillPagesCache(make, key_of=lambda s: pages_key("guest", s, stamp_skill(s)))
    key = pages_key("guest", skill, stamp_skill(skill))
    assert key is not None
    cache.request(key, skill)
    assert cache.wait_ready()
    assert (cache.get(key) is None) == changes_files
    cache.close()


def test_a_failed_import_run_is_tried_again_later_a_bounded_number_of_times(tmp_path) -> None:
    """A failure (a busy host, a skill changing) is not final: a later request tries
    again once its backoff has passed, up to MAX_ATTEMPTS failures, never more."""
    from wasmrun.sandbox.memory.skillpages import MAX_ATTEMPTS

    skill = make_skill(tmp_path, "img.flaky", {"code/main.py": "VALUE = 1\n"})
    made: list[str] = []

    def make(skill: MountedSkill) -> SkillPages | None:
        made.append(skill.name)
        return None

    cache = SkillPagesCache(make, retry_after_s=0.0)
    for attempt in range(1, MAX_ATTEMPTS + 3):
        cache.request("k", skill)
        assert cache.wait_ready()
        assert cache.failures("k") == min(attempt, MAX_ATTEMPTS)
    assert len(made) == MAX_ATTEMPTS
    cache.close()
    waiting = SkillPagesCache(make, retry_after_s=3600.0)
    waiting.request("k", skill)
    assert waiting.wait_ready()
    waiting.request("k", skill)  # within its backoff: not tried again yet
    assert waiting.wait_ready() and waiting.failures("k") == 1 and len(made) == MAX_ATTEMPTS + 1
    waiting.close()


def test_the_cache_is_bounded_by_count_and_bytes() -> None:
    def pages_of(n: int) -> SkillPages:
        return SkillPages(1 << 20, ((0, bytearray(n)),))

    cache = SkillPagesCache(lambda skill: None, max_skills=2, max_bytes=10_000)
    cache.put("a", pages_of(1000))
    cache.put("b", pages_of(1000))
    assert cache.get("a") is not None  # now the most recently used
    cache.put("c", pages_of(1000))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    cache.put("d", pages_of(9_500))
    assert len(cache) == 1 and cache.get("d") is not None and cache.total_bytes == 9_500
    cache.put("huge", pages_of(20_000))  # larger than the whole cache: never kept
    assert cache.get("huge") is None and cache.total_bytes == 9_500
    cache.close()


def test_the_pages_keep_skill_files_read_only_and_the_listings(engine: SandboxEngine, tmp_path: Path) -> None:
    extra = (
        "\nimport os\n"
        "def probe(args):\n"
        "    try:\n"
        "        open(__file__, 'a').write('x')\n"
        "        wrote = True\n"
        "    except OSError:\n"
        "        wrote = False\n"
        "    try:\n"
        "        root = sorted(os.listdir('/'))\n"
        "    except OSError as exc:\n"  # the data image has no `/` of its own (its mounts are baked in)
        "        root = type(exc).__name__\n"
        "    return {'wrote': wrote, 'root': root, 'skills': sorted(os.listdir('/skills'))}\n"
    )
    skill = _skill(tmp_path, "img.ro", 1, extra)
    first = engine.run(RunRequest(kind="skill", skill=skill.name, function="probe", skills=[skill]))
    assert engine.skill_pages.wait_ready(120)
    later = engine.run(RunRequest(kind="skill", skill=skill.name, function="probe", skills=[skill]))
    assert "importing the skill" not in later.logs
    assert _output(later) == _output(first)
    assert _output(later)["wrote"] is False and _output(later)["skills"] == ["img.ro"]


def test_runs_leave_the_skills_files_as_they_were_and_its_pages_are_used(engine: SandboxEngine, tmp_path: Path) -> None:
    """A run only reads a skill's files: their identity (ctime included, which names
    the skill's version in its image key) is the same after runs as before. The data
    image's /skills views once hard-linked them per run, which changed every file's
    ctime: no run ever matched the skill's pages."""
    skill = _skill(tmp_path, "img.untouched")
    files = sorted(p for p in Path(skill.root).rglob("*") if p.is_file())
    before = {p: (p.stat().st_ino, p.stat().st_nlink, p.stat().st_ctime_ns) for p in files}
    key = pages_key(engine.image.key + engine.image.packages.version(), skill, stamp_skill(skill))
    _warm(engine, skill)
    later = [_run(engine, skill) for _ in range(3)]
    engine.drain()  # used run folders (their views) emptied too
    assert {p: (p.stat().st_ino, p.stat().st_nlink, p.stat().st_ctime_ns) for p in files} == before
    assert pages_key(engine.image.key + engine.image.packages.version(), skill, stamp_skill(skill)) == key
    assert all("importing the skill" not in result.logs for result in later)


def test_pages_larger_than_the_memory_limit_are_not_used(engine: SandboxEngine, tmp_path: Path) -> None:
    skill = _skill(tmp_path, "img.big", 1, "BIG = bytearray(64 << 20)\n")
    _warm(engine, skill)
    assert "importing the skill" not in _run(engine, skill).logs
    small = _run(engine, skill, memory_bytes=64 << 20)
    # The skill's own import does not fit this limit: the run fails as it would without pages.
    assert small.status == "failed" and "importing the skill" in small.logs


def test_a_run_that_fails_makes_no_pages(engine: SandboxEngine, tmp_path: Path) -> None:
    skill = _skill(tmp_path, "img.fails", 1, "def fails(args):\n    raise ValueError('no')\n")
    for _ in range(2):
        result = engine.run(RunRequest(kind="skill", skill=skill.name, function="fails", skills=[skill]))
        assert engine.skill_pages.wait_ready(120)
        assert result.status == "failed" and "importing the skill" in result.logs


def test_a_skill_that_fails_to_import_runs_as_before(engine: SandboxEngine, tmp_path: Path) -> None:
    skill = make_skill(tmp_path, "img.broken", {"code/main.py": "raise RuntimeError('broken at import')\n"})
    for _ in range(2):
        result = _run(engine, skill)
        assert engine.skill_pages.wait_ready(120)
        assert result.status == "failed" and "broken at import" in result.error.message


def test_the_import_run_reads_and_writes_no_blobs(engine: SandboxEngine, blobs, tmp_path: Path) -> None:
    source = "from runtime import blobs\nBLOB = blobs.write_text('made at import')\ndef main(args):\n    return BLOB\n"
    skill = make_skill(tmp_path, "img.blobs", {"code/main.py": source})
    before = set(blobs.data)
    first = _run(engine, skill)
    assert engine.skill_pages.wait_ready(120)
    second = _run(engine, skill)
    made = set(blobs.data) - before
    # Two runs, two blobs, both the caller's: the import run stored nothing.
    assert {json.loads(first.output_json), json.loads(second.output_json)} == made
    assert all(blobs.owners[b] == "local" for b in made)


@pytest.mark.parametrize("name", ["text.stats"])
def test_a_bundled_skill_gives_the_same_answer_from_its_pages(engine: SandboxEngine, name: str) -> None:
    root = Path(__file__).parents[2] / "skills" / name
    skill = MountedSkill(name, str(root), "code/main.py")
    args = b'{"text": "One fish. Two fish. Red fish, blue fish."}'
    first = engine.run(RunRequest(kind="skill", skill=name, skills=[skill], args_json=args))
    assert engine.skill_pages.wait_ready(120)
    later = engine.run(RunRequest(kind="skill", skill=name, skills=[skill], args_json=args))
    assert first.status == later.status == "completed"
    assert json.loads(later.output_json) == json.loads(first.output_json)


def test_pages_hold_only_the_changed_ones() -> None:
    page = 4096
    base = bytearray(4 * page)
    after = bytearray(base) + bytearray(3 * page)  # grown by three pages
    after[page + 5] = 1  # one page changed inside the old memory
    after[5 * page] = 2  # one grown page written; the other two stay zero
    found = SkillPages.difference(memoryview(bytes(base)), memoryview(after), max_bytes=1 << 20)
    assert found is not None
    assert found.memory_bytes == 7 * page
    assert [(offset, len(data)) for offset, data in found.spans] == [(page, page), (5 * page, page)]
    assert SkillPages.difference(memoryview(bytes(base)), memoryview(after), max_bytes=page) is None


def test_a_skill_of_more_files_than_the_old_key_bound_gets_its_pages(engine: SandboxEngine, tmp_path: Path) -> None:
    """Its key once gave up past 1,000 entries (the skill imported in every run); the run's
    stamp of it is bounded by files/skillstamp.py's bounds instead, and taken once per run."""
    files = {f"data/{i}.txt": "x" for i in range(1_001)}
    skill = make_skill(tmp_path, "img.many", {"code/main.py": "VERSION = 1\n" + MAIN, **files})
    first = _warm(engine, skill)
    later = _run(engine, skill)
    assert "importing the skill" in first.logs and "importing the skill" not in later.logs
    assert _output(later)["seen"] == 1


# -- writing pages in, and spares ready for them --------------------------------


def test_pages_written_in_change_exactly_those_pages(engine: SandboxEngine) -> None:
    pristine, target = engine.image.new_instance(), engine.image.new_instance()
    try:
        size = pristine.memory.data_len(pristine.store)
        page, wasm_page = 4096, 65536
        spans = (
            (page, bytearray(b"\x01" * page)),
            (3 * page, bytearray(b"\x02" * 2 * page)),
            (size + page, bytearray(b"\x03" * page)),  # in memory the pages grow
        )
        found = SkillPages(size + wasm_page, spans)
        found.apply(target.store, target.memory)
        expected = bytearray(memory_view(pristine.store, pristine.memory)) + bytearray(wasm_page)
        for offset, data in spans:
            expected[offset : offset + len(data)] = data
        assert memory_view(target.store, target.memory) == expected
    finally:
        pristine.store.close()
        target.store.close()


def test_the_pages_copied_ahead_are_bounded_and_follow_the_cache() -> None:
    def pages_of(first_page: int, pages: int) -> SkillPages:
        return SkillPages(1 << 30, ((first_page * 4096, bytearray(pages * 4096)),))

    changes: list[int] = []
    cache = SkillPagesCache(lambda skill: None, on_change=lambda: changes.append(1))
    cache.put("a", pages_of(0, 600))
    cache.put("b", pages_of(500, 300))  # overlaps a: the union is 800 pages
    assert cache.prefault_pages() == frozenset(range(800)) and len(changes) == 2
    cache.put("c", pages_of(2000, 400))  # the most recent first; a would pass the bound
    assert cache.prefault_pages() == frozenset(range(500, 800)) | frozenset(range(2000, 2400))
    assert len(cache.prefault_pages()) <= MAX_PREFAULT_PAGES
    cache.enabled = False  # pages off: nothing to copy ahead
    assert cache.prefault_pages() == frozenset()
    cache.enabled = True
    small = SkillPagesCache(lambda skill: None, max_skills=1)
    small.put("a", pages_of(0, 10))
    small.put("b", pages_of(100, 10))  # a is evicted: its pages are no longer copied ahead
    assert small.prefault_pages() == frozenset(range(100, 110))
    cache.close()
    small.close()


def _no_skill_modules(engine: SandboxEngine, fresh: Fresh) -> None:
    """Run, on `fresh`, code that mounts nothing: it must see no skill's state."""
    probe = "import sys\ndef main(args):\n    return [m for m in sys.modules if m.startswith('skills')]"
    result, workspace = engine.loop.run_in(fresh, RunRequest(kind="code", code=probe), 0.0)
    engine.loop.supply.retire(fresh.store, workspace)
    assert _output(result) == []


def test_spares_for_runs_from_pages_hold_those_pages_and_nothing_of_the_skill(
    engine: SandboxEngine, tmp_path: Path
) -> None:
    skill = _skill(tmp_path, "img.spare")
    _warm(engine, skill)
    found = engine.skill_pages.get(pages_key(engine.image.guest.key, skill, stamp_skill(skill)))
    assert found is not None and found.pages() <= engine.skill_pages.prefault_pages()
    engine.wait_idle(60)
    supply = engine.loop.supply
    with supply._cond:
        ready = [spare for spare in supply._spares if spare.has_skill_pages]
    assert len(ready) == SKILL_PAGE_SPARES
    other = SkillPages(found.memory_bytes, found.spans)  # pages no spare has written in
    fresh = supply.take(other)
    assert fresh in ready and fresh.applied is None
    mapped = fresh.memory.data_len(fresh.store) // 4096
    assert {p for p in found.pages() if p < mapped} <= HotPages.written_pages(fresh.store, fresh.memory)
    # Only copied in, never written: the spare is still the snapshot.
    _no_skill_modules(engine, fresh)


def test_a_spare_with_pages_written_in_serves_only_runs_from_those_pages(
    engine: SandboxEngine, tmp_path: Path
) -> None:
    skill = _skill(tmp_path, "img.applied")
    _warm(engine, skill)
    found = engine.skill_pages.get(pages_key(engine.image.guest.key, skill, stamp_skill(skill)))
    engine.wait_idle(60)
    supply = engine.loop.supply
    assert [spare.applied for spare in supply._applied].count(found) == 1
    # Runs that are not from those pages never get them, however many spares they use.
    for fresh in [supply.take() for _ in range(SPARES + SKILL_PAGE_SPARES + 1)]:
        assert fresh.applied is None
        _no_skill_modules(engine, fresh)
    assert [spare.applied for spare in supply._applied].count(found) == 1
    # A run from the pages does, and starts exactly where the import left off.
    later = _run(engine, skill)
    assert "importing the skill" not in later.logs and _output(later)["seen"] == 1
    assert found not in [spare.applied for spare in supply._applied]
    engine.wait_idle(60)
    assert [spare.applied for spare in supply._applied].count(found) == 1  # made again
    # Pages off (or evicted): their spare is torn down, never handed out.
    engine.skill_pages.enabled = False
    try:
        engine.wait_idle(60)
        assert supply._applied == []
        assert "importing the skill" in _run(engine, skill).logs
    finally:
        engine.skill_pages.enabled = True


def test_large_pages_get_no_spare_written_in(engine: SandboxEngine, tmp_path: Path) -> None:
    skill = _skill(tmp_path, "img.large", 1, "BIG = b'x' * (20 << 20)\n")
    _warm(engine, skill)
    found = engine.skill_pages.get(pages_key(engine.image.guest.key, skill, stamp_skill(skill)))
    assert found is not None and found.nbytes > APPLIED_MAX_BYTES
    engine.wait_idle(60)
    # An idle spare holding 20 MB for one skill: not made; runs still start from the pages.
    assert found not in [spare.applied for spare in engine.loop.supply._applied]
    later = _run(engine, skill)
    assert "importing the skill" not in later.logs and _output(later)["seen"] == 1


def test_where_pages_cannot_be_copied_in_the_supply_stops_trying(
    engine: SandboxEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No MADV_POPULATE_WRITE (an old kernel, not Linux): spares for runs from pages are
    # given up on once, not retried in every quiet moment (a housekeeper spinning).
    monkeypatch.setattr(instances, "_madvise", lambda: None)
    supply = InstanceSupply(engine.image.new_instance, engine.loop.dirs, HotPages([]), lambda: frozenset({1, 2, 3}))
    try:
        supply.wait_idle(60)
        with supply._cond:
            assert len(supply._spares) == SPARES
            assert not any(spare.has_skill_pages for spare in supply._spares)
            assert not supply._has_work()
    finally:
        supply.close()
