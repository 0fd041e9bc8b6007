"""The sandbox engine: one Image per engine, a fresh instance per run.

    engine = SandboxEngine(blobs=store)
    result = engine.run(RunRequest(kind="code", code="def main(args): return 1"))

Every run takes a fresh instance of the image's pre-initialised guest (from
the instance supply, memory/instances.py), in a new Store with its own WASI context,
limits and workspace, enters the guest once and throws the Store away. What
differs between guests is the Image (images/image.py: images/stdlibimage.py,
images/dataimage.py); a run itself is the RunLoop's (runloop.py), which the engine
holds and hands to a session's run (sessions/run.py) and its own runs
(backgroundruns.py). The engine adds what a caller sees: which run starts from a
skill's pages, sessions, and closing. Nothing here knows HTTP.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

from python_wasm import build as guest_build
from wasmrun import phases
from wasmrun.sandbox import backgroundruns
from wasmrun.sandbox.contract.blobaccess import BlobAccess
from wasmrun.sandbox.contract.ids import new_run_id
from wasmrun.sandbox.contract.types import MountedSkill, RunRequest, RunResult, host_failure
from wasmrun.sandbox.files.skillstamp import SkillStamp, SkillTooLarge, stamp_skill, stamp_skills
from wasmrun.sandbox.guest.outstream import OutputSink
from wasmrun.sandbox.images.image import Image
from wasmrun.sandbox.images.stdlibimage import StdlibImage
from wasmrun.sandbox.memory.instances import release_pages
from wasmrun.sandbox.memory.skillpages import SkillPages, SkillPagesCache, pages_key, single_skill
from wasmrun.sandbox.runloop import RunLoop
from wasmrun.sandbox.sessions.run import run_in_session
from wasmrun.sandbox.sessions.warm import WarmInstances

logger = logging.getLogger("wasmrun.sandbox")


class SandboxEngine:
    """Runs requests on one Image (the stdlib guest unless given another), through
    its RunLoop (`loop`: instance supply, watchdog, run folders, bytecode)."""

    def __init__(
        self,
        blobs: BlobAccess,
        guest: guest_build.Guest | None = None,
        workspace_root: Path | None = None,
        packages: Path | None = None,
        image: Image | None = None,
    ) -> None:
        self.image = image or StdlibImage(guest, packages)
        # A skill's pages are made by an import run on the loop, and copied into spares by its supply.
        self.skill_pages = SkillPagesCache(
            lambda skill: backgroundruns.import_skill_pages(self.loop, skill, self.skill_pages.max_bytes),
            on_change=lambda: self.loop.supply.wake(),
            key_of=self._pages_key_now,
        )
        self.loop = RunLoop(
            self.image, blobs, workspace_root, backgroundruns.learn_hot_pages,
            self.skill_pages.prefault_pages, self.skill_pages.recent,
        )
        self.warm_sessions = WarmInstances()  # a session's instance, kept for its next run here

    def drain(self) -> None:
        """Wait for every finished run's teardown (store, workspace)."""
        self.loop.supply.drain()

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until spare instances are ready and teardown is done (benchmarks use it)."""
        self.loop.supply.wait_idle(timeout)

    def close_warm_sessions(self) -> None:
        """Close the instances kept warm for recent sessions: their next runs read their pages from disk."""
        self.warm_sessions.close()

    def close(self) -> None:
        self.close_warm_sessions()
        self.skill_pages.close()
        self.loop.close()

    def __enter__(self) -> SandboxEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -----------------------------------------------------------------

    def interrupt(self, run_id: str) -> bool:
        """From another thread: stop the run `run_id` if this engine is running it (True);
        it fails with `Interrupted` (errors.INTERRUPTED), as a budget would stop it."""
        return self.loop.watchdog.interrupt(run_id)

    def run(self, request: RunRequest, on_output: OutputSink | None = None) -> RunResult:
        """Run `request` in a fresh instance. Never raises: whatever fails, on
        the guest's side or (a bug) on ours, fails this run alone. With
        `on_output`, its output is also handed there as it is written (on this
        thread; see outstream.py)."""
        t0 = time.perf_counter()
        phases.mark("sandbox")
        if request.session is not None:
            return run_in_session(self.loop, self.warm_sessions, request, t0, on_output)
        try:
            try:
                stamps = stamp_skills(request.skills)  # once per run: the keys below and the mounts take them
            except SkillTooLarge as too_large:
                return _refused(request, too_large, t0)
            bytecode = backgroundruns.skill_bytecode(self.loop, request.skills, stamps)
            skill, key, pages = self._skill_pages_for(request, stamps)
            fresh = self.loop.supply.take(pages)
            phases.mark("instance")
            try:
                if pages is not None and fresh.applied is not pages:
                    pages.apply(fresh.store, fresh.memory)
                result, workspace = self.loop.run_in(fresh, request, t0, bytecode, on_output=on_output, stamps=stamps)
            except BaseException:
                fresh.store.close()
                self.loop.supply.forget()  # it never comes back through retire
                raise
            release_pages(fresh.store, fresh.memory)
            self.loop.supply.retire(fresh.store, workspace)
            if skill is not None and key is not None and pages is None and result.status == "completed":
                # Only after a completed run: the import fits these limits (a skill
                # that hangs at import costs no background run).
                self.skill_pages.request(key, skill)
            return result
        except Exception:
            return host_failure(request, "the sandbox host failed; the run was stopped")

    def _skill_pages_for(
        self, request: RunRequest, stamps: Mapping[MountedSkill, SkillStamp]
    ) -> tuple[MountedSkill | None, str | None, SkillPages | None]:
        """The one skill a run may start from the pages of (its modules imported), their
        key (from the run's stamp of it), and the pages themselves when they are made and
        fit the run's memory."""
        # The import run has no environment and no network: a run granted either
        # imports for itself (a skill may read them at import).
        no_network = request.network is None or not request.network.granted
        if not self.image.makes_skill_pages or request.env or not no_network or request.packages:
            return None, None, None
        skill = single_skill(request.skills)
        if skill is None:
            return None, None, None
        key = pages_key(self._guest_key(), skill, stamps[skill])
        pages = self.skill_pages.get(key)
        if pages is not None and pages.memory_bytes > request.limits.memory_bytes:
            pages = None  # the import alone would not fit this run's memory limit
        return skill, key, pages

    def _guest_key(self) -> str:
        """What the skill's pages were made on: the guest build and the package layer's version."""
        return self.image.key + self.image.packages.version()

    def _pages_key_now(self, skill: MountedSkill) -> str | None:
        """The skill's pages' key as its files are now (a new stamp): the cache keeps pages
        made by an import run only if the skill did not change meanwhile."""
        try:
            return pages_key(self._guest_key(), skill, stamp_skill(skill))
        except SkillTooLarge:
            return None


def _refused(request: RunRequest, too_large: SkillTooLarge, t0: float) -> RunResult:
    """The result of a run refused before it started: a skill past the stamp's bounds."""
    result = RunResult(run_id=request.run_id or new_run_id(), status="failed", error=too_large.run_error())
    result.usage.total_ms = round((time.perf_counter() - t0) * 1000, 3)
    return result
