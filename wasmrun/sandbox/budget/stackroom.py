"""Threads with room for a guest's wasm stack.

wasmtime runs wasm on the calling thread's own stack and stops a guest that goes
deeper than the engine's `max_wasm_stack` with a StackOverflow trap; but if the
thread's stack ends first, the guard page below it takes the whole process down
(SIGSEGV), whatever the guest was. So a guest is entered only on a thread whose stack
holds the engine's wasm stack and the host's frames above it:

- threads started after `roomy_thread_stacks()` (every engine calls it) get
  RUN_THREAD_STACK_BYTES, and the main thread may grow that far (RLIMIT_STACK);
- a thread started earlier, or by someone else with a smaller stack, hands the guest
  call to one of ours (`call_with_room`) and waits for it: the run is the same, on
  another thread.

Address space only: a stack's pages are used as deep as a run goes.
"""

from __future__ import annotations

import ctypes
import resource
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# The largest wasm stack of any engine (dataimage.DATA_WASM_STACK_BYTES) and the host's frames.
RUN_THREAD_STACK_BYTES = 48 << 20
HOST_FRAMES_BYTES = 2 << 20  # the host's own frames above the guest's, with room to spare
MAX_HANDOFF_THREADS = 64  # each one holds a caller waiting for it


def roomy_thread_stacks() -> None:
    """Threads started from now on (asyncio.to_thread's pool runs guests) and the main
    thread get a stack with room for the wasm stack."""
    # (threading.stack_size() with no argument also sets the default back: it is never called so)
    before = threading.stack_size(RUN_THREAD_STACK_BYTES)
    if before > RUN_THREAD_STACK_BYTES:
        threading.stack_size(before)
    # The main thread (a pool worker runs guests there) grows up to RLIMIT_STACK.
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft != resource.RLIM_INFINITY and soft < RUN_THREAD_STACK_BYTES:
        wanted = RUN_THREAD_STACK_BYTES if hard == resource.RLIM_INFINITY else min(hard, RUN_THREAD_STACK_BYTES)
        resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))


class _ThisThread(threading.local):
    stack_bytes: int | None = None  # measured once per thread (0: unknown)


_this_thread = _ThisThread()
_handoff: ThreadPoolExecutor | None = None
_handoff_lock = threading.Lock()


def thread_stack_bytes() -> int:
    """This thread's stack size as the C library reports it (glibc's pthread_getattr_np,
    which for the main thread follows RLIMIT_STACK); 0 where it cannot say."""
    known = _this_thread.stack_bytes
    if known is None:
        known = _this_thread.stack_bytes = _measure()
    return known


def _measure() -> int:
    try:
        libc = ctypes.CDLL(None)
        getattr_np, getstack, destroy = libc.pthread_getattr_np, libc.pthread_attr_getstack, libc.pthread_attr_destroy
    except (OSError, AttributeError):
        return 0
    libc.pthread_self.restype = ctypes.c_ulong
    getattr_np.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    attr = ctypes.create_string_buffer(256)  # pthread_attr_t: 56 bytes on x86-64, 64 on arm64
    if getattr_np(libc.pthread_self(), attr) != 0:
        return 0
    try:
        addr, size = ctypes.c_void_p(), ctypes.c_size_t()
        return int(size.value) if getstack(attr, ctypes.byref(addr), ctypes.byref(size)) == 0 else 0
    finally:
        destroy(attr)


def call_with_room(wasm_stack_bytes: int, call: Callable[[], T]) -> T:
    """`call()` (which enters a guest whose engine allows `wasm_stack_bytes` of wasm
    stack) on this thread when its stack holds that, else on a handoff thread of ours."""
    if thread_stack_bytes() >= wasm_stack_bytes + HOST_FRAMES_BYTES:
        return call()
    return _handoff_threads().submit(call).result()


def _handoff_threads() -> ThreadPoolExecutor:
    global _handoff
    with _handoff_lock:
        if _handoff is None:
            roomy_thread_stacks()  # its threads start later, with RUN_THREAD_STACK_BYTES
            _handoff = ThreadPoolExecutor(MAX_HANDOFF_THREADS, thread_name_prefix="wasmrun-guest")
        return _handoff
