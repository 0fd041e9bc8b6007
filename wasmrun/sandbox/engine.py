"""The sandbox engine: one wasmtime Engine per process, a fresh instance per run.

    engine = SandboxEngine(blobs=store)
    result = engine.run(RunRequest(kind="code", code="def main(args): return 1"))

Every run instantiates the pre-initialised guest (see python_wasm/snapshot.py)
into a new Store with its own WASI context, limits and workspace, calls
`wasmrun_run` once and throws the Store away. Nothing here knows HTTP.
"""

from __future__ import annotations

import itertools
import logging
import os
import resource
import threading
import time
from pathlib import Path

import msgspec
import wasmtime

from python_wasm import build as guest_build
from python_wasm.exports import func, func_imports, memory
from wasmrun.abi import BLOBS as BLOBS  # the contract's names, importable from here as before
from wasmrun.abi import IMPORT_MODULE, Export, encode_request
from wasmrun.abi import SKILLS_ROOT as SKILLS_ROOT
from wasmrun.abi import TMP as TMP
from wasmrun.abi import WORKSPACE as WORKSPACE
from wasmrun.abi import GuestRequest as GuestRequest
from wasmrun.egress.client import EgressSession
from wasmrun.egress.secrets import Redactor
from wasmrun.observe import phases
from wasmrun.sandbox import compiled, errors, jsontext, reply, sessions, workroots
from wasmrun.sandbox.background import COMPILE_LIMITS, IMPORT_LIMITS, BackgroundLog, BackgroundRun
from wasmrun.sandbox.blobaccess import BlobAccess
from wasmrun.sandbox.bytecode import BytecodeCache
from wasmrun.sandbox.bytecode import guest_dir as bytecode_guest_dir
from wasmrun.sandbox.fastcall import FastFunc
from wasmrun.sandbox.guestroot import GuestRoots
from wasmrun.sandbox.hostcalls import HOST_FUNCTIONS, GuestBuffers, RunContext, output_poll, set_current
from wasmrun.sandbox.ids import new_run_id
from wasmrun.sandbox.instances import Fresh, HotPages, InstanceSupply, release_pages
from wasmrun.sandbox.limits import CEILING_LIMITS, Limits
from wasmrun.sandbox.outstream import OutputSink, OutputStream
from wasmrun.sandbox.packagelayer import PackageLayer
from wasmrun.sandbox.skillimages import NoBlobs, SkillImage, SkillImages, image_key, memory_view, single_skill
from wasmrun.sandbox.types import MountedSkill, RunError, RunRequest, RunResult, Usage, host_failure
from wasmrun.sandbox.wasi_guard import Workspace, WorkspaceDirs, define_guarded_wasi
from wasmrun.sandbox.watchdog import Watchdog, call_interrupt
from wasmrun.sandbox.workroots import WorkRoot

logger = logging.getLogger("wasmrun.sandbox")
# Typical runs: the pages any of them writes are copied into every spare instance ahead.
WARMUP_REQUESTS = (
    RunRequest(kind="code", code="def main(args):\n    print('warm')\n    return args", args_json=b'{"x":[1]}'),
    RunRequest(
        kind="code",
        code=(
            "import csv, io, json, re\n"
            "def main(args):\n"
            "    rows = list(csv.reader(io.StringIO('a,b\\n1,2\\n')))\n"
            "    return json.loads(json.dumps({'rows': rows, 'n': len(re.findall(r'\\w+', 'x y'))}))\n"
        ),
    ),
    RunRequest(kind="code", code="def main(args):\n    raise ValueError('warm')"),
)
# An import run asks for a function no module can define ("" is no identifier):
# the guest imports the skill, then refuses to call anything.
IMPORT_ONLY = ""
IMPORTED = "EntrypointNotFound"
MEMORY_LIMIT_MARGIN = 1 << 20


# Instances alive at once in one engine: spares, runs in flight and used ones
# awaiting teardown (bounded in instances.py) fit well within this.
POOL_SLOTS = 128
DECOMMIT_BATCH = 16


# The stack compiled wasm code may use on the thread that runs it. wasmtime's
# default (512 KiB) ended runs with a StackOverflow trap where CPython's own
# limits (the parser's nesting bound, the recursion limit, the compiler's 3x of
# it) raise a catchable MemoryError or RecursionError: those need about
# 1 MiB; this leaves room for C recursion through extension modules.
WASM_STACK_BYTES = 4 << 20
# Threads that run guests need the wasm stack plus the host's own frames.
RUN_THREAD_STACK_BYTES = 16 << 20


def _engine_config() -> wasmtime.Config:
    from wasmtime import _ffi as ffi

    config = wasmtime.Config()
    # CPU is measured by the run thread's clock, not fuel (see watchdog.py).
    config.epoch_interruption = True
    # wasmtime refuses a wasm stack larger than its (unused here) async stacks.
    ffi.wasmtime_config_async_stack_size_set(config.ptr(), WASM_STACK_BYTES + (1 << 20))
    config.max_wasm_stack = WASM_STACK_BYTES
    _use_pooling_allocator(config)
    return config


def _roomy_thread_stacks() -> None:
    """Threads started from now on (asyncio.to_thread's pool runs guests) and
    the main thread get a stack with room for WASM_STACK_BYTES: past the
    thread's real stack a deep guest would crash the process instead of
    trapping. Address space only; pages are used as the stack grows."""
    if threading.stack_size() < RUN_THREAD_STACK_BYTES:
        threading.stack_size(RUN_THREAD_STACK_BYTES)
    # The main thread (a pool worker runs guests there) grows up to RLIMIT_STACK.
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft != resource.RLIM_INFINITY and soft < RUN_THREAD_STACK_BYTES:
        wanted = RUN_THREAD_STACK_BYTES if hard == resource.RLIM_INFINITY else min(hard, RUN_THREAD_STACK_BYTES)
        resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))


def _use_pooling_allocator(config: wasmtime.Config) -> None:
    """Instances in pre-reserved slots, their memory reset in batches.

    Measured here against the default allocator: instantiate, run and teardown
    together take about 11% less (a slot keeps its mappings; freeing a used
    instance's pages is batched, 16 at a time). wasmtime-py has no public
    API for this, so it goes through its C bindings (the version is pinned).
    """
    from wasmtime import _ffi as ffi

    pool = ffi.wasmtime_pooling_allocation_config_new()
    try:
        ffi.wasmtime_pooling_allocation_config_total_core_instances_set(pool, POOL_SLOTS)
        ffi.wasmtime_pooling_allocation_config_total_memories_set(pool, POOL_SLOTS)
        ffi.wasmtime_pooling_allocation_config_total_tables_set(pool, POOL_SLOTS)
        ffi.wasmtime_pooling_allocation_config_max_memory_size_set(pool, CEILING_LIMITS.memory_bytes)
        ffi.wasmtime_pooling_allocation_config_decommit_batch_size_set(pool, DECOMMIT_BATCH)
        ffi.wasmtime_pooling_allocation_strategy_set(config.ptr(), pool)
    finally:
        ffi.wasmtime_pooling_allocation_config_delete(pool)


ENGINE_SETTINGS = f"fuel=0;epoch=1;pool={POOL_SLOTS};stack={WASM_STACK_BYTES}"


def load_module(engine: wasmtime.Engine, wasm: Path) -> wasmtime.Module:
    """`wasm` compiled for an engine made by `_engine_config`, from the cache when it is there."""
    return compiled.load_module(engine, wasm, ENGINE_SETTINGS)


def precompile(guest: guest_build.Guest | None = None) -> Path:
    """Compile the guest ahead of the first run (server start, `wasmrun warm`); returns the cached file."""
    guest = guest or guest_build.ready_guest(quiet=False)
    load_module(wasmtime.Engine(_engine_config()), guest.snapshot_wasm)
    return compiled.cached_path(guest.snapshot_wasm, ENGINE_SETTINGS)


def precompiled_state(guest: guest_build.Guest) -> tuple[Path, str | None]:
    """The guest's compiled-module file, and None if it is ready to load, else
    why not (never compiles; `wasmrun doctor` asks)."""
    path = compiled.cached_path(guest.snapshot_wasm, ENGINE_SETTINGS)
    if not path.exists() and compiled.shipped_path(path).is_file():
        path = compiled.shipped_path(path)  # a one-file executable's: loaded when this CPU can
    try:
        if compiled.deserialize(wasmtime.Engine(_engine_config()), path) is None:
            return path, "not compiled yet"
    except wasmtime.WasmtimeError as exc:
        reason = str(exc).partition("\n")[0]
        return path, f"compiled for another CPU or damaged ({reason})"
    return path, None


class SandboxEngine:
    """Owns the wasmtime Engine, the compiled guest and the watchdog."""

    def __init__(
        self,
        blobs: BlobAccess,
        guest: guest_build.Guest | None = None,
        workspace_root: Path | None = None,
        packages: Path | None = None,
    ) -> None:
        self.guest = guest or guest_build.ready_guest()
        # The operator's package layer for this guest's Python (wasmrun/packages), if any.
        self.packages = PackageLayer.for_engine(packages, self.guest.python_tag)
        if not self.guest.packaged:
            guest_build.mark_used(self.guest.folder)
        self.blobs = blobs
        _roomy_thread_stacks()
        self.engine = wasmtime.Engine(_engine_config())
        self.module = load_module(self.engine, self.guest.snapshot_wasm)
        linker = wasmtime.Linker(self.engine)
        define_guarded_wasi(self.engine, linker, self.module)
        for name, ty in func_imports(self.module, IMPORT_MODULE).items():
            linker.define_func(IMPORT_MODULE, name, ty, HOST_FUNCTIONS[name], access_caller=True)
        self._pre = linker.instantiate_pre(self.module)
        self._linker = linker
        run_export = self.module.exports[[e.name for e in self.module.exports].index(Export.RUN)]
        assert isinstance(run_export.type, wasmtime.FuncType)
        self._run_type = run_export.type
        self._io = self._probe_buffers()
        # This process's own folder under `workspace_root` (see workroots.py).
        self._root = WorkRoot(workspace_root or workroots.default_parent())
        self.workspace_root = self._root.path
        self._dirs = WorkspaceDirs(self.workspace_root)
        self._roots = GuestRoots(self.workspace_root / "roots")
        self._bytecode = BytecodeCache(guest_build.cache_root() / "bytecode" / self.guest.key)
        guest_build.mark_used(self._bytecode.root)
        self._watchdog = Watchdog(self.engine)
        self.background = BackgroundLog()  # runs of its own, not yet reported (background.py)
        # (Images are only made after runs: the supply exists by then.)
        self.skill_images = SkillImages(
            self._make_image, on_change=lambda: self._supply.wake(),
            key_of=lambda skill: image_key(self.guest.key + self.packages.version(), skill),
        )
        self._supply = InstanceSupply(
            self._new_instance, self._dirs, self._learn_hot_pages(),
            self.skill_images.prefault_pages, self.skill_images.recent,
        )

    def _probe_buffers(self) -> GuestBuffers:
        """Where the guest's static buffers live: the same addresses in every
        instance of this module, so asked once."""
        store = wasmtime.Store(self.engine)
        store.set_epoch_deadline(1 << 30)
        store.set_wasi(wasmtime.WasiConfig())
        exports = self._pre.instantiate(store).exports(store)
        found = GuestBuffers(*(func(exports, f"wasmrun_{name}")(store) for name in GuestBuffers._fields))
        store.close()
        return found

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

    # -- one run --------------------------------------------------------------

    def _guest_request(self, request: RunRequest, packages: Path | None) -> bytes:
        skills = {
            s.name: f"{SKILLS_ROOT}/{s.name}/{s.entrypoint}"
            for s in request.skills
            if s.entrypoint
        }
        sys_path = []
        if request.kind == "skill" and request.skill in skills:
            sys_path.append(skills[request.skill].rsplit("/", 1)[0])
        if packages is not None:
            sys_path.append(PackageLayer.GUEST_SITE)
        return encode_request(GuestRequest(
            kind=request.kind,
            code=request.code,
            skill=request.skill,
            function=request.function,
            args=msgspec.Raw(request.args_json),
            skills=skills,
            sys_path=sys_path,
            env=request.env,
            session=request.session is not None,
            reseed=request.session is None or request.session.reseed,
        ))

    def _wasi(
        self, request: RunRequest, workspace: Workspace, bytecode: dict[str, Path], bytecode_writable: bool,
        packages: Path | None,
    ) -> tuple[wasmtime.WasiConfig, frozenset[int]]:
        """The run's WASI config, and the fds of its preopens that cannot hold a
        FIFO or device (every one but the skills': ours, or made through WASI,
        which cannot make them), whose opens the path_open guard need not check."""
        wasi = wasmtime.WasiConfig()
        plain: set[int] = set()
        fds = itertools.count(3)  # WASI numbers preopens from fd 3 in the order they are given

        def preopen(host: str, guest: str, *, mutable: bool, may_hold_specials: bool = False) -> None:
            fd = next(fds)
            if not may_hold_specials:
                plain.add(fd)
            wasi.preopen_dir(host, guest, fs_mutable=mutable)

        # Order matters only for fd numbers; the guest re-scans preopens every run.
        preopen(str(self.guest.lib_dir), guest_build.GUEST_LIB, mutable=False)
        for skill in request.skills:
            preopen(skill.root, f"{SKILLS_ROOT}/{skill.name}", mutable=False, may_hold_specials=True)
        for name, folder in bytecode.items():
            preopen(str(folder), bytecode_guest_dir(name), mutable=bytecode_writable)
        layer_mounts = PackageLayer.mounts(packages)
        for host, guest in layer_mounts:
            preopen(host, guest, mutable=False)
        preopen(str(workspace.path), WORKSPACE, mutable=True)
        preopen(str(workspace.tmp), TMP, mutable=True)
        if request.input_blobs:  # each preopen costs every run a little
            preopen(str(workspace.blobs), BLOBS, mutable=False)
        # Last, so the others keep their fd numbers; see guestroot.py.
        mount_points = (
            guest_build.GUEST_LIB,
            SKILLS_ROOT,
            *(f"{SKILLS_ROOT}/{skill.name}" for skill in request.skills),
            *(bytecode_guest_dir(name) for name in bytecode),
            *(guest for _, guest in layer_mounts),
            WORKSPACE,
            TMP,
            *((BLOBS,) if request.input_blobs else ()),
        )
        preopen(str(self._roots.for_mounts(mount_points)), "/", mutable=False)
        # No stdout/stderr here: the fd_write guard captures fds 1 and 2 itself
        # (wasmtime-py's custom-output callbacks also panic at interpreter exit).
        return wasi, frozenset(plain)

    def _place_input_blobs(self, blob_ids: list[str], folder: Path, owner: str) -> None:
        """Each input blob of `owner` as `folder/<blob id>`: a hard link to the
        store's file (no copy, whatever its size), or a copy where the store has
        no file on this filesystem. Only ids the store finds become names."""
        for blob_id in blob_ids:
            target = folder / blob_id
            if self.blobs.size(blob_id, owner) is None or target.parent != folder:
                continue
            source = self.blobs.local_path(blob_id, owner)
            if source is not None:
                try:
                    os.link(source, target)
                    continue
                except FileExistsError:
                    continue
                except OSError:
                    pass  # another filesystem: copy
            try:
                size = self.blobs.size(blob_id, owner) or 0
                with open(target, "wb") as f:
                    for offset in range(0, size, 1 << 20):
                        f.write(self.blobs.read(blob_id, offset, 1 << 20, owner))
            except (OSError, KeyError):
                logger.warning("could not place input blob %s in /blobs", blob_id)
                target.unlink(missing_ok=True)

    def _new_instance(self) -> Fresh:
        store = wasmtime.Store(self.engine)
        exports = self._pre.instantiate(store).exports(store)
        run = func(exports, Export.RUN)
        # Called through FastFunc: wasmtime-py's Func.__call__ rebuilds and checks the
        # function's type on every call (about 0.1 ms of a hello run here).
        return Fresh(store, FastFunc(run, self._run_type), memory(exports), interrupt=func(exports, Export.INTERRUPT))

    def _learn_hot_pages(self) -> HotPages:
        pages: set[int] = set()
        read: set[int] = set()
        for request in WARMUP_REQUESTS:
            fresh = self._new_instance()
            result, workspace = self._run_on(fresh, request, time.perf_counter())
            self._tally("warmup", result, "completed")  # the last one fails on purpose
            pages |= HotPages.written_pages(fresh.store, fresh.memory)
            read |= HotPages.read_pages(fresh.store, fresh.memory)
            fresh.store.close()
            self._dirs.give_back(workspace.root)
        hot = HotPages.from_pages(pages, read)
        logger.debug("%d hot pages will be copied into each spare instance, %d more mapped", hot.pages, len(read))
        return hot

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
            # The import run has no environment and no network: a run granted either
            # imports for itself (a skill may read them at import).
            no_network = request.network is None or not request.network.granted
            skill = single_skill(request.skills) if not request.env and no_network else None
            key = image_key(self.guest.key + self.packages.version(), skill) if skill is not None else None
            image = self.skill_images.get(key) if key is not None else None
            if image is not None and image.memory_bytes > request.limits.memory_bytes:
                image = None  # the import alone would not fit this run's memory limit
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

    def _make_image(self, skill: MountedSkill) -> SkillImage | None:
        """An import run of `skill` in a never-used instance (not a prefaulted
        spare, so that only the import's own writes differ from the snapshot),
        with IMPORT_LIMITS; its changed pages, or None if the skill does not
        import on its own within them."""
        bytecode = self._skill_bytecode([skill])
        pristine = self._new_instance()  # compared against, never run
        fresh = self._new_instance()
        request = RunRequest(
            kind="skill", skill=skill.name, function=IMPORT_ONLY, skills=[skill], limits=IMPORT_LIMITS
        )
        workspace: Workspace | None = None
        try:
            result, workspace = self._run_on(fresh, request, time.perf_counter(), bytecode, blobs=NoBlobs())
            imported = result.error is not None and result.error.type == IMPORTED
            self._tally("import", result, "completed" if imported else None)
            if not imported:
                logger.info("skill %s has no import image: %s", skill.name, result.error)
                return None
            image = SkillImage.difference(
                memory_view(pristine.store, pristine.memory),
                memory_view(fresh.store, fresh.memory),
                self.skill_images.max_bytes,
            )
            if image is None:
                logger.info("skill %s has no import image: its import changes too much memory", skill.name)
            return image
        finally:
            fresh.store.close()
            pristine.store.close()
            if workspace is not None:
                self._dirs.give_back(workspace.root)

    def _skill_bytecode(self, skills: list[MountedSkill]) -> dict[str, Path]:
        """Each mounted action skill's compiled bytecode, compiling it first if needed."""
        found = {}
        for skill in skills:
            if not skill.entrypoint:
                continue
            key, folder = self._bytecode.lookup(skill)
            if folder is None:
                folder = self._compile(skill, key)
            if folder is not None:
                found[skill.name] = folder
        return found

    def _compile(self, skill: MountedSkill, key: str) -> Path | None:
        """A compile run: our guest code compiles the skill's modules (and runs
        none of them) into a folder only this run can write."""
        staging = self._bytecode.staging()
        fresh = self._supply.take()
        request = RunRequest(kind="compile", skills=[skill], limits=COMPILE_LIMITS)
        try:
            result, workspace = self._run_on(fresh, request, time.perf_counter(), {skill.name: staging}, True)
        except BaseException:
            fresh.store.close()
            self._supply.forget()
            raise
        self._supply.retire(fresh.store, workspace)
        self._tally("compile", result)
        if result.status != "completed":
            logger.warning("compiling skill %s failed: %s", skill.name, result.error)
            self._bytecode.discard(staging)
            return None
        return self._bytecode.commit(key, staging)

    def _tally(self, kind: str, result: RunResult, outcome: str | None = None) -> None:
        """Count a background run of `kind` for /metrics (background.py)."""
        if outcome is None:
            outcome = result.error.type if result.error is not None else result.status
        self.background.add(BackgroundRun(kind, outcome, result.usage.cpu_ms))

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
        run_id = request.run_id or new_run_id()
        limits = request.limits
        packages = self.packages.current()  # read per run: `packages add` needs no restart
        root = workspace_root or self._dirs.take()
        workspace = Workspace(root, limits.workspace_bytes, limits.workspace_files, self._dirs.block)
        if workspace_root is not None:  # a session's folders: what they hold counts from the start
            workspace.est_bytes, workspace.est_files = workspace.measure()
        if request.input_blobs:
            self._place_input_blobs(request.input_blobs, workspace.blobs, request.owner)
        ctx = RunContext(
            run_id, self._guest_request(request, packages), limits, blobs or self.blobs, request.input_blobs, workspace, self._io,
            egress=EgressSession(request.network) if request.network is not None else None,
            owner=request.owner, blob_quota=request.blob_quota,
            stream=OutputStream(on_output, limits.output_bytes, _redactor(request)) if on_output is not None else None,
        )
        store, memory = fresh.store, fresh.memory
        usage = Usage(prepared_ahead=fresh.prepared_ahead)
        error: RunError | None = None
        try:
            store.set_limits(memory_size=limits.memory_bytes)
            Watchdog.arm(store)
            wasi, plain_fds = self._wasi(request, workspace, bytecode or {}, bytecode_writable, packages)
            ctx.plain_fds = set(plain_fds)
            store.set_wasi(wasi)
            io = self._io
            request_len = -1  # too large for the buffer: the guest asks by host call
            if len(ctx.request_bytes) <= io.io_capacity:
                memory.write(store, ctx.request_bytes, io.io_buffer)
                request_len = len(ctx.request_bytes)
            t1 = time.perf_counter()
            interrupt = call_interrupt(fresh.interrupt) if fresh.interrupt is not None else None
            on_tick = output_poll(ctx, memory) if ctx.stream is not None else None
            phases.mark("entry")
            watch = self._watchdog.start(limits.cpu_ms, limits.timeout_ms, interrupt, on_tick)
            ctx.deadline = watch.deadline
            set_current(ctx)
            try:
                response_len = fresh.run(store, request_len)
                phases.mark("guest")
                if 0 <= response_len <= io.io_capacity:
                    ctx.response = bytes(memory.read(store, io.io_buffer, io.io_buffer + response_len))
                stopped = watch.error()
                if stopped is not None:  # asked to stop, it replied within the grace
                    error = reply.stopped_here(stopped, ctx.response)
                elif ctx.response is None:
                    error = RunError(errors.GUEST_CRASH, "the interpreter failed to run the request")
                elif len(ctx.response) > limits.result_bytes:
                    error = RunError(errors.INVALID_OUTPUT, errors.result_too_large(limits.result_bytes))
            except errors.RunAborted as exc:
                error = RunError(exc.error_type, exc.message)
            # A run marked over a budget was stopped by the watchdog (an error from
            # its epoch callback), whatever else raced it.
            except wasmtime.Trap as trap:
                error = watch.hard_stop_error() or _classify_trap(trap, memory.data_len(store), limits)
            except wasmtime.WasmtimeError as exc:
                error = watch.hard_stop_error() or RunError(errors.GUEST_CRASH, f"the sandbox failed: {_first_line(str(exc))}")
            except Exception:
                # A bug on our side of a host call: keep the details in the server log only.
                logger.exception("host call failed in run %s", run_id)
                error = RunError(errors.INTERNAL, "the sandbox host failed; the run was stopped")
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
        finally:
            ctx.wasi_funcs.clear()
            ctx.egress.close()
        usage.blob_io_bytes = ctx.blob_io
        usage.http_requests = ctx.egress.usage.requests
        usage.http_bytes_out = ctx.egress.usage.bytes_out
        usage.http_bytes_in = ctx.egress.usage.bytes_in
        result = RunResult(run_id=run_id, status="completed", output_blobs=ctx.output_blobs, usage=usage)
        if error is None:
            assert ctx.response is not None
            reply.apply(result, ctx.response)
        else:
            result.status = "failed"
            result.error = error
        if result.error is not None and result.error.type in (errors.MEMORY_LIMIT, "MemoryError"):
            # The limit and how to ask for more (for the guest's own MemoryError
            # too: the host has no evidence it came from the limit, but says what the limit is).
            hint = errors.memory_hint(limits.memory_bytes, CEILING_LIMITS.memory_bytes)
            result.error = RunError(result.error.type, f"{result.error.message}\n{hint}")
        result.logs = ctx.logs.text()
        result.logs_cut_bytes = ctx.logs.cut
        _redact_secrets(result, request)
        usage.total_ms = round((time.perf_counter() - t0) * 1000, 3)
        phases.mark("result")
        return result, workspace


def _redactor(request: RunRequest) -> Redactor | None:
    """What replaces the run's secret values (environment or host-held) by their placeholders."""
    secrets = dict(request.env)
    if request.network is not None:
        secrets.update(request.network.host_secrets)
    if not secrets:
        return None
    redact = Redactor(secrets)
    return redact if redact else None


def _redact_secrets(result: RunResult, request: RunRequest) -> None:
    """Secret values replaced by their placeholders in everything the run returns."""
    redact = _redactor(request)
    if redact is None:
        return
    result.logs = redact.text(result.logs)
    if result.error is not None:
        result.error = RunError(result.error.type, redact.text(result.error.message))
    if redact.data(result.output_json) != result.output_json:
        if len(result.output_json) > jsontext.FULL_DECODE_BYTES:
            # Redacting means decoding: not for a value that large (its objects would cost the host ~30x).
            result.status, result.output_json = "failed", b"null"
            result.error = RunError(errors.INVALID_OUTPUT, errors.secret_in_large_output(jsontext.FULL_DECODE_BYTES))
            return
        # Redacted in the decoded value, not the text: a replacement must not break JSON escapes.
        result.output_json = msgspec.json.encode(redact.value(msgspec.json.decode(result.output_json)))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


def _classify_trap(trap: wasmtime.Trap, memory_len: int, limits: Limits) -> RunError:
    """The error type of a trap, from the host's evidence only: the trap code,
    and how close the guest's memory is to its limit. Nothing the guest
    printed counts (it could print anything)."""
    code = trap.trap_code
    if code == wasmtime.TrapCode.STACK_OVERFLOW:
        return RunError(errors.STACK_OVERFLOW, "the guest's call stack overflowed")
    # The interpreter aborts when an allocation fails that it cannot turn into
    # MemoryError: its memory is then within one growth step of the limit.
    if memory_len + MEMORY_LIMIT_MARGIN >= limits.memory_bytes:
        return RunError(errors.MEMORY_LIMIT, f"the run exceeded its memory limit of {limits.memory_bytes} bytes")
    name = code.name.lower().replace("_", " ") if code is not None else "trap"
    return RunError(errors.GUEST_CRASH, f"the interpreter stopped: {name}")
