"""The typed client: blobs, runs with limits, warnings, typed results, and cleanup.

    wasmrun serve &
    python examples/typed_client.py [http://127.0.0.1:8080]

Every result is a typed object (wasmrun.protocol.types): `run.status`,
`run.output`, `run.error.type`, `run.warnings`, `run.usage.cpu_ms`.
"""

from __future__ import annotations

import sys
from typing import Any

from wasmrun.client import Client

CODE = """
import csv
def main(args):
    with open('/blobs/' + args['blob']) as f:
        rows = list(csv.DictReader(f))
    return {'rows': len(rows), 'hottest': max(rows, key=lambda r: int(r['temp']))['city']}
"""


def demo(url: str) -> dict[str, Any]:
    with Client(url) as client:
        blob = client.create_blob("city,temp\nOslo,3\nLima,19\nPune,31\n", kind="text/csv")
        run = client.run_code(
            CODE, args={"blob": blob.blob_id}, input_blobs=[blob.blob_id],
            limits={"timeout_ms": 10_000, "memory_mb": 128, "cpu_ms": 5_000},
        )
        assert run.status == "completed", run.error
        # A typo in the entrypoint is not silent: the result's warnings say what to write.
        typo = client.run_code("def mian(args):\n    return 1\n")
        # A runaway loop stops at its CPU limit, with the line it was on.
        runaway = client.run_code("while True:\n    pass\n", limits={"cpu_ms": 300})
        deleted = client.delete_blob(blob.blob_id)
        return {
            "output": run.output,
            "cpu_ms": run.usage.cpu_ms if run.usage else None,
            "typo_warnings": typo.warnings or [],
            "runaway_error": runaway.error.type if runaway.error else None,
            "runaway_message": runaway.error.message if runaway.error else "",
            "deleted": deleted.deleted,
        }


if __name__ == "__main__":
    result = demo(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080")
    for key, value in result.items():
        print(f"{key}: {value}")
