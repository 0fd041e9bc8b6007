"""The async client: several runs at once from one event loop.

    wasmrun serve &
    python examples/async_client.py [http://127.0.0.1:8080]
"""

from __future__ import annotations

import asyncio
import sys

from wasmrun.client import AsyncClient


async def squares(url: str, n: int = 4) -> list[int]:
    async with AsyncClient(url) as client:
        runs = await asyncio.gather(*(
            client.run_code("def main(args):\n    return args['x'] ** 2\n", args={"x": x}, limits={"timeout_ms": 10_000})
            for x in range(n)
        ))
        return [run.output for run in runs]


if __name__ == "__main__":
    print(asyncio.run(squares(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080")))
