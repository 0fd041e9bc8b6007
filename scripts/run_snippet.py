#!/usr/bin/env python3
"""Run a Python snippet in a fresh wasmrun sandbox and print the result with its usage.

    python scripts/run_snippet.py 'def main(args): return sum(args["xs"])' --args '{"xs": [1, 2]}'
    python scripts/run_snippet.py path/to/file.py --timeout-ms 500

The snippet must define the entrypoint (default `main(args)`); a bare
expression is wrapped as `def main(args): return <expr>`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wasmrun.blobs.store import FileBlobStore
from wasmrun.sandbox import LimitPolicy, RunRequest, SandboxEngine, encode_args


def _source(text: str) -> str:
    path = Path(text)
    if path.suffix == ".py" and path.is_file():
        return path.read_text()
    if "def " in text or "\n" in text:
        return text
    return f"def main(args):\n    return {text}\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("snippet", help="source code, an expression, or a .py file")
    parser.add_argument("--args", default="{}", help="JSON object passed to the entrypoint")
    parser.add_argument("--entrypoint", default="main")
    parser.add_argument("--timeout-ms", type=int)
    parser.add_argument("--memory-mb", type=int)
    opts = parser.parse_args()
    limits = LimitPolicy().resolve(
        timeout_ms=opts.timeout_ms,
        memory_bytes=opts.memory_mb << 20 if opts.memory_mb else None,
    )
    with tempfile.TemporaryDirectory() as tmp, SandboxEngine(FileBlobStore(Path(tmp))) as engine:
        request = RunRequest(
            kind="code", code=_source(opts.snippet), function=opts.entrypoint,
            args_json=encode_args(json.loads(opts.args)), limits=limits,
        )
        result = engine.run(request)
    print(f"status:  {result.status}")
    if result.error:
        print(f"error:   {result.error.type}\n{result.error.message}")
    else:
        print(f"output:  {json.dumps(result.output)}")
    if result.logs:
        print("logs:\n" + result.logs.rstrip("\n"))
    u = result.usage
    print(
        f"usage:   instantiate {u.instantiate_ms:.2f} ms, run {u.run_ms:.2f} ms, total {u.total_ms:.2f} ms, "
        f"cpu {u.cpu_ms:.1f} ms, peak memory {u.peak_memory_bytes / 2**20:.1f} MiB"
    )
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
