"""The machine a bench ran on and the load it was under, recorded beside the figures:
a figure means little without the CPU, the cores, and what else was running."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, version
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _node() -> str | None:
    node = shutil.which("node")
    if node is None:
        return None
    try:
        return subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _mem_total_mb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def host() -> dict[str, Any]:
    """The machine and the software measured (the load is added by `load()`, before and after)."""
    return {
        "cpu_model": _cpu_model(), "arch": platform.machine(), "cores": os.cpu_count() or 1,
        "memory_mb": _mem_total_mb(), "os": f"{platform.system()} {platform.release()}",
        "versions": {"python": platform.python_version(), "wasmrun": _version("wasmrun"),
                     "wasmtime": _version("wasmtime"), "node": _node()},
    }


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages now."""
    return [round(x, 2) for x in os.getloadavg()]


def describe(h: dict[str, Any]) -> str:
    """One line: the machine, as the table's heading prints it."""
    v = h["versions"]
    return (f"{h['cpu_model']} ({h['arch']}, {h['cores']} cores), {h['os']}, Python {v['python']}, "
            f"wasmtime-py {v['wasmtime']}")


def load_line(report: dict[str, Any]) -> str:
    """The load before and after, as the tables print it."""
    h = report.get("host") or {}
    before, after = h.get("load_before"), h.get("load_after")
    if before and after:
        return (f"load average (1/5/15 min) {before[0]:.1f}/{before[1]:.1f}/{before[2]:.1f} before, "
                f"{after[0]:.1f}/{after[1]:.1f}/{after[2]:.1f} after")
    return f"load average at start {report['load'][0]:.1f}"
