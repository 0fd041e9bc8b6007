"""The systems measured: a wasmrun sandbox in-process, `wasmrun serve` over HTTP, native CPython.

Each has `sample(source) -> seconds` (the whole call, as its caller waits for it) and
`compute(source) -> seconds` (the workload's own ELAPSED, timed inside the interpreter).
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import Limits, MountedSkill, RunRequest, SandboxEngine
from wasmrun.settings import BUNDLED_SKILLS

HELLO = 'print("hello")\n'
COMPUTE_LIMITS = Limits(timeout_ms=120_000)
PACED = "wasmrun, HTTP, 50-200 ms gaps"
SESSION_NEXT = "wasmrun, HTTP, a session's next run"
TEXT_STATS_ARGS = {"text": "One fish. Two fish. Red fish, blue fish. " * 5}
TEXT_STATS_CALL = {"name": "text.stats", "args": TEXT_STATS_ARGS}  # execute_skill's params


def text_stats_request() -> RunRequest:
    """TEXT_STATS_CALL as the engine takes it in-process."""
    skill = MountedSkill("text.stats", str(BUNDLED_SKILLS / "text.stats"), "code/main.py")
    return RunRequest(kind="skill", skill=skill.name, skills=[skill], args_json=json.dumps(TEXT_STATS_ARGS).encode())


def as_run_code(body: str, returns: str = "None") -> str:
    """The same statements as a run_code module (they run when it is imported)."""
    return f"{body}\ndef main(args):\n    return {returns}\n"


class InProcess:
    """SandboxEngine.run in this process: a fresh instance per run."""

    label = "wasmrun, in-process"
    isolates = "CPython in wasm (wasmtime): memory, CPU, files; a fresh instance per run"

    def __init__(self, blob_dir: Path) -> None:
        self.blobs = FileBlobStore(blob_dir)
        self.engine = SandboxEngine(self.blobs)

    def settle(self) -> None:
        self.engine.wait_idle()

    def run(self, request: RunRequest) -> float:
        t = time.perf_counter()
        result = self.engine.run(request)
        elapsed = time.perf_counter() - t
        if result.status != "completed":
            raise RuntimeError(f"run failed: {result.error}")
        return elapsed

    def sample(self, source: str) -> float:
        return self.run(RunRequest(kind="code", code=as_run_code(source)))

    def compute(self, source: str) -> float:
        result = self.engine.run(RunRequest(kind="code", code=as_run_code(source, "ELAPSED"), limits=COMPUTE_LIMITS))
        if result.status != "completed":
            raise RuntimeError(f"run failed: {result.error}")
        return float(result.output)

    def close(self) -> None:
        self.engine.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stop(proc: subprocess.Popen[Any]) -> None:
    """Ends a server the bench started: asked first, killed after 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def server(
    workers: int, data_dir: Path, *extra: str, image: str = "stdlib"
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A real `wasmrun serve` of `image` on loopback, stopped on leaving. The image is always
    named: the server's default (`auto`) serves the data image wherever it is built, and the
    stdlib rows compare the stdlib image in-process with the same image over HTTP."""
    port = free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "serve.log"  # why it did not start, when it does not
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wasmrun", "serve", "--port", str(port), "--workers", str(workers),
             "--data-dir", str(data_dir), "--image", image, *extra],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        # A data-image server with several workers takes ~15 s on an idle machine, minutes on a
        # loaded one (each worker loads the image); the bench waits for its health, not a guess.
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_bytes()[-2000:].decode("utf-8", "replace")
                raise RuntimeError(f"wasmrun serve did not start (exit code {proc.returncode}): {tail}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        yield port, proc
    finally:
        stop(proc)


class Http:
    """A lean HTTP/1.1 keep-alive client: the row measures the server, not a
    client library (http.client costs about 0.1 ms a request here)."""

    label = "wasmrun, run_code over HTTP"
    isolates = "as in-process, behind `wasmrun serve` (worker processes, JSON-RPC, audit)"
    LENGTH = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)

    def __init__(self, port: int, key: str | None = None) -> None:
        self.port = port
        self.auth = b"Authorization: Bearer %s\r\n" % key.encode() if key else b""
        self.n = 0
        self._connect()

    def _connect(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def post(self, body: bytes) -> bytes:
        try:
            return self._post(body)
        except (ConnectionError, BrokenPipeError):
            # The server closes a keep-alive connection idle for a few seconds: connect again, as clients do.
            self.sock.close()
            self._connect()
            return self._post(body)

    def _post(self, body: bytes) -> bytes:
        head = b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        self.sock.sendall(head + self.auth + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        headers, _, rest = self.buffer.partition(b"\r\n\r\n")
        match = self.LENGTH.search(headers)
        if not (match and headers.startswith(b"HTTP/1.1 200")):
            raise RuntimeError(f"unexpected HTTP answer: {headers[:200]!r}")
        size = int(match.group(1))
        while len(rest) < size:
            rest += self._recv()
        self.buffer = rest[size:]
        return rest[:size]

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("server closed the connection")
        return chunk

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        reply = json.loads(self.post(body.encode()))
        if "error" in reply:
            raise RuntimeError(reply["error"])
        result: dict[str, Any] = reply["result"]
        if result.get("status") not in (None, "completed"):
            raise RuntimeError(f"run failed: {result.get('error')}")
        if result.get("exit_code", 0) != 0:  # run_command: a command that failed is not a sample
            raise RuntimeError(f"command exited {result['exit_code']}: {result.get('stderr') or result.get('logs_preview')}")
        return result

    def run_code(self, params: dict[str, Any]) -> dict[str, Any]:
        """run_code's result as answered, a failed run included (a JSON-RPC error raises)."""
        self.n += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.n, "method": "run_code", "params": params})
        reply = json.loads(self.post(body.encode()))
        if "error" in reply:
            raise RuntimeError(reply["error"])
        result: dict[str, Any] = reply["result"]
        return result

    def sample(self, source: str) -> float:
        t = time.perf_counter()
        self.call("run_code", {"language": "python", "code": as_run_code(source)})
        return time.perf_counter() - t

    def timed_call(self, method: str, params: dict[str, Any]) -> float:
        t = time.perf_counter()
        self.call(method, params)
        return time.perf_counter() - t

    def close(self) -> None:
        self.sock.close()


def new_session(http: Http) -> str:
    """A session on the server `http` talks to, for the rows timing its next runs."""
    return str(http.call("create_session", {"language": "python"})["session_id"])


def session_hello(session_id: str) -> dict[str, Any]:
    """run_code's params for a hello in the session."""
    return {"language": "python", "code": as_run_code(HELLO), "session_id": session_id}


class Native:
    """`python3 -I -S -c` as a subprocess: what a run costs without a sandbox."""

    label = "native CPython subprocess"
    isolates = "nothing (a process of the same user): the baseline"

    def sample(self, source: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-c", source], check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t

    def compute(self, source: str) -> float:
        out = subprocess.run([sys.executable, "-I", "-S", "-c", source + "\nprint(ELAPSED)\n"],
                             capture_output=True, text=True, check=True)
        return float(out.stdout)
