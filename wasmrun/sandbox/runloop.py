"""The run loop: what every run needs, and one run from a fresh instance to its result.

A RunLoop owns the parts a run takes from its engine: the Image, the instance supply,
the run folders (this process's work root, the guest's `/`), the watchdog, the skill
bytecode cache, blob access and the tally of the engine's own runs. The engine
(engine.py) holds one and so do a session's run (sessions/run.py) and the engine's own
runs (backgroundruns.py), through its public methods:

    result, workspace = loop.run_in(fresh, request, t0)

`run_in` is the same for every image and every kind of run: the run's folders and
context, limits and WASI on its store, the watchdog armed, the guest entered once, the
outcome classified, the image's finishing touch, secrets redacted. Nothing here knows
HTTP, sessions or skill pages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from python_wasm import downloads
from wasmrun import phases
from wasmrun.egress.client import EgressSession
from wasmrun.sandbox import outcome, redaction
from wasmrun.sandbox.budget import stackroom
from wasmrun.sandbox.budget.watchdog import Watchdog
from wasmrun.sandbox.contract.background import BackgroundLog
from wasmrun.sandbox.contract.blobaccess import BlobAccess
from wasmrun.sandbox.contract.ids import new_run_id
from wasmrun.sandbox.contract.types import MountedSkill, RunError, RunRequest, RunResult, Usage
from wasmrun.sandbox.files import workroots
from wasmrun.sandbox.files.guestroot import GuestRoots
from wasmrun.sandbox.files.skillstamp import SkillStamp, SkillTooLarge, stamp_skills
from wasmrun.sandbox.files.workroots import WorkRoot
from wasmrun.sandbox.files.workspace import Workspace, WorkspaceDirs, place_input_blobs
from wasmrun.sandbox.guest import guestrequest, packagecall
from wasmrun.sandbox.guest.hostcalls import RunContext, output_poll, set_current
from wasmrun.sandbox.guest.outstream import OutputSink, OutputStream
from wasmrun.sandbox.guest.toolwait import ToolSession
from wasmrun.sandbox.images.image import Image, Mounts
from wasmrun.sandbox.memory.bytecode import BytecodeCache
from wasmrun.sandbox.memory.instances import Fresh, HotPages, InstanceSupply, PagesToApply


class RunLoop:
    """The parts of one engine's runs, and `run_in`. `hot_pages` learns which pages
    every spare gets ahead (it runs on this loop before the supply exists);
    `prefault_pages` and `recent_pages` are the skill pages the supply copies in."""

    def __init__(
        self,
        image: Image,
        blobs: BlobAccess,
        workspace_root: Path | None,
        hot_pages: Callable[[RunLoop], HotPages],
        prefault_pages: Callable[[], frozenset[int]],
        recent_pages: Callable[[int], Sequence[PagesToApply]],
    ) -> None:
        self.image = image
        self.blobs = blobs
        stackroom.roomy_thread_stacks()
        # This process's own folder under `workspace_root` (see workroots.py).
        self._root = WorkRoot(workspace_root or workroots.default_parent())
        self.workspace_root = self._root.path
        self.dirs = WorkspaceDirs(self.workspace_root, extra=image.run_folders, kept=image.kept_run_folders)
        self._roots = GuestRoots(self.workspace_root / "roots")
        self.bytecode: BytecodeCache | None = None
        if image.compiles_skills:
            self.bytecode = BytecodeCache(downloads.cache_root() / "bytecode" / image.key)
            downloads.mark_used(self.bytecode.root)
        self.watchdog = Watchdog(image.engine)
        self.background = BackgroundLog()  # runs of its own, not yet reported (contract/background.py)
        self.supply = InstanceSupply(image.new_instance, self.dirs, hot_pages(self), prefault_pages, recent_pages)

    def close(self) -> None:
        self.supply.close()
        self.watchdog.close()
        self.dirs.remove_all()
        self._roots.remove_all()
        self._root.release()  # whatever a failed teardown left, at any depth

    def run_in(
        self,
        fresh: Fresh,
        request: RunRequest,
        t0: float,
        bytecode: dict[str, Path] | None = None,
        bytecode_writable: bool = False,
        blobs: BlobAccess | None = None,
        workspace_root: Path | None = None,
        on_output: OutputSink | None = None,
        started_from: Path | None = None,
        stamps: Mapping[MountedSkill, SkillStamp] | None = None,
    ) -> tuple[RunResult, Workspace]:
        """Run `request` in `fresh`: its folders (a session's `workspace_root`, whose
        /workspace began as a copy of `started_from`, else a run folder of ours, given back
        by the caller), its context, the call into the guest, its result. `bytecode`: the
        skills' compiled folders (writable: a compile run). `stamps`: its skills' stamps
        taken for this run (the engine's), else taken here: a skill past their bounds fails
        the run with SkillTooLarge, the guest never entered."""
        run_id = request.run_id or new_run_id()
        # read per run: `packages add` needs no restart; a run's own set (on-demand installs) instead
        packages = Path(request.packages) if request.packages else self.image.packages.current()
        blobs = blobs or self.blobs
        workspace = self._workspace(request, workspace_root, started_from)
        ctx = RunContext(
            run_id, guestrequest.encode(request, packages), request.limits, blobs, request.input_blobs, workspace,
            self.image.buffers, egress=EgressSession(request.network) if request.network is not None else None,
            owner=request.owner, blob_quota=request.blob_quota,
            stream=OutputStream(on_output, request.limits.output_bytes, redaction.redactor(request))
            if on_output is not None else None,
        )
        if request.tools:
            ctx.tools = ToolSession(run_id, request.tools, request.tool_limits)
        ctx.packages = packagecall.for_run(request, self.image.python_tag, packages, workspace.tmp)
        refused: RunError | None = None
        if stamps is None:
            try:
                stamps = stamp_skills(request.skills)
            except SkillTooLarge as too_large:
                stamps, refused = {}, too_large.run_error()
        mounts = Mounts(request, workspace, self._roots, bytecode or {}, bytecode_writable, packages, stamps)
        usage = Usage(prepared_ahead=fresh.prepared_ahead)
        ctx.wasi_funcs = fresh.wasi_funcs
        try:
            # (on a thread whose stack holds the guest's: stackroom.py)
            error = refused or stackroom.call_with_room(
                self.image.wasm_stack_bytes, lambda: self._call_guest(fresh, ctx, mounts, usage, t0))
        finally:
            ctx.egress.close()
            ctx.packages.after_run()
        result = outcome.result(run_id, ctx, usage, error)
        result.packages_added = ctx.packages.added
        if result.status == "completed":
            self.image.finish(result, workspace, request, blobs)
        redaction.redact_result(result, request)
        usage.total_ms = round((time.perf_counter() - t0) * 1000, 3)
        phases.mark("result")
        return result, workspace

    def _workspace(self, request: RunRequest, root: Path | None, started_from: Path | None) -> Workspace:
        """The run's /workspace, /tmp and /blobs under `root` (a session's), else in a run folder of ours."""
        limits = request.limits
        workspace = Workspace(
            root or self.dirs.take(), limits.workspace_bytes, limits.workspace_files, self.dirs.block, started_from,
            self.dirs.empty,
        )
        if root is not None:  # a session's folders: what they hold counts from the start
            workspace.est_bytes, workspace.est_files = workspace.measure()
        if request.input_blobs:
            place_input_blobs(self.blobs, request.input_blobs, workspace.blobs, request.owner)
        elif root is not None:  # a session's version has no /blobs folder without input blobs
            workspace.blobs = workspace.empty
        return workspace

    def _call_guest(self, fresh: Fresh, ctx: RunContext, mounts: Mounts, usage: Usage, t0: float) -> RunError | None:
        """Limits, WASI and the watchdog set on `fresh`'s store, the guest entered once;
        the run's error (None: its reply stands). Its output is captured whatever happens."""
        store, memory, limits = fresh.store, fresh.memory, ctx.limits
        store.set_limits(memory_size=limits.memory_bytes)
        Watchdog.arm(store)
        wasi, plain_fds = self.image.preopens(mounts)
        ctx.plain_fds = set(plain_fds)
        store.set_wasi(wasi)
        t1 = time.perf_counter()
        interrupt = fresh.interrupt_caller()
        on_tick = output_poll(ctx, memory) if ctx.stream is not None else None
        phases.mark("entry")
        watch = self.watchdog.start(limits.cpu_ms, limits.timeout_ms, interrupt, on_tick, run_id=ctx.run_id)
        ctx.deadline = watch.deadline
        if ctx.tools is not None:  # waiting for the client's tools is not the run's time (toolwait.py)
            ctx.tools.interrupted = watch.woken

            def pause(seconds: float) -> None:
                watch.deadline += seconds
                ctx.deadline = watch.deadline

            ctx.tools.pause = pause
        set_current(ctx)
        try:
            self.image.enter(fresh, ctx)
            phases.mark("guest")
            error = outcome.returned(watch.error(), ctx.response, limits)
        except Exception as exc:
            error = outcome.raised(exc, watch, memory.data_len(store), limits, ctx.run_id)
        finally:
            usage.cpu_ms = round(watch.cpu_ms(), 3)
            self.watchdog.finish(watch)
            set_current(None)
            ctx.drain_guest_output(store, memory)
            if ctx.stream is not None:
                ctx.stream.finish()
        phases.mark("captured")
        t2 = time.perf_counter()
        usage.peak_memory_bytes = memory.data_len(store)
        usage.instantiate_ms = round((t1 - t0) * 1000, 3)
        usage.run_ms = round((t2 - t1) * 1000, 3)
        return error
