"""One HTTP hello hop by hop, Starlette's /rpc path against the short one: `wasmrun/bench/hops.py`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wasmrun.bench.hops import main

if __name__ == "__main__":
    main()
