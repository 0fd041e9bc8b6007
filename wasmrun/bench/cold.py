"""The cold rows (`wasmrun bench --cold`): what a user waits for first.

- first `serve` to its first answer: from starting `wasmrun serve` to the first `run_code`
  result, with an **empty cache** (a fresh WASMRUN_CACHE_DIR holding only the built guest,
  the files a wheel ships: nothing compiled, no snapshot, no data image) and with the
  **warm cache** (this machine's, compiled already), each image built;
- `wasmrun mcp` (stdio) from its start to its first `tools/call run_code` result;
- a session's first run (create_session untimed), a fork's first run (fork_session
  untimed) and a paused session's first run (its pages read back from disk), in-process;
- the one-file executable's start (`make onefile`'s dist/wasmrun-*, looked for in the
  current folder's dist/: the checkout's when the bench runs there): `run -c` to its
  output, when built;
- the data image's make, in a fresh cache with its downloads copied in (minutes).

Each sample is a new process (and, for the empty cache, a new cache folder), so n is small.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wasmrun.bench.stats import summary
from wasmrun.bench.systems import HELLO, Http, as_run_code, free_port, stop
from wasmrun.sandbox import DATA_IMAGE_MAKER

RUN = {"language": "python", "code": as_run_code(HELLO)}
# The folder holding the wasmrun package this bench runs: its subprocesses import the same one.
WASMRUN_PARENT = Path(__file__).resolve().parents[2]
Sample = Callable[[Path], float]


def _cache() -> Path:
    from python_wasm.downloads import cache_root

    return Path(cache_root())


def empty_cache(tmp: Path) -> Path:
    """A fresh cache folder with only the built guest (as a wheel carries it) in it."""
    folder = tmp / f"cache-{time.monotonic_ns()}"
    shutil.copytree(_cache() / "guest", folder / "guest", symlinks=True, copy_function=_link_or_copy)
    return folder


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link where the file system allows (the same bytes: nothing compiled is in them)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def first_answer(argv: list[str], env: dict[str, str], data_dir: Path, port: int, deadline_s: float = 600) -> float:
    """Seconds from starting `serve` to its first run_code result (it is stopped after)."""
    t = time.perf_counter()
    proc = subprocess.Popen([*argv, "--port", str(port), "--data-dir", str(data_dir)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None or time.perf_counter() - t > deadline_s:
                raise RuntimeError(f"wasmrun serve gave no answer (exit code {proc.returncode})")
            try:
                client = Http(port)
            except OSError:
                time.sleep(0.02)
                continue
            try:
                client.call("run_code", RUN)
                return time.perf_counter() - t
            except (OSError, RuntimeError):
                time.sleep(0.02)
            finally:
                client.close()
    finally:
        stop(proc)


def _serve(image: str, empty: bool) -> Sample:
    def sample(tmp: Path) -> float:
        env = dict(os.environ)
        if empty:
            env["WASMRUN_CACHE_DIR"] = str(empty_cache(tmp))
        argv = [sys.executable, "-m", "wasmrun", "serve", "--workers", "1", "--image", image]
        return first_answer(argv, env, tmp / f"serve-{time.monotonic_ns()}", free_port())
    return sample


def _mcp(tmp: Path) -> float:
    """`wasmrun mcp` over stdio: initialize, then one tools/call run_code, to its result."""
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_code", "arguments": RUN}},
    ]
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "wasmrun", "mcp", "--workers", "1", "--data-dir",
                             str(tmp / f"mcp-{time.monotonic_ns()}")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        proc.stdin.flush()
        for line in proc.stdout:
            reply = json.loads(line)
            if reply.get("id") == 2:
                if "error" in reply or reply["result"].get("isError"):
                    raise RuntimeError(f"wasmrun mcp's run_code failed: {str(reply)[:200]}")
                return time.perf_counter() - t
        raise RuntimeError(f"wasmrun mcp ended without an answer (exit code {proc.wait()})")
    finally:
        proc.kill()
        proc.wait()


def onefile() -> Path | None:
    found = sorted((Path.cwd() / "dist").glob("wasmrun-*-*"))
    found = [f for f in found if f.is_file() and os.access(f, os.X_OK)]
    return found[-1] if found else None


def _onefile(tmp: Path) -> float:
    exe = onefile()
    assert exe is not None
    t = time.perf_counter()
    done = subprocess.run([str(exe), "run", "-c", 'print("hello")'], capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - t
    if done.returncode != 0 or "hello" not in done.stdout:
        raise RuntimeError(f"{exe.name} run failed: {done.stderr.strip()[-200:]}")
    return elapsed


def _data_make(tmp: Path) -> float:
    """The data image made in a fresh cache, its downloads (the wheels, the stock interpreter) copied in."""
    cache = empty_cache(tmp)
    shutil.copytree(_cache() / "downloads", cache / "downloads", symlinks=True, copy_function=_link_or_copy)
    path = os.pathsep.join(p for p in (str(WASMRUN_PARENT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "WASMRUN_CACHE_DIR": str(cache), "PYTHONPATH": path}
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", DATA_IMAGE_MAKER], env=env, capture_output=True, text=True,
                          timeout=3600)
    elapsed = time.perf_counter() - t
    shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"the data image's make failed: {done.stderr.strip()[-200:]}")
    return elapsed


def _absent_data() -> str | None:
    from wasmrun.bench import datarows

    return datarows.not_built()


def _absent_mcp() -> str | None:
    import importlib.util

    return None if importlib.util.find_spec("mcp") else "the MCP SDK is not installed (pip install 'wasmrun[mcp]')"


def _absent_onefile() -> str | None:
    return None if onefile() is not None else "no one-file executable in dist/ (`make onefile` makes it)"


class _Sessions:
    """Sessions driven through an engine as a worker drives them, with a SessionStore's folders."""

    STATE = "import json\nrows = [json.dumps({'i': i}) for i in range(10_000)]"

    def __init__(self, tmp: Path) -> None:
        from wasmrun.blobs.store import FileBlobStore
        from wasmrun.sandbox import make_engine
        from wasmrun.sessionstore.store import SessionStore

        self.engine = make_engine("stdlib", FileBlobStore(tmp / "blobs"), workspace_root=tmp / "work")
        self.store = SessionStore(tmp / "sessions")

    def create(self, source: Any = None) -> Any:
        return self.store.create("bench", idle_timeout_s=3600, limits={}, skills=[], max_sessions=10_000,
                                 source=source)[1]

    def run(self, meta: Any, code: str) -> float:
        from wasmrun.sandbox import Limits, RunRequest, SessionRun

        request = RunRequest(kind="code", code=code, limits=Limits(timeout_ms=60_000), session=SessionRun(
            folder=str(self.store.folder(meta)), version=meta.version, reseed=meta.reseed))
        t = time.perf_counter()
        result = self.engine.run(request)
        self.store.finish_run(meta, result.session)
        elapsed = time.perf_counter() - t
        if result.status != "completed":
            raise RuntimeError(f"session run failed: {result.error}")
        return elapsed

    def new_first(self, tmp: Path) -> float:
        return self.run(self.create(), "x = 1")

    def fork_first(self, tmp: Path) -> float:
        parent = self.create()
        self.run(parent, self.STATE)
        return self.run(self.create(source=parent), "len(rows)")

    def resumed_first(self, tmp: Path) -> float:
        meta = self.create()
        self.run(meta, self.STATE)
        self.engine.close_warm_sessions()  # paused: only its image on disk
        return self.run(meta, "len(rows)")

    def close(self) -> None:
        self.engine.close()


def _rows() -> list[tuple[str, str, str, Sample | None, Callable[[], str | None]]]:
    """(key, label, what, sample, absent) of each cold row but the sessions'."""
    none: Callable[[], str | None] = lambda: None  # noqa: E731
    rows: list[tuple[str, str, str, Sample | None, Callable[[], str | None]]] = []
    for image, absent in (("stdlib", none), ("data", _absent_data)):
        rows += [
            (f"cold:serve-empty:{image}", f"first `serve --image {image}` to first answer, empty cache",
             "from starting `wasmrun serve` to its first run_code result; empty: a fresh WASMRUN_CACHE_DIR holding "
             "only the built guest (what a wheel ships): nothing compiled, no snapshot", _serve(image, True),
             absent if image == "stdlib" else lambda: "an empty cache has no data image: its make is the row below"),
            (f"cold:serve-warm:{image}", f"first `serve --image {image}` to first answer, warm cache",
             "from starting `wasmrun serve` to its first run_code result, this machine's cache (compiled already)",
             _serve(image, False), absent),
        ]
    rows += [
        ("cold:mcp", "`wasmrun mcp` start to its first tool result", "stdio: initialize, then tools/call run_code "
         "hello, from the process's start to that result (warm cache)", _mcp, _absent_mcp),
        ("cold:onefile", "one-file executable: `run -c` to its output", "dist/wasmrun-*: a new process, unpacking "
         "its archive, to the run's output (its cache warm after the first start)", _onefile, _absent_onefile),
        ("cold:data-make", "the data image's make, fresh cache", "`python -m wasmrun.sandbox.images` in a fresh "
         "WASMRUN_CACHE_DIR with the downloads copied in (no download timed)", _data_make, _absent_data),
    ]
    return rows


def measure(tmp: Path, samples: int, progress: Callable[[str], None]) -> tuple[dict[str, Any], list[str]]:
    tmp.mkdir(parents=True, exist_ok=True)
    notes = ["'Empty cache' is a fresh WASMRUN_CACHE_DIR with only the built guest copied in: what a user who "
             "installed the wheel has before the first start (the guest is compiled, once, on that start)."]
    out: dict[str, Any] = {}
    for key, label, what, sample, absent in _rows():
        if (why := absent()) is not None:
            out[key] = {"label": label, "section": "cold", "what": what, "systems": {}, "absent": why}
            continue
        assert sample is not None
        progress(f"cold: {label} ...")
        n = 1 if key == "cold:data-make" else samples
        out[key] = _row(label, what, {"wasmrun": _take(sample, tmp, n, notes, label)})
    sessions = _Sessions(tmp / "sessions")
    try:
        for key, label, sample in (
            ("cold:session-new", "a new session's first run, in-process", sessions.new_first),
            ("cold:session-fork", "a fork's first run, in-process", sessions.fork_first),
            ("cold:session-resume", "a paused session's first run (resumed from disk), in-process",
             sessions.resumed_first),
        ):
            got = _take(sample, tmp, samples * 4, notes, label)
            out[key] = _row(label, "the first run_code of the session (its making untimed)", {"wasmrun": got})
    finally:
        sessions.close()
    return out, notes


def _take(sample: Sample, tmp: Path, n: int, notes: list[str], label: str) -> list[float | None]:
    got: list[float | None] = []
    for _ in range(n):
        try:
            got.append(sample(tmp))
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            notes.append(f"{label}: a sample failed: {exc}")
            got.append(None)
    return got


def _row(label: str, what: str, per: dict[str, list[float | None]]) -> dict[str, Any]:
    systems = {k: summary([s for s in v if s is not None], attempts=len(v)) for k, v in per.items()}
    return {"label": label, "section": "cold", "what": what, "baseline": None, "systems": systems,
            "samples_ms": {k: [s * 1000 for s in v if s is not None] for k, v in per.items()}}
