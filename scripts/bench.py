#!/usr/bin/env python3
"""The broader bench (regimes, bundled skills, stock CPython-on-WASI, throughput, fairness,
shared backend), kept for its flags; the code is in scripts/bench_legacy*.py (checkout-only
tools, out of the installed package: issue #30).

    python scripts/bench.py [--quick] [--rounds N] [--workers N] [--json FILE]
                            [--no-pyodide] [--no-peers] [--no-shared]
    python scripts/bench.py --only regimes --only skills   # just those sections
    python scripts/bench.py --fairness                     # two tenants, one flooding
    python scripts/bench.py --shared                       # the shared-backend rows alone
    python scripts/bench.py --sessions                     # the session rows (scripts/bench_sessions.py)

`wasmrun bench` is the user-facing bench (start-up, compute, memory, charts, README table).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "scripts"))  # bench_shared, for the shared-backend rows

from bench_legacy_cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
