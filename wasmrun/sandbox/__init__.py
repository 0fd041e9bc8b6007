"""The sandbox: untrusted Python in a wasm guest under wasmtime, one fresh instance per run.

One wasm concept per module (in the style of wasmtime-py):

- engine.py: SandboxEngine, the run loop (`_run_on`), the same for every image
- image.py: the Image seam: module, engine, instances, mounts, how a run enters the guest
- stdlibimage.py / images.py: the stdlib guest (CPython 3.11) / the data image (3.15, numpy...)
- wasmtime_internals.py: every use of wasmtime-py's private API (pinned version)
- instances.py: spare instances made ahead, torn down after use
- guestmemory.py: the guest's linear memory, bounds-checked
- guestrequest.py, reply.py: the request as the guest reads it; its reply, decoded
- hostcalls.py, door.py: the host functions (stdlib guest; the data image's door)
- wasi_guard.py: the WASI calls the host checks first
- workspace.py: a run's writable folders and their quota
- watchdog.py, alarm.py: CPU and wall-clock budgets
- outcome.py: how a run ended (trap classification, result); redaction.py: secrets out
- backgroundruns.py, background.py: the engine's own runs (warm-up, compiles, skill images)
- sessions.py, sessionimages.py, skillimages.py: memory kept between runs
- pool.py, workerprocess.py, poolworker.py: worker processes; executor.py: off the event loop
"""
