"""A worker process of the pool: `python -m wasmrun.sandbox.pool --fd-in N --fd-out M` (workerprocess.py starts it)."""

from wasmrun.sandbox.pool.poolworker import main

if __name__ == "__main__":
    main()
