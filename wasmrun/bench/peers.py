"""Peer sandboxes, each in a driver process of its own, labelled with what it isolates.

pydantic-monty and llm-wasm-sandbox come from PyPI into their own virtual
environment in the cache (`<cache>/bench/peers-<python>`): llm-wasm-sandbox pins a
wasmtime far older than ours, so it cannot share wasmrun's environment. Pyodide
comes from npm into the cache and runs in Node. A driver reads one JSON request
a line and answers with the seconds a run took, or an error. A peer that cannot
be installed or started is listed as absent, with why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

PEER_PACKAGES = ("llm-wasm-sandbox>=0.4.4", "pydantic-monty>=1.4")
PYODIDE_VERSION = "314.0.7"

PY_DRIVER = r'''
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

    def run(code, timed):
        # timed: the workload prints its own ELAPSED (the call's start-up left out)
        result = box.execute(code + ("\nprint('ELAPSED=%r' % ELAPSED)\n" if timed else ""))
        if not result.success:
            raise RuntimeError((result.stderr or "failed").strip().splitlines()[-1][:200])
        if timed:
            for line in reversed((result.stdout or "").splitlines()):
                if line.startswith("ELAPSED="):
                    return float(line[len("ELAPSED="):])
            raise RuntimeError("the workload printed no ELAPSED")
        return None
else:
    import pydantic_monty
    pool = pydantic_monty.Monty(min_processes=1).__enter__()

    def run(code, timed):
        with pool.checkout() as session:
            session.feed_run(code)
        return None

print(json.dumps({"ready": True}), file=reply, flush=True)
for line in sys.stdin:
    request = json.loads(line)
    t = time.perf_counter()
    try:
        own = run(request["code"], request.get("timed", False))
        print(json.dumps({"s": own if own is not None else time.perf_counter() - t}), file=reply, flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}), file=reply, flush=True)
'''

# One request a line: {"code", "fresh"}. fresh: a new interpreter for the call (start-up);
# else one kept interpreter, and the answer is the workload's own ELAPSED (compute).
PYODIDE_DRIVER = r"""
const { loadPyodide } = require("pyodide");
const readline = require("readline");
const rl = readline.createInterface({ input: process.stdin });
let kept = null;
const queue = [];
let busy = false;
async function handle(line) {
  const req = JSON.parse(line);
  try {
    if (req.fresh) {
      const t = performance.now();
      const py = await loadPyodide({ stdout: () => {} });
      py.runPython(req.code);
      return { s: (performance.now() - t) / 1000 };
    }
    if (!kept) kept = await loadPyodide({ stdout: () => {} });
    kept.runPython(req.code);
    return { s: kept.globals.get("ELAPSED") };
  } catch (e) {
    return { error: String(e).slice(0, 300) };
  }
}
async function pump() {
  if (busy) return;
  busy = true;
  while (queue.length) process.stdout.write(JSON.stringify(await handle(queue.shift())) + "\n");
  busy = false;
}
console.log(JSON.stringify({ ready: true }));
rl.on("line", (line) => { queue.push(line); pump(); });
"""


class PeerError(Exception):
    pass


class Peer:
    """One peer's driver process; `sample` returns seconds, or raises PeerError."""

    def __init__(self, label: str, name: str, isolates: str, argv: list[str], cwd: Path | None = None) -> None:
        self.label = label
        self.name = name
        self.isolates = isolates
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, cwd=cwd)
        if not self._reply().get("ready"):
            raise PeerError(f"{name} driver did not start")

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout
        line = self.proc.stdout.readline()
        if not line:
            raise PeerError(f"{self.name} driver exited")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def request(self, code: str, fresh: bool = True) -> float:
        """Seconds: the call's, or with fresh=False from a peer that times itself, the workload's own."""
        assert self.proc.stdin
        timed = not fresh and self.times_itself
        self.proc.stdin.write(json.dumps({"code": code, "fresh": fresh, "timed": timed}) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if "error" in reply:
            lines = [line.strip() for line in str(reply["error"]).splitlines() if line.strip()]
            raise PeerError(lines[-1][:300] if lines else "failed")
        return float(reply["s"])

    def sample(self, source: str) -> float:
        """A fresh interpreter (or session) per call, as wasmrun gives each run."""
        return self.request(source, fresh=True)

    @property
    def times_itself(self) -> bool:
        """Whether `request(fresh=False)` answers the workload's own ELAPSED (else: the call's time).
        pydantic-monty has no clock to read inside: its figure is the call less its hello."""
        return self.name in ("pyodide", "llm-wasm-sandbox")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


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


def pyodide_folder(cache: Path) -> tuple[Path | None, str]:
    """Pyodide from npm into the cache; None and why when node/npm are missing or the install fails."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        return None, "node/npm not found"
    folder = cache / "bench" / f"pyodide-{PYODIDE_VERSION}"
    if not (folder / "node_modules" / "pyodide" / "pyodide.asm.wasm").exists():
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder), f"pyodide@{PYODIDE_VERSION}"],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            return None, "npm install pyodide failed: " + (lines[-1] if lines else "unknown error")
    (folder / "driver.cjs").write_text(PYODIDE_DRIVER)
    return folder, ""


PY_PEERS = (
    ("pydantic-monty (a Python subset), fresh session", "pydantic-monty",
     "a Python subset interpreter in Rust: no stdlib beyond a few modules, no files or network"),
    ("llm-wasm-sandbox, fresh per call", "llm-wasm-sandbox",
     "CPython 3.11 on WASI under wasmtime (fuel); a new engine, module and instance per call"),
)


def start_peers(cache: Path, pyodide: bool = True, python_peers: bool = True) -> tuple[list[Peer], dict[str, str]]:
    """The peers that start here, and for each absent one, why."""
    peers: list[Peer] = []
    absent: dict[str, str] = {}
    if not python_peers:
        absent.update({label: "skipped (--quick or --no-peers)" for label, _, _ in PY_PEERS})
    else:
        python, why = peer_python(cache)
        for label, name, isolates in PY_PEERS:
            if python is None:
                absent[label] = why
                continue
            try:
                peers.append(Peer(label, name, isolates, [str(python), "-c", PY_DRIVER, name]))
            except (PeerError, OSError, ValueError) as exc:
                absent[label] = str(exc)
    label = "Pyodide in Node, fresh interpreter"
    if pyodide:
        folder, why = pyodide_folder(cache)
        node = shutil.which("node")
        if folder is None or node is None:
            absent[label] = why
        else:
            try:
                peers.append(Peer(label, "pyodide", "CPython 3.14 in wasm (emscripten) in V8, in Node's "
                                  "process; no CPU or memory limits of its own", [node, str(folder / "driver.cjs")], cwd=folder))
            except (PeerError, OSError, ValueError) as exc:
                absent[label] = str(exc)
    else:
        absent[label] = "skipped (--quick or --no-pyodide)"
    return peers, absent
