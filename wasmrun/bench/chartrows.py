"""The chart rows of `wasmrun bench` (issue #49): a matplotlib chart saved as PNG or SVG on the
data image, against the same code in this Python's own matplotlib (a subprocess), in one run.

Each workload is a setup (imports, data: untimed), a warm-up (the chart made once, untimed:
both sides then have their fonts loaded, as the issue measured) and the timed chart,
timed inside the interpreter that draws it (ELAPSED). The data image is also timed on
a run's first chart (no warm-up: what an agent's first chart costs in a fresh run).
A row is absent where the data image is not built or this Python has no matplotlib.
docs/data-speed.md has the profile behind them.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wasmrun.bench import datarows
from wasmrun.bench.interleave import Samples, alternating

if TYPE_CHECKING:
    from wasmrun.bench.run import Bench

NATIVE = "native CPython + matplotlib subprocess"
DATA_FIRST = "wasmrun data image, in-process, a run's first chart"
TARGET_RATIO = 2.0  # issue #49: a chart's PNG within 2x native


@dataclass(frozen=True)
class Chart:
    key: str
    label: str
    setup: str
    body: str  # makes, saves (into BUF) and closes one figure

    def source(self, warm: bool) -> str:
        timed = f"import time\n_t0 = time.perf_counter()\n{self.body}\nELAPSED = time.perf_counter() - _t0\n"
        return f"{self.setup}\n{self.body if warm else ''}\n{timed}"


SETUP = (
    "import io\nimport matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
    "rng = np.random.default_rng(7)\n"
)
LINE = (
    "x = np.linspace(0.0, 20.0, 2_000)\n"
    "fig, ax = plt.subplots(figsize=(8, 4.5))\n"
    "ax.plot(x, np.sin(x) * np.exp(-x / 10), label='damped')\nax.plot(x, np.cos(x) / 2, label='cosine')\n"
    "ax.set_title('Signal over time')\nax.set_xlabel('time (s)')\nax.set_ylabel('amplitude')\n"
    "ax.legend()\nax.grid(True)\n"
)
BAR_SCATTER = (
    "xs = rng.normal(size=5_000)\nys = xs * 0.5 + rng.normal(size=5_000)\n"
    "fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))\n"
    "a1.bar(['north', 'south', 'east', 'west', 'centre'], [23, 17, 35, 29, 12], color='tab:blue')\n"
    "a1.set_title('Sales by region')\na1.set_ylabel('units')\n"
    "a2.scatter(xs, ys, s=4, alpha=0.5)\na2.set_title('5,000 points')\na2.set_xlabel('x')\na2.set_ylabel('y')\n"
    "fig.tight_layout()\n"
)
CHARTS = (
    Chart("chart:line-png", "line chart, 2,000 points, PNG", SETUP,
          LINE + "BUF = io.BytesIO()\nfig.savefig(BUF, format='png')\nplt.close(fig)"),
    Chart("chart:bar-scatter-png", "bar + scatter, 5,000 points, PNG", SETUP,
          BAR_SCATTER + "BUF = io.BytesIO()\nfig.savefig(BUF, format='png')\nplt.close(fig)"),
    Chart("chart:line-svg", "line chart, 2,000 points, SVG", SETUP,
          LINE + "BUF = io.StringIO()\nfig.savefig(BUF, format='svg')\nplt.close(fig)"),
)


@functools.cache
def _native_missing() -> str | None:
    if importlib.util.find_spec("matplotlib") is None:
        return f"{sys.executable} has no matplotlib (pip install 'wasmrun[bench]')"
    return None


def absent(bench: Bench) -> str | None:
    return datarows.absent(bench) or _native_missing()


def native_chart(source: str) -> float:
    """`source` in this Python (site-packages on: its matplotlib), in a subprocess; its ELAPSED."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-I", "-c", source + "\nprint(ELAPSED)\n"],
                         capture_output=True, text=True, check=True, env=env)
    return float(out.stdout.split()[-1])


def measure(chart: Chart) -> Callable[[Bench], Samples]:
    """The row's step: the chart on the data image (warm, and a run's first) and natively."""
    def measure(bench: Bench) -> Samples:
        data = bench.data
        if data is None:
            raise RuntimeError(datarows.not_built() or "the data image's systems are not open")
        warm, first = chart.source(True), chart.source(False)
        return alternating(bench, [
            (datarows.DATA_INPROC, lambda: data.inproc.compute(warm)),
            (DATA_FIRST, lambda: data.inproc.compute(first)),
            (NATIVE, lambda: native_chart(warm)),
        ], chart.key)
    return measure


def summary_lines(compute: list[dict[str, Any]]) -> list[str]:
    """Under the compute table: each chart's ratio (the data image, warm) against the 2x goal."""
    got = [(row["label"], row["systems"].get(datarows.DATA_INPROC, {}).get("ratio")) for row in compute
           if row.get("baseline") == NATIVE]
    got = [(label, ratio) for label, ratio in got if ratio is not None]
    if not got:
        return []
    parts = "; ".join(f"{label} {ratio:.2f}x" for label, ratio in got)
    return ["", f"Charts, wasmrun data image / native matplotlib: {parts} (goal: a chart's PNG <= {TARGET_RATIO:g}x)."]


def what(chart: Chart) -> str:
    """What the chart's row measures (the table's notes, the HTML report)."""
    return (f"{chart.label}: timed in the interpreter after one untimed warm-up chart (the data image also on a "
            f"run's first chart); goal <= {TARGET_RATIO:g}x native")


__all__ = ["CHARTS", "NATIVE", "absent", "measure", "native_chart", "what"]
