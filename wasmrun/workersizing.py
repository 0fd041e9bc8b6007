"""How many workers `serve` starts when the operator does not say (--workers / WASMRUN_WORKERS).

A worker on the stdlib image holds about 130 MB; on the data image about 450 MB
once its spare instances are ready (its compiled module alone is ~330 MB, read
into each worker's own memory, see sandbox/images/compiled.py), plus what its run in
flight uses, up to the run's memory limit (256 MiB by default). One worker per
CPU, as on the stdlib image, could then ask for more memory than the machine
has: with the data image (`--image data`, or `auto`, which may pick it) the
default is the number of CPUs, but no more than three quarters of the memory
available at start allows at DATA_WORKER_BYTES each (at least one). An explicit
--workers is always taken as given.
"""

from __future__ import annotations

import logging
import os

DATA_WORKER_BYTES = 768 << 20  # ~450 MB idle with spares, and a run at the default 256 MiB limit
MEMORY_SHARE = 0.75  # of the memory available at start: the rest is the system's and the server's
logger = logging.getLogger("wasmrun")


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable, or None where there is no /proc/meminfo (not Linux)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_workers(image: str, cpus: int | None = None, available: int | None = None) -> int:
    """The default worker count for `image` ("stdlib", "data" or "auto")."""
    cpus = cpus or os.cpu_count() or 1
    if image == "stdlib" or (image == "auto" and not _data_image_possible()):
        return cpus
    available = available if available is not None else available_bytes()
    if available is None:
        return cpus
    fits = max(1, int(available * MEMORY_SHARE) // DATA_WORKER_BYTES)
    if fits < cpus:
        logger.warning(
            "%d workers rather than one per CPU (%d): the data image needs about %d MiB a worker and %d MiB"
            " are available; --workers (WASMRUN_WORKERS) sets the number", fits, cpus, DATA_WORKER_BYTES >> 20,
            available >> 20,
        )
    return min(cpus, fits)


def _data_image_possible() -> bool:
    """Whether `auto` can ever serve the data image here (the data extra installed, or
    its interpreter fetched): without it, `auto` is the stdlib image's worker count."""
    from wasmrun.sandbox import warmup

    return warmup.available()
