"""Order statistics and ratios, as the bench reports them."""

from __future__ import annotations

import statistics


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def summary(seconds: list[float]) -> dict[str, float]:
    """n, p50 and p90 in milliseconds."""
    return {"n": len(seconds), "p50_ms": pct(seconds, 50) * 1000, "p90_ms": pct(seconds, 90) * 1000,
            "mean_ms": statistics.fmean(seconds) * 1000}


def ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.0f}x"
