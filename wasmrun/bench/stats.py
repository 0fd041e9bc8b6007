"""Order statistics and ratios, as the bench reports them."""

from __future__ import annotations

import statistics
from typing import Any

# Every figure of the bench carries these (milliseconds), and n: the JSON schema requires them.
QUANTILES = ("p50_ms", "p90_ms", "p99_ms", "max_ms")


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def summary(seconds: list[float], attempts: int | None = None) -> dict[str, Any]:
    """n, p50, p90, p99, max and mean in milliseconds; with `attempts` (runs tried, failures
    included), the success rate too. With fewer than 100 samples p99 is the maximum: said
    by n beside it."""
    if not seconds:
        out: dict[str, Any] = {"n": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None,
                               "mean_ms": None}
    else:
        out = {"n": len(seconds), "p50_ms": pct(seconds, 50) * 1000, "p90_ms": pct(seconds, 90) * 1000,
               "p99_ms": pct(seconds, 99) * 1000, "max_ms": max(seconds) * 1000,
               "mean_ms": statistics.fmean(seconds) * 1000}
    if attempts is not None:
        out["attempts"] = attempts
        out["success_rate"] = len(seconds) / attempts if attempts else 0.0
    return out


def ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.0f}x"


def ms(x: float | None) -> str:
    """A figure in milliseconds, as the tables print it ("-" when there is none)."""
    if x is None:
        return "-"
    if x >= 10_000:
        return f"{x / 1000:.1f} s"
    return f"{x:.2f} ms" if x < 100 else f"{x:,.0f} ms"
