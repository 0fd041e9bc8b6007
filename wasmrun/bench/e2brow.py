"""The E2B row: from `Sandbox.create()` to the first `run_code` result, through E2B's own
SDK against the server's E2B front (docs/e2b.md); absent where the SDK is not installed."""

from __future__ import annotations

import importlib.util
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wasmrun.bench.run import Bench

LABEL = "wasmrun, E2B SDK: create + first run_code"
HTTP_HELLO = "wasmrun, HTTP keep-alive"


def absent(bench: Bench) -> str | None:
    if importlib.util.find_spec("e2b_code_interpreter") is None:
        return "E2B's SDK is not installed (pip install 'e2b-code-interpreter==2.11.5')"
    return None


def create_to_first_result(bench: Bench) -> dict[str, float]:
    """One sample: the SDK's create, then a cell whose result it reads; the sandbox is
    killed after the clock stops. Beside it, a fresh run over HTTP for scale."""
    from e2b_code_interpreter import Sandbox

    base = f"http://127.0.0.1:{bench.http.port}"
    key = bench.http.auth.decode().partition("Bearer ")[2].strip() or "wasmrun"
    start = time.perf_counter()
    sandbox = Sandbox.create(api_url=f"{base}/e2b/api", sandbox_url=f"{base}/e2b/sandbox", api_key=key)
    try:
        text = sandbox.run_code("1 + 1").text
        seconds = time.perf_counter() - start
    finally:
        sandbox.kill()
    if text != "2":
        raise RuntimeError(f"the E2B front answered {text!r} for 1 + 1")
    hello = bench.http.sample("def main(args):\n    print('hello')\n    return 1\n")
    return {LABEL: seconds, HTTP_HELLO: hello}
