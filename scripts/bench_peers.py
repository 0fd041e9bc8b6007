"""Peer sandboxes for scripts/bench.py, each in a driver process of its own.

The peers come from PyPI into their own virtual environment in the cache
(`<cache>/bench/peers-<python>`): `llm-wasm-sandbox` pins a wasmtime far older
than ours, so it cannot share wasmrun's environment. Each peer runs in a
driver subprocess that reads one JSON request a line (the code) and answers
with the seconds a fresh-per-call run took, or an error.

  (f) llm-wasm-sandbox: CPython 3.11 on WASI under wasmtime; its Python
      sandbox's `execute` (a new engine, module and instance per call)
  (g) pydantic-monty: a Python *subset* interpreter (Rust); a fresh session
      (a checked-out worker) per call
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

PEER_PACKAGES = ("llm-wasm-sandbox>=0.4.4", "pydantic-monty>=1.4")

DRIVER = r'''
import json, os, sys, tempfile, time
from pathlib import Path

# Replies on a copy of stdout; the runs' own output (theirs or their workers') goes nowhere.
reply = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
peer = sys.argv[1]
if peer == "llm-wasm-sandbox":
    import logging
    logging.disable(logging.CRITICAL)
    from sandbox import RuntimeType, create_sandbox
    from sandbox.core.models import ExecutionPolicy
    box = create_sandbox(runtime=RuntimeType.PYTHON, workspace_root=Path(tempfile.mkdtemp()),
                         policy=ExecutionPolicy(fuel_budget=10**12))

    def run(code):
        result = box.execute(code)
        if not result.success:
            raise RuntimeError((result.stderr or "failed").strip().splitlines()[-1][:200])
else:
    import pydantic_monty
    pool = pydantic_monty.Monty(min_processes=1).__enter__()

    def run(code):
        with pool.checkout() as session:
            session.feed_run(code)

print(json.dumps({"ready": True}), file=reply, flush=True)
for line in sys.stdin:
    code = json.loads(line)
    t = time.perf_counter()
    try:
        run(code)
        print(json.dumps({"s": time.perf_counter() - t}), file=reply, flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}), file=reply, flush=True)
'''


def peer_python(cache: Path) -> tuple[Path | None, str]:
    """The peers' interpreter, installing them on first use; None and why if they cannot be."""
    folder = cache / "bench" / f"peers-py{sys.version_info.major}{sys.version_info.minor}"
    python = folder / "bin" / "python"
    stamp = folder / ".installed"
    if stamp.exists() and stamp.read_text() == "\n".join(PEER_PACKAGES):
        return python, ""
    try:
        venv.create(folder, with_pip=True, clear=True)
    except Exception as exc:  # any failure means: skip the peers, with the reason
        return None, f"cannot make a virtual environment: {exc}"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PEER_PACKAGES],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        last = [line for line in done.stderr.splitlines() if line.strip() and "WARNING: Location" not in line]
        return None, "pip install failed: " + (last[-1] if last else "unknown error")
    stamp.write_text("\n".join(PEER_PACKAGES))
    return python, ""


class Peer:
    """One peer's driver process; `sample` returns seconds, or raises PeerError."""

    def __init__(self, label: str, name: str, python: Path) -> None:
        self.label = label
        self.name = name
        self.proc = subprocess.Popen(
            [str(python), "-c", DRIVER, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True,
        )
        first = self._reply()
        if not first.get("ready"):
            raise PeerError(f"{name} driver did not start")

    def _reply(self) -> dict:
        assert self.proc.stdout
        line = self.proc.stdout.readline()
        if not line:
            raise PeerError(f"{self.name} driver exited")
        reply: dict = json.loads(line)
        return reply

    def sample(self, body: str) -> float:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps(body) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if "error" in reply:
            raise PeerError(reply["error"])
        return float(reply["s"])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


class PeerError(Exception):
    pass


def start_peers(cache: Path) -> tuple[list[Peer], list[str]]:
    """The peers that start here, and notes on the ones that do not."""
    python, why = peer_python(cache)
    if python is None:
        return [], [f"(f) llm-wasm-sandbox, (g) pydantic-monty: skipped ({why})"]
    peers, notes = [], []
    for label, name in (
        ("(f) llm-wasm-sandbox, fresh per call", "llm-wasm-sandbox"),
        ("(g) pydantic-monty (a Python subset), fresh session", "pydantic-monty"),
    ):
        try:
            peers.append(Peer(label, name, python))
        except (PeerError, OSError, ValueError) as exc:
            notes.append(f"{label}: skipped ({exc})")
    return peers, notes
