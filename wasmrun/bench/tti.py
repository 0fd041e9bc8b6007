"""Time to interactive, as the independent ComputeSDK benchmark measures sandboxes: from the
request that creates a sandbox to the first result, N in a row and N at once (a burst),
with the success rate and p50/p90/p99/max.

A wasmrun sandbox is made by the request itself, so two ways count as "create":
- `run_code`: one request, a fresh sandbox, its result (a hello);
- `create_session`, then that session's first `run_code` (a hello): two requests.
Each sample opens its own connection (a new client, as a newly created sandbox's caller
has), against a real `wasmrun serve` (workers: the CPU count) of each built image. The
burst starts its N clients at once (threads released by one barrier); each times its own.
A refused or failed request counts against the success rate, and is not timed.

The server is given room for N sessions (`[limits] sessions` in a policy file; the default
tenant keeps 8 open at once): the burst measures start-up, not the default quota.

A third way, where E2B's SDK is installed: the E2B-compatible front's `Sandbox.create()`,
then its first `run_code`, through the SDK itself (docs/e2b.md).
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wasmrun.bench.stats import summary
from wasmrun.bench.systems import HELLO, Http, as_run_code, server

RUN = {"language": "python", "code": as_run_code(HELLO)}


def _run_code(port: int) -> None:
    client = Http(port)
    try:
        client.call("run_code", RUN)
    finally:
        client.close()


def _session_first_run(port: int) -> None:
    client = Http(port)
    try:
        sid = client.call("create_session", {"language": "python"})["session_id"]
        client.call("run_code", {**RUN, "session_id": sid})
    finally:
        client.close()


def _close_sessions(port: int) -> None:
    """Untimed: the sessions the row made, closed so the next row starts from none."""
    client = Http(port)
    try:
        for s in client.call("list_sessions", {}).get("sessions", []):
            client.call("close_session", {"session_id": s["session_id"]})
    except (RuntimeError, OSError):
        pass
    finally:
        client.close()


def _e2b_create_first_run(port: int) -> None:
    from e2b_code_interpreter import Sandbox

    base = f"http://127.0.0.1:{port}"
    sandbox = Sandbox.create(api_url=f"{base}/e2b/api", sandbox_url=f"{base}/e2b/sandbox", api_key="wasmrun")
    try:
        if sandbox.run_code("1 + 1").text != "2":
            raise RuntimeError("the E2B front's first result was not 2")
    finally:
        sandbox.kill()


E2B_LABEL = "E2B SDK: Sandbox.create(), then run_code, to the result"
KINDS: list[tuple[str, str, Callable[[int], None]]] = [
    ("run_code", "run_code (a fresh sandbox) to its result", _run_code),
    ("session", "create_session, then its first run_code, to the result", _session_first_run),
]
ABSENT_KINDS: dict[str, str] = {}
if importlib.util.find_spec("e2b_code_interpreter") is not None:
    KINDS.append(("e2b", E2B_LABEL, _e2b_create_first_run))
else:
    ABSENT_KINDS[E2B_LABEL] = "E2B's SDK is not installed (pip install 'e2b-code-interpreter==2.11.5')"

PUBLISHED = (
    "ComputeSDK's published time-to-interactive (computesdk.com benchmarks, 2026-05-05; their method: from the "
    "SDK call creating a sandbox to the first command's result, 100 sequential and 100 at once, on their "
    "machines, over the internet to each provider): medians Daytona 186 ms, E2B 491 ms, Modal 1,723 ms, "
    "Cloudflare 2,056 ms; bursts of 100: E2B 822 ms, Modal 2,261 ms. Their figures, as published, not "
    "measured here; wasmrun's rows above are on loopback, on this machine."
)


def published() -> list[str]:
    return [PUBLISHED]


def _once(make: Callable[[int], None], port: int) -> float | None:
    t = time.perf_counter()
    try:
        make(port)
    except Exception:  # any client's failure (the E2B SDK has its own errors) counts, untimed
        return None
    return time.perf_counter() - t


def sequential(make: Callable[[int], None], port: int, n: int) -> list[float | None]:
    return [_once(make, port) for _ in range(n)]


def burst(make: Callable[[int], None], port: int, n: int) -> list[float | None]:
    got: list[float | None] = [None] * n
    gate = threading.Barrier(n)

    def client(i: int) -> None:
        try:
            gate.wait(timeout=60)
        except threading.BrokenBarrierError:
            return
        got[i] = _once(make, port)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def _images() -> tuple[list[str], list[str]]:
    from wasmrun.bench import datarows

    why = datarows.not_built()
    return (["stdlib", "data"], []) if why is None else (["stdlib"], [f"data image: {why}"])


def measure(n: int, tmp: Path) -> tuple[dict[str, Any], list[str]]:
    """Rows `tti:<kind>:<mode>`, each with one system per image, and the notes."""
    images, notes = _images()
    tmp.mkdir(parents=True, exist_ok=True)
    policy = tmp / "policy.toml"
    policy.write_text(f"[limits]\nsessions = {max(8, n + 8)}\n")
    samples: dict[str, dict[str, list[float | None]]] = {}
    for image in images:
        system = f"wasmrun serve, {image} image"
        with server(os.cpu_count() or 2, tmp / f"serve-{image}", "--policy-file", str(policy), image=image) as (port, _):
            for kind, _label, make in KINDS:
                _once(make, port)  # a warm-up: the server's first run is the cold rows' business
                for mode, take in (("seq", sequential), ("burst", burst)):
                    samples.setdefault(f"tti:{kind}:{mode}", {})[system] = take(make, port, n)
                    _close_sessions(port)
    rows = {}
    for kind, label, _make in KINDS:
        for mode, how in (("seq", f"{n} in a row"), ("burst", f"{n} at once")):
            per = samples[f"tti:{kind}:{mode}"]
            rows[f"tti:{kind}:{mode}"] = _row(f"{label}, {how}", per)
    for label, why in ABSENT_KINDS.items():
        rows[f"tti:absent:{label}"] = {"label": label, "section": "tti", "what": label, "systems": {}, "absent": why}
    return rows, notes


def _row(label: str, per: dict[str, list[float | None]]) -> dict[str, Any]:
    systems = {}
    for system, got in per.items():
        ok = [s for s in got if s is not None]
        systems[system] = summary(ok, attempts=len(got))
    return {"label": label, "section": "tti", "baseline": None, "systems": systems,
            "what": "from the request creating a sandbox to its first result, a new connection each",
            "samples_ms": {k: [s * 1000 for s in got if s is not None] for k, got in per.items()}}
