"""scripts/profile_guest.py samples a workload with perf in the sandbox and
natively and prints a table of C functions for each (docs/compute-profile.md).
Nothing here is timed: only that each side's table has rows, and that the
guest's samples carry CPython's function names (wasmtime's perf map)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.liveserver import REPO

SCRIPT = REPO / "scripts" / "profile_guest.py"


def test_help_runs() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True)
    assert "profile" in out.stdout and "ab" in out.stdout


@pytest.mark.skipif(shutil.which("perf") is None, reason="needs Linux perf")
def test_profile_table_names_cpython_functions() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "profile", "for_arith", "--seconds", "0.3", "--top", "5"],
        capture_output=True, text=True, timeout=300,
    )
    if "perf_event_open" in out.stderr or out.returncode != 0 and "Permission" in out.stderr:
        pytest.skip("perf may not sample here")
    assert out.returncode == 0, out.stderr
    native, _, sandbox = out.stdout.partition("sandbox (")
    rows = re.compile(r"^\| (\S+) \| [\d.]+ \| [\d.]+ \|$", re.M)
    assert rows.findall(native), out.stdout
    assert "_PyEval_EvalFrameDefault" in rows.findall(sandbox), out.stdout
