"""The sandbox: untrusted Python in a wasm guest under wasmtime, one fresh instance per run.

This module is the sandbox's one door: code outside `wasmrun/sandbox/` imports what
`__all__` lists, from here, never a module inside (scripts/check_architecture.py keeps it
so; tests under tests/sandbox/ may reach inside, they test the parts). Names load on
first use, so importing a type (`from wasmrun.sandbox import RunRequest`) does not load
wasmtime or a guest.

Inside, one concept per sub-package, from the bottom up: each imports only those listed
before it, with no exception (scripts/check_architecture.py's SUB_LAYERS checks this order;
docs/architecture.md):

- contract/: the run's request and result, limits, error types, run ids, background runs'
  limits and tally, what the sandbox needs from blob storage
- files/: a run's folders and their quota, each process's work root, the guest's `/`,
  the operator's package layer
- guest/: the guest boundary: memory, request and reply, host calls and the data image's
  door, trailing-slash paths, captured and streamed output, displays, JSON text,
  wasmtime-py's private API
- budget/: CPU and wall-clock budgets (the watchdog and its alarm), and the WASI calls the
  host checks first (workspace quota, sleep deadline, FIFOs)
- memory/: memory kept ahead: spare instances, a skill's pages, skill bytecode, heap trim
- images/: the guest images (the Image seam, the stdlib image, the data image and its
  start, its figures, the compiled-module cache, the images' names); `python -m
  wasmrun.sandbox.images` makes the data image. An image knows nothing of the engine
  that runs it, nor of sessions
- outcome.py, redaction.py: how a run ended, secrets out
- runloop.py: the RunLoop, what every run needs (image, instances, folders, watchdog,
  bytecode, blobs) and the run itself
- backgroundruns.py: the engine's own runs (warm-up, compiles, a skill's pages)
- sessions/: a run inside a session, a session's state and pages on disk, warm instances
- engine.py: SandboxEngine, what a caller holds
- engines.py: which engine a server runs: an image choice ("auto", "stdlib", "data") and
  the SandboxEngine on it (make_engine, DataSandboxEngine, resolve_image)
- pool/: off the event loop: the executor, worker processes, the data image's warm-up
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Each name of the face, and the module it lives in. The names in _NAMESPACES are
# modules: constants or functions used together (errors.TIMEOUT, warmup.available()).
_HOME = {
    # the run contract
    "RunRequest": "contract.types",
    "RunResult": "contract.types",
    "RunError": "contract.types",
    "Usage": "contract.types",
    "MountedSkill": "contract.types",
    "SessionRun": "contract.types",
    "SessionOutcome": "contract.types",
    "Display": "contract.types",
    "Limits": "contract.limits",
    "LimitPolicy": "contract.limits",
    "CEILING_LIMITS": "contract.limits",
    "DEFAULT_LIMITS": "contract.limits",
    "BackgroundTotals": "contract.background",
    "IMPORT_LIMITS": "contract.background",
    "errors": "contract.errors",
    "SESSION_BYTES": "contract.errors",
    "session_bytes_exceeded": "contract.errors",
    "new_run_id": "contract.ids",
    # packages a run installs from inside: the grant, the installer it names, what was added
    "PackageInstalls": "contract.packageinstalls",
    "PackageInstaller": "contract.packageinstalls",
    "InstalledSet": "contract.packageinstalls",
    "InstallRefused": "contract.packageinstalls",
    "AddedPackages": "contract.packageinstalls",
    "PackageCall": "guest.packagecall",
    # JSON text in and out, output as it comes
    "encode_args": "guest.jsontext",
    "NotSendable": "guest.jsontext",
    "output_problem": "guest.jsontext",
    "value_count_at_most": "guest.jsontext",
    "guest_warnings": "guest.jsontext",
    "OutputChunk": "guest.outstream",
    "OutputSink": "guest.outstream",
    "OutputStream": "guest.outstream",
    # engines and images
    "SandboxEngine": "engine",
    "precompile": "images.stdlibimage",
    "precompiled_state": "images.stdlibimage",
    "precompiled_path": "images.stdlibimage",
    "DataSandboxEngine": "engines",
    "make_engine": "engines",
    "data_engine": "images.dataimage",
    "ready_image": "images.dataimage",
    "ready_image_path": "images.dataimage",
    "image_state": "images.dataimage",
    "resolve_image": "engines",
    "compiled": "images.compiled",
    "DATA_IMAGE_MAKER": "images",
    # the cache of built guests, images and compiled modules: its bound, live servers' leases
    "cachebound": "images.cachebound",
    "leases": "images.leases",
    "HotPages": "memory.instances",
    "PackageLayer": "files.packagelayer",
    "release_freed_heap": "memory.heaptrim",
    "can_release_freed_heap": "memory.heaptrim",
    # sessions' state on disk (the session stores)
    "session_state": "sessions.state",
    # running off the event loop
    "Executor": "pool.executor",
    "ExecutorHealth": "pool.executor",
    "InProcessExecutor": "pool.executor",
    "Busy": "pool.executor",
    "WorkerPool": "pool.pool",
    "BlobOpener": "pool.poolworker",
    "WorkerProcess": "pool.workerprocess",
    "WORKER_PACKAGE": "pool.workerprocess",
    "warmup": "pool.warmup",
    # code mode: the client's tools a run calls (contract/tools.py)
    "tool_contract": "contract.tools",
    "ToolSpec": "contract.tools",
    "ToolLimits": "contract.tools",
    "ToolBatch": "contract.tools",
    "ToolAnswer": "contract.tools",
    "ToolAnswers": "contract.tools",
}

_NAMESPACES = {"errors", "compiled", "cachebound", "leases", "warmup", "session_state", "tool_contract"}  # the module itself

__all__ = [
    "AddedPackages",
    "BackgroundTotals",
    "BlobOpener",
    "Busy",
    "cachebound",
    "can_release_freed_heap",
    "CEILING_LIMITS",
    "compiled",
    "data_engine",
    "DATA_IMAGE_MAKER",
    "DataSandboxEngine",
    "DEFAULT_LIMITS",
    "Display",
    "encode_args",
    "errors",
    "Executor",
    "ExecutorHealth",
    "guest_warnings",
    "HotPages",
    "image_state",
    "IMPORT_LIMITS",
    "InProcessExecutor",
    "InstalledSet",
    "InstallRefused",
    "leases",
    "LimitPolicy",
    "new_run_id",
    "Limits",
    "make_engine",
    "MountedSkill",
    "NotSendable",
    "output_problem",
    "OutputChunk",
    "OutputSink",
    "OutputStream",
    "PackageCall",
    "PackageInstaller",
    "PackageInstalls",
    "PackageLayer",
    "precompile",
    "precompiled_path",
    "precompiled_state",
    "ready_image",
    "ready_image_path",
    "release_freed_heap",
    "resolve_image",
    "RunError",
    "RunRequest",
    "RunResult",
    "SandboxEngine",
    "SESSION_BYTES",
    "session_bytes_exceeded",
    "session_state",
    "SessionOutcome",
    "SessionRun",
    "tool_contract",
    "ToolAnswer",
    "ToolAnswers",
    "ToolBatch",
    "ToolLimits",
    "ToolSpec",
    "Usage",
    "value_count_at_most",
    "warmup",
    "WORKER_PACKAGE",
    "WorkerPool",
    "WorkerProcess",
]


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{home}")
    value = module if name in _NAMESPACES else getattr(module, name)
    globals()[name] = value  # found once; later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from wasmrun.sandbox.contract import errors
    from wasmrun.sandbox.contract import tools as tool_contract
    from wasmrun.sandbox.contract.background import IMPORT_LIMITS, BackgroundTotals
    from wasmrun.sandbox.contract.errors import SESSION_BYTES, session_bytes_exceeded
    from wasmrun.sandbox.contract.ids import new_run_id
    from wasmrun.sandbox.contract.limits import CEILING_LIMITS, DEFAULT_LIMITS, LimitPolicy, Limits
    from wasmrun.sandbox.contract.packageinstalls import (
        AddedPackages,
        InstalledSet,
        InstallRefused,
        PackageInstaller,
        PackageInstalls,
    )
    from wasmrun.sandbox.contract.tools import ToolAnswer, ToolAnswers, ToolBatch, ToolLimits, ToolSpec
    from wasmrun.sandbox.contract.types import (
        Display,
        MountedSkill,
        RunError,
        RunRequest,
        RunResult,
        SessionOutcome,
        SessionRun,
        Usage,
    )
    from wasmrun.sandbox.engine import SandboxEngine
    from wasmrun.sandbox.engines import DataSandboxEngine, make_engine, resolve_image
    from wasmrun.sandbox.files.packagelayer import PackageLayer
    from wasmrun.sandbox.guest.jsontext import (
        NotSendable,
        encode_args,
        guest_warnings,
        output_problem,
        value_count_at_most,
    )
    from wasmrun.sandbox.guest.outstream import OutputChunk, OutputSink, OutputStream
    from wasmrun.sandbox.guest.packagecall import PackageCall
    from wasmrun.sandbox.images import DATA_IMAGE_MAKER, cachebound, compiled, leases
    from wasmrun.sandbox.images.dataimage import data_engine, image_state, ready_image, ready_image_path
    from wasmrun.sandbox.images.stdlibimage import precompile, precompiled_path, precompiled_state
    from wasmrun.sandbox.memory.heaptrim import can_release_freed_heap, release_freed_heap
    from wasmrun.sandbox.memory.instances import HotPages
    from wasmrun.sandbox.pool import warmup
    from wasmrun.sandbox.pool.executor import Busy, Executor, ExecutorHealth, InProcessExecutor
    from wasmrun.sandbox.pool.pool import WorkerPool
    from wasmrun.sandbox.pool.poolworker import BlobOpener
    from wasmrun.sandbox.pool.workerprocess import WORKER_PACKAGE, WorkerProcess
    from wasmrun.sandbox.sessions import state as session_state
