"""The default worker count: one per CPU, fewer on the data image when memory would not hold them."""

from __future__ import annotations

from pathlib import Path

from wasmrun.settings import Settings
from wasmrun.workersizing import DATA_WORKER_BYTES, available_bytes, default_workers

GiB = 1 << 30


def test_the_stdlib_image_gets_one_worker_per_cpu_whatever_the_memory() -> None:
    assert default_workers("stdlib", cpus=8, available=GiB) == 8


def test_the_data_image_gets_no_more_workers_than_fit_in_memory() -> None:
    assert default_workers("data", cpus=2, available=24 * GiB) == 2  # this kind of box: one per CPU
    assert default_workers("data", cpus=16, available=4 * GiB) == int(3 * GiB) // DATA_WORKER_BYTES == 4
    assert default_workers("auto", cpus=16, available=4 * GiB) == 4  # auto may pick the data image
    assert default_workers("data", cpus=4, available=100 << 20) == 1  # never none
    assert default_workers("data", cpus=3, available=None) == 3  # unknown memory: one per CPU


def test_memavailable_is_read_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684044 kB\nMemFree:         8670000 kB\nMemAvailable:   17504000 kB\n")
    assert available_bytes(str(meminfo)) == 17504000 * 1024
    meminfo.write_text("MemTotal: 1 kB\n")
    assert available_bytes(str(meminfo)) is None
    assert available_bytes(str(tmp_path / "absent")) is None


def test_an_explicit_worker_count_is_taken_as_given(tmp_path: Path) -> None:
    env = {"WASMRUN_IMAGE": "data", "WASMRUN_DATA_DIR": str(tmp_path)}
    assert Settings.load({**env, "WASMRUN_WORKERS": "5"}).workers == 5
    assert Settings.load(env, workers=7).workers == 7
    assert Settings.load(env).workers == default_workers("data")
    assert Settings.load({"WASMRUN_DATA_DIR": str(tmp_path)}).workers == default_workers("auto")  # auto: the default image
