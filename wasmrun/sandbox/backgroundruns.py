"""The engine's own runs: warm-up, skill bytecode compiles and a skill's pages (its import run).

Their limits and their tally are contract/background.py's; these run them on the
engine's RunLoop (its supply, run folders and `run_in`), the way sessions/run.py runs
a session's run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

from wasmrun.sandbox.contract.background import COMPILE_LIMITS, IMPORT_LIMITS, BackgroundRun
from wasmrun.sandbox.contract.types import MountedSkill, RunRequest, RunResult
from wasmrun.sandbox.files.skillstamp import SkillStamp, SkillTooLarge, stamp_skills
from wasmrun.sandbox.files.workspace import Workspace
from wasmrun.sandbox.guest.guestmemory import memory_view
from wasmrun.sandbox.memory.instances import HotPages
from wasmrun.sandbox.memory.skillpages import NoBlobs, SkillPages
from wasmrun.sandbox.runloop import RunLoop

logger = logging.getLogger("wasmrun.sandbox")
# An import run asks for a function no module can define ("" is no identifier):
# the guest imports the skill, then refuses to call anything.
IMPORT_ONLY = ""
IMPORTED = "EntrypointNotFound"


def learn_hot_pages(loop: RunLoop) -> HotPages:
    """The warm-up runs: the pages they write are copied into every spare ahead, those they read mapped."""
    pages: set[int] = set()
    read: set[int] = set()
    for request in loop.image.warmup:
        fresh = loop.image.new_instance()
        result, workspace = loop.run_in(fresh, request, time.perf_counter())
        _tally(loop, "warmup", result, "completed")  # the last one fails on purpose
        pages |= HotPages.written_pages(fresh.store, fresh.memory)
        read |= HotPages.read_pages(fresh.store, fresh.memory)
        fresh.store.close()
        loop.dirs.give_back(workspace.root)
    hot = HotPages.from_pages(pages, read)
    logger.debug("%d hot pages will be copied into each spare instance, %d more mapped", hot.pages, len(read))
    return hot


def import_skill_pages(loop: RunLoop, skill: MountedSkill, max_bytes: int) -> SkillPages | None:
    """An import run of `skill` in a never-used instance (not a prefaulted
    spare, so that only the import's own writes differ from the snapshot),
    with IMPORT_LIMITS; its changed pages (at most `max_bytes`), or None if
    the skill does not import on its own within them."""
    if not loop.image.makes_skill_pages:
        return None
    try:
        stamps = stamp_skills([skill])
    except SkillTooLarge:
        return None  # its runs are refused
    bytecode = skill_bytecode(loop, [skill], stamps)
    pristine = loop.image.new_instance()  # compared against, never run
    fresh = loop.image.new_instance()
    request = RunRequest(
        kind="skill", skill=skill.name, function=IMPORT_ONLY, skills=[skill], limits=IMPORT_LIMITS
    )
    workspace: Workspace | None = None
    try:
        result, workspace = loop.run_in(fresh, request, time.perf_counter(), bytecode, blobs=NoBlobs(), stamps=stamps)
        imported = result.error is not None and result.error.type == IMPORTED
        _tally(loop, "import", result, "completed" if imported else None)
        if not imported:
            logger.info("skill %s has no pages of its own: %s", skill.name, result.error)
            return None
        pages = SkillPages.difference(
            memory_view(pristine.store, pristine.memory), memory_view(fresh.store, fresh.memory), max_bytes,
        )
        if pages is None:
            logger.info("skill %s has no pages of its own: its import changes too much memory", skill.name)
        return pages
    finally:
        fresh.store.close()
        pristine.store.close()
        if workspace is not None:
            loop.dirs.give_back(workspace.root)


def skill_bytecode(
    loop: RunLoop, skills: list[MountedSkill], stamps: Mapping[MountedSkill, SkillStamp]
) -> dict[str, Path]:
    """Each mounted action skill's compiled bytecode, found by the run's stamp of it
    and compiled first if needed (none on an image that runs skills from source)."""
    found: dict[str, Path] = {}
    bytecode = loop.bytecode
    if bytecode is None:
        return found
    for skill in skills:
        if not skill.entrypoint:
            continue
        key, folder = bytecode.lookup(skill, stamps[skill])
        if folder is None:
            folder = _compile(loop, skill, key, stamps[skill])
        if folder is not None:
            found[skill.name] = folder
    return found


def stamps_and_bytecode(
    loop: RunLoop, skills: list[MountedSkill]
) -> tuple[Mapping[MountedSkill, SkillStamp] | None, dict[str, Path]]:
    """The skills' stamps, taken once for a run (None when one is past their bounds:
    `run_in` then refuses the run), and their bytecode found by them (skill_bytecode)."""
    try:
        stamps = stamp_skills(skills)
    except SkillTooLarge:
        return None, {}
    return stamps, skill_bytecode(loop, skills, stamps)


def _compile(loop: RunLoop, skill: MountedSkill, key: str, stamp: SkillStamp) -> Path | None:
    """A compile run: our guest code compiles the skill's modules (and runs
    none of them) into a folder only this run can write."""
    bytecode = loop.bytecode
    assert bytecode is not None
    staging = bytecode.staging()
    fresh = loop.supply.take()
    request = RunRequest(kind="compile", skills=[skill], limits=COMPILE_LIMITS)
    try:
        result, workspace = loop.run_in(fresh, request, time.perf_counter(), {skill.name: staging}, True,
                                        stamps={skill: stamp})
    except BaseException:
        fresh.store.close()
        loop.supply.forget()
        raise
    loop.supply.retire(fresh.store, workspace)
    _tally(loop, "compile", result)
    if result.status != "completed":
        logger.warning("compiling skill %s failed: %s", skill.name, result.error)
        bytecode.discard(staging)
        return None
    return bytecode.commit(key, staging)


def _tally(loop: RunLoop, kind: str, result: RunResult, ended: str | None = None) -> None:
    """Count a background run of `kind` for /metrics (contract/background.py)."""
    if ended is None:
        ended = result.error.type if result.error is not None else result.status
    loop.background.add(BackgroundRun(kind, ended, result.usage.cpu_ms))
