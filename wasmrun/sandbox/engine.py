"""The sandbox engine: one Image per engine, a fresh instance per run.

    engine = SandboxEngine(blobs=store)
    result = engine.run(RunRequest(kind="code", code="def main(args): return 1"))

Every run takes a fresh instance of the image's pre-initialised guest (from
the instance supply, instances.py) in a new Store with its own WASI context,
limits and workspace, enters the guest once and throws the Store away. What
differs between guests is the Image (image.py: stdlibimage.py, images.py);
the run loop (`_run_on`) is the same for every image. Nothing here knows HTTP.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from pathlib import Path

from python_wasm import build as guest_build
from wasmrun import phases
from wasmrun.egress.client import EgressSession
from wasmrun.sandbox import backgroundruns, guestrequest, outcome, redaction, sessions, workroots
from wasmrun.sandbox.background import BackgroundLog
from wasmrun.sandbox.blobaccess import BlobAccess
from wasmrun.sandbox.bytecode import BytecodeCache
from wasmrun.sandbox.guestroot import GuestRoots
from wasmrun.sandbox.hostcalls import RunContext, output_poll, set_current
from wasmrun.sandbox.ids import new_run_id
from wasmrun.sandbox.image import Image, Mounts
from wasmrun.sandbox.instances import Fresh, InstanceSupply, release_pages
from wasmrun.sandbox.outstream import OutputSink, OutputStream
from wasmrun.sandbox.skillimages import SkillImage, SkillImages, image_key, single_skill
from wasmrun.sandbox.stdlibimage import StdlibImage
from wasmrun.sandbox.stdlibimage import precompile as precompile  # cli, server, doctor: from here
from wasmrun.sandbox.stdlibimage import precompiled_state as precompiled_state
from wasmrun.sandbox.types import MountedSkill, RunError, RunRequest, RunResult, Usage, host_failure
from wasmrun.sandbox.watchdog import Watchdog, call_interrupt
from wasmrun.sandbox.workroots import WorkRoot
from wasmrun.sandbox.workspace import Workspace, WorkspaceDirs, place_input_blobs

logger = logging.getLogger("wasmrun.sandbox")
# Threads that run guests need the wasm stack (stdlibimage.WASM_STACK_BYTES) plus the host's own frames.
RUN_THREAD_STACK_BYTES = 16 << 20


def _roomy_thread_stacks() -> None:
    """Threads started from now on (asyncio.to_thread's pool runs guests) and
    the main thread get a stack with room for the wasm stack: past the
    thread's real stack a deep guest would crash the process instead of
    trapping. Address space only; pages are used as the stack grows."""
    if threading.stack_size() < RUN_THREAD_STACK_BYTES:
        threading.stack_size(RUN_THREAD_STACK_BYTES)
    # The main thread (a pool worker runs guests there) grows up to RLIMIT_STACK.
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft != resource.RLIM_INFINITY and soft < RUN_THREAD_STACK_BYTES:
        wanted = RUN_THREAD_STACK_BYTES if hard == resource.RLIM_INFINITY else min(hard, RUN_THREAD_STACK_BYTES)
        resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))


class SandboxEngine:
    """Runs requests on one Image (the stdlib guest unless given another),
    with its instance supply, watchdog and run folders."""

    def __init__(
        self,
        blobs: BlobAccess,
        guest: guest_build.Guest | None = None,
        workspace_root: Path | None = None,
        packages: Path | None = None,
        image: Image | None = None,
    ) -> None:
        self.image = image or StdlibImage(guest, packages)
        self.blobs = blobs
        _roomy_thread_stacks()
        # The image's parts under their earlier names (sessions, benchmarks and tests use them).
        self.engine, self.module, self.guest = self.image.engine, self.image.module, self.image.guest
        self.packages, self._linker, self._new_instance = self.image.packages, self.image.linker, self.image.new_instance
        # This process's own folder under `workspace_root` (see workroots.py).
        self._root = WorkRoot(workspace_root or workroots.default_parent())
        self.workspace_root = self._root.path
        self._dirs = WorkspaceDirs(self.workspace_root, extra=self.image.run_folders, kept=self.image.kept_run_folders)
        self._roots = GuestRoots(self.workspace_root / "roots")
        self._bytecode: BytecodeCache | None = None
        if self.image.compiles_skills:
            self._bytecode = BytecodeCache(guest_build.cache_root() / "bytecode" / self.image.key)
            guest_build.mark_used(self._bytecode.root)
        self._watchdog = Watchdog(self.engine)
        self.background = BackgroundLog()  # runs of its own, not yet reported (background.py)
        # (Images are only made after runs: the supply exists by then.)
        self.skill_images = SkillImages(
            lambda skill: backgroundruns.import_image(self, skill), on_change=lambda: self._supply.wake(),
            key_of=lambda skill: image_key(self.image.key + self.packages.version(), skill),
        )
        self._supply = InstanceSupply(
            self._new_instance, self._dirs, backgroundruns.learn_hot_pages(self),
            self.skill_images.prefault_pages, self.skill_images.recent,
        )

    def drain(self) -> None:
        """Wait for every finished run's teardown (store, workspace)."""
        self._supply.drain()

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until spare instances are ready and teardown is done (benchmarks use it)."""
        self._supply.wait_idle(timeout)

    def close(self) -> None:
        sessions.close_warm(self)
        self.skill_images.close()
        self._supply.close()
        self._watchdog.close()
        self._dirs.remove_all()
        self._roots.remove_all()
        self._root.release()  # whatever a failed teardown left, at any depth

    def __enter__(self) -> SandboxEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs -----------------------------------------------------------------

    def run(self, request: RunRequest, on_output: OutputSink | None = None) -> RunResult:
        """Run `request` in a fresh instance. Never raises: whatever fails, on
        the guest's side or (a bug) on ours, fails this run alone. With
        `on_output`, its output is also handed there as it is written (on this
        thread; see outstream.py)."""
        t0 = time.perf_counter()
        phases.mark("sandbox")
        if request.session is not None:
            return sessions.run_in_session(self, request, t0, on_output)
        try:
            bytecode = self._skill_bytecode(request.skills)
            skill, key, image = self._skill_image_for(request)
            fresh = self._supply.take(image)
            phases.mark("instance")
            try:
                if image is not None and fresh.applied is not image:
                    image.apply(fresh.store, fresh.memory)
                result, workspace = self._run_on(fresh, request, t0, bytecode, on_output=on_output)
            except BaseException:
                fresh.store.close()
                self._supply.forget()  # it never comes back through retire
                raise
            release_pages(fresh.store, fresh.memory)
            self._supply.retire(fresh.store, workspace)
            if skill is not None and key is not None and image is None and result.status == "completed":
                # Only after a completed run: the import fits these limits (a skill
                # that hangs at import costs no background run).
                self.skill_images.request(key, skill)
            return result
        except Exception:
            return host_failure(request, "the sandbox host failed; the run was stopped")

    def _skill_image_for(self, request: RunRequest) -> tuple[MountedSkill | None, str | None, SkillImage | None]:
        """The one skill a run may start from the import image of, that image's
        key, and the image itself when it is made and fits the run's memory."""
        # The import run has no environment and no network: a run granted either
        # imports for itself (a skill may read them at import).
        no_network = request.network is None or not request.network.granted
        if not self.image.makes_skill_images or request.env or not no_network:
            return None, None, None
        skill = single_skill(request.skills)
        if skill is None:
            return None, None, None
        key = image_key(self.image.key + self.packages.version(), skill)
        image = self.skill_images.get(key) if key is not None else None
        if image is not None and image.memory_bytes > request.limits.memory_bytes:
            image = None  # the import alone would not fit this run's memory limit
        return skill, key, image

    def _run_on(
        self,
        fresh: Fresh,
        request: RunRequest,
        t0: float,
        bytecode: dict[str, Path] | None = None,
        bytecode_writable: bool = False,
        blobs: BlobAccess | None = None,
        workspace_root: Path | None = None,
        on_output: OutputSink | None = None,
    ) -> tuple[RunResult, Workspace]:
        """Run `request` in `fresh`: its folders (a session's `workspace_root`, else a
        run folder of ours), its context, the call into the guest, its result."""
        run_id = request.run_id or new_run_id()
        packages = self.packages.current()  # read per run: `packages add` needs no restart
        blobs = blobs or self.blobs
        workspace = self._workspace(request, workspace_root)
        ctx = RunContext(
            run_id, guestrequest.encode(request, packages), request.limits, blobs, request.input_blobs, workspace,
            self.image.buffers, egress=EgressSession(request.network) if request.network is not None else None,
            owner=request.owner, blob_quota=request.blob_quota,
            stream=OutputStream(on_output, request.limits.output_bytes, redaction.redactor(request))
            if on_output is not None else None,
        )
        mounts = Mounts(request, workspace, self._roots, bytecode or {}, bytecode_writable, packages)
        usage = Usage(prepared_ahead=fresh.prepared_ahead)
        ctx.wasi_funcs = fresh.wasi_funcs
        try:
            error = self._call_guest(fresh, ctx, mounts, usage, t0)
        finally:
            ctx.egress.close()
        result = outcome.result(run_id, ctx, usage, error)
        if result.status == "completed":
            self.image.finish(result, workspace, request, blobs)
        redaction.redact_result(result, request)
        usage.total_ms = round((time.perf_counter() - t0) * 1000, 3)
        phases.mark("result")
        return result, workspace

    def _workspace(self, request: RunRequest, root: Path | None) -> Workspace:
        """The run's /workspace, /tmp and /blobs under `root` (a session's), else in a run folder of ours."""
        limits = request.limits
        workspace = Workspace(root or self._dirs.take(), limits.workspace_bytes, limits.workspace_files, self._dirs.block)
        if root is not None:  # a session's folders: what they hold counts from the start
            workspace.est_bytes, workspace.est_files = workspace.measure()
        if request.input_blobs:
            place_input_blobs(self.blobs, request.input_blobs, workspace.blobs, request.owner)
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
        interrupt = call_interrupt(fresh) if fresh.interrupt is not None else None
        on_tick = output_poll(ctx, memory) if ctx.stream is not None else None
        phases.mark("entry")
        watch = self._watchdog.start(limits.cpu_ms, limits.timeout_ms, interrupt, on_tick)
        ctx.deadline = watch.deadline
        set_current(ctx)
        try:
            self.image.enter(fresh, ctx)
            phases.mark("guest")
            error = outcome.returned(watch.error(), ctx.response, limits)
        except Exception as exc:
            error = outcome.raised(exc, watch, memory.data_len(store), limits, ctx.run_id)
        finally:
            usage.cpu_ms = round(watch.cpu_ms(), 3)
            self._watchdog.finish(watch)
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

    # -- the engine's own runs (backgroundruns.py) -----------------------------

    def _skill_bytecode(self, skills: list[MountedSkill]) -> dict[str, Path]:
        """Each mounted action skill's compiled bytecode, compiling it first if needed
        (none on an image that runs skills from source)."""
        return backgroundruns.skill_bytecode(self, skills)
