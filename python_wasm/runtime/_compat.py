"""What WASI lacks, turned into behaviour a Python user understands.

- Threads: WASI preview 1 has none. Starting one fails at once with a
  one-line RuntimeError that says so (instead of "can't start new thread"),
  on 3.11 (`_start_new_thread`) and 3.13+ (`_start_joinable_thread`) alike.
- The working directory: wasi-libc keeps the path `chdir` was given as
  the working directory, verbatim (`chdir("d/")` then `getcwd()` is
  ".../d/", `chdir("link")` keeps the link's name). Linux keeps the
  directory itself: `os.chdir` here passes the resolved path, so
  `getcwd()` and every relative path after it are as on Linux.
- `chmod`: WASI has no permission bits and wasi-libc's `chmod` succeeds for
  any path, even a missing one. `os.chmod` here still does nothing to the
  bits, but answers for the path as Linux does (ENOENT, ENOTDIR).
- `ssl`: WASI has no OpenSSL. `_tls` stands in as `_ssl` so `import ssl`,
  its constants and contexts work; TLS itself is the host's (runtime/http.py).
- asyncio: the stock event loop needs a socket pair to wake itself up, and
  WASI has no sockets (OSError 58, then a noisy `__del__` traceback). The
  sandbox's loop has no self-pipe and a selector that can only wait for time
  to pass, which is all that code awaiting coroutines, sleeps, tasks, queues
  and timeouts needs. Sockets, subprocesses and file-descriptor readers fail
  with a clear error.
- `hashlib.pbkdf2_hmac`: without OpenSSL, CPython 3.12+ has none (3.11 kept a
  Python fallback): the data image's 3.15 gets 3.11's fallback, so password-hashing
  code runs on both images.
"""

from __future__ import annotations

import _thread
import os
import selectors
import sys
import threading
import time

THREADS_UNAVAILABLE = (
    "threads are not available in the sandbox (WebAssembly/WASI has none): "
    "run the work sequentially, or use asyncio for concurrent waiting"
)
NO_FILE_DESCRIPTORS = "the sandbox's event loop cannot watch sockets or files (the sandbox has no sockets)"
NO_NETWORK = "the sandbox has no sockets: names cannot be resolved and no connection can be made here"


def _no_threads(*args, **kwargs):
    raise RuntimeError(THREADS_UNAVAILABLE)


class _TimeOnlySelector(selectors.BaseSelector):
    """A selector with nothing to watch: `select(timeout)` just waits."""

    def register(self, fileobj, events, data=None):
        raise OSError(NO_FILE_DESCRIPTORS)

    def unregister(self, fileobj):
        raise KeyError(fileobj)

    def select(self, timeout=None):
        if timeout is None:
            # Nothing can ever become ready: waiting forever would only burn
            # the run's time budget. The loop calls this with None only when
            # it has no scheduled callbacks, i.e. everything awaits forever.
            raise RuntimeError("deadlock: every task is waiting and nothing can wake them in the sandbox")
        if timeout > 0:
            time.sleep(timeout)
        return []

    def get_map(self):
        return {}

    def close(self) -> None:
        pass


# Constants WASI's socket module lacks, with their Linux values: code that probes
# `socket.AF_UNIX` (or sets SO_REUSEADDR) inside `except OSError` then gets the
# OSError it expects when it tries a socket, not an AttributeError first.
SOCKET_CONSTANTS = {
    "AF_UNIX": 1, "AF_PACKET": 17, "AF_NETLINK": 16, "SOCK_RAW": 3, "SOCK_SEQPACKET": 5,
    "SO_DEBUG": 1, "SO_REUSEADDR": 2, "SO_TYPE": 3, "SO_ERROR": 4, "SO_DONTROUTE": 5,
    "SO_BROADCAST": 6, "SO_SNDBUF": 7, "SO_RCVBUF": 8, "SO_KEEPALIVE": 9, "SO_OOBINLINE": 10,
    "SO_LINGER": 13, "SO_REUSEPORT": 15, "SO_RCVLOWAT": 18, "SO_SNDLOWAT": 19, "SO_RCVTIMEO": 20,
    "SO_SNDTIMEO": 21, "TCP_KEEPIDLE": 4, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 6, "IPPROTO_ICMPV6": 58,
}


def _gethostname() -> str:
    return "localhost"


def _no_name_lookup(*args, **kwargs):
    import socket

    raise socket.gaierror(socket.EAI_NONAME, NO_NETWORK)


def install_socket() -> None:
    import socket

    for name, value in SOCKET_CONSTANTS.items():
        if not hasattr(socket, name):
            setattr(socket, name, value)
    if not hasattr(socket, "gethostname"):
        socket.gethostname = _gethostname
    for name in ("gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo"):
        if not hasattr(socket, name):
            setattr(socket, name, _no_name_lookup)
    # socket.getaddrinfo (socket.create_connection, http.client) calls
    # _socket.getaddrinfo, which WASI's build lacks: an AttributeError otherwise.
    import _socket

    if not hasattr(_socket, "getaddrinfo"):
        _socket.getaddrinfo = _no_name_lookup


# The interpreter's own chdir, for the harness's per-run move to /workspace: that path is
# already the directory itself, and resolving it would cost a run two WASI calls more.
real_chdir = os.chdir


def install_chdir() -> None:
    def chdir(path):
        if isinstance(path, int):
            return real_chdir(path)
        try:
            resolved = os.path.realpath(path)
        except (TypeError, ValueError):
            resolved = None  # not a path: the real chdir says so, in its own words
        real_chdir(path)  # errors as Linux reports them, naming the path given
        if resolved is not None:
            real_chdir(resolved)

    chdir.__doc__ = real_chdir.__doc__
    os.chdir = chdir


def install_chmod() -> None:
    real_chmod = os.chmod

    def chmod(path, mode, *, dir_fd=None, follow_symlinks=True):
        real_chmod(path, mode, dir_fd=dir_fd, follow_symlinks=follow_symlinks)  # its own argument errors
        os.stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)  # the path's errors, as Linux's chmod

    chmod.__doc__ = real_chmod.__doc__
    os.chmod = chmod


def install_ssl() -> None:
    try:
        import _ssl  # noqa: F401  (an interpreter with OpenSSL keeps its own)
    except ImportError:
        from runtime import _tls

        sys.modules["_ssl"] = _tls


def _pbkdf2_hmac(hash_name, password, salt, iterations, dklen=None):
    """Password based key derivation function 2 (PKCS #5 v2.0) with HMAC as the
    pseudorandom function: CPython 3.11's pure-Python hashlib.pbkdf2_hmac."""
    import hashlib

    if not isinstance(hash_name, str):
        raise TypeError(hash_name)
    password = bytes(memoryview(password))
    salt = bytes(memoryview(salt))
    inner, outer = hashlib.new(hash_name), hashlib.new(hash_name)
    blocksize = getattr(inner, "block_size", 64)
    if len(password) > blocksize:
        password = hashlib.new(hash_name, password).digest()
    password = password + b"\x00" * (blocksize - len(password))
    inner.update(password.translate(bytes(x ^ 0x36 for x in range(256))))
    outer.update(password.translate(bytes(x ^ 0x5C for x in range(256))))

    def prf(msg):
        icpy, ocpy = inner.copy(), outer.copy()
        icpy.update(msg)
        ocpy.update(icpy.digest())
        return ocpy.digest()

    if iterations < 1:
        raise ValueError(iterations)
    dklen = outer.digest_size if dklen is None else dklen
    if dklen < 1:
        raise ValueError(dklen)
    dkey = b""
    loop = 1
    while len(dkey) < dklen:
        prev = prf(salt + loop.to_bytes(4, "big"))
        rkey = int.from_bytes(prev, "big")
        for _ in range(iterations - 1):
            prev = prf(prev)
            rkey ^= int.from_bytes(prev, "big")
        loop += 1
        dkey += rkey.to_bytes(inner.digest_size, "big")
    return dkey[:dklen]


def install_pbkdf2() -> None:
    import hashlib

    if not hasattr(hashlib, "pbkdf2_hmac"):
        hashlib.pbkdf2_hmac = _pbkdf2_hmac
        hashlib.__all__ = (*hashlib.__all__, "pbkdf2_hmac")


def install() -> None:
    install_socket()
    install_pbkdf2()
    install_chdir()
    install_chmod()
    _thread.start_new_thread = _no_threads
    _thread.start_new = _no_threads
    threading._start_new_thread = _no_threads
    # CPython 3.13+ (the data image's 3.15): Thread.start() goes through start_joinable_thread.
    if hasattr(threading, "_start_joinable_thread"):
        _thread.start_joinable_thread = _no_threads
        threading._start_joinable_thread = _no_threads


def install_asyncio() -> None:
    """The sandbox's event loop as asyncio's default (asyncio.run, new_event_loop)."""
    import asyncio
    from asyncio import selector_events

    class SandboxEventLoop(selector_events.BaseSelectorEventLoop):
        def __init__(self) -> None:
            super().__init__(_TimeOnlySelector())

        def _make_self_pipe(self) -> None:
            self._ssock = self._csock = None

        def _close_self_pipe(self) -> None:
            pass

        def _write_to_self(self) -> None:
            pass  # single-threaded: nothing to wake

        def _process_self_data(self, data) -> None:
            pass

        async def getaddrinfo(self, *args, **kwargs):
            # The stock loop resolves names in a thread; without sockets there is nothing to resolve for.
            raise OSError(NO_NETWORK)

        async def getnameinfo(self, *args, **kwargs):
            raise OSError(NO_NETWORK)

    class SandboxPolicy(asyncio.DefaultEventLoopPolicy):
        _loop_factory = SandboxEventLoop

    asyncio.SelectorEventLoop = SandboxEventLoop
    asyncio.set_event_loop_policy(SandboxPolicy())
