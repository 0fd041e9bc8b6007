"""Operator-added pure-Python packages (`wasmrun packages`), with real pip
against the real package index and real servers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.liveserver import LiveServer, wasmrun_env
from tests.postgres import database_url, postgres_server  # noqa: F401  (fixtures)
from tests.skillfiles import write_skill
from wasmrun.packages import layer, wheels

FIRST = ["defusedxml", "tabulate", "PyYAML", "python-dateutil"]


def packages(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wasmrun", "packages", args[0], "--data-dir", str(data_dir), *args[1:]],
        env=wasmrun_env(), capture_output=True, text=True, timeout=900,
    )


def run_code(server: LiveServer, code: str, **params: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "run_code", "params": {"language": "python", "code": code, **params}}
    answer: dict[str, Any] = httpx2.post(server.endpoint, json=body, timeout=120).json()
    return answer["result"] if "result" in answer else answer


def rpc(server: LiveServer, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer: dict[str, Any] = httpx2.post(server.endpoint, json=body, timeout=120).json()
    return answer


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir whose layer holds FIRST and their dependencies (one real `packages add`)."""
    folder = tmp_path_factory.mktemp("data")
    added = packages(folder, "add", *FIRST)
    assert added.returncode == 0, added.stderr
    return folder


@pytest.fixture(scope="module")
def server(data_dir: Path) -> Iterator[LiveServer]:
    live = LiveServer(data_dir)
    yield live
    live.stop()


def test_added_packages_import_in_run_code(server: LiveServer) -> None:
    result = run_code(server, (
        "import defusedxml.ElementTree as ET, tabulate, yaml, dateutil.parser\n"
        "[ET.fromstring('<a>x</a>').text, tabulate.tabulate([[1, 2]], tablefmt='plain'),\n"
        " yaml.safe_load('k: [1, 2]'), dateutil.parser.parse('2024-03-01T10:00').isoformat(),\n"
        " yaml.__with_libyaml__, yaml.__cached__]"
    ))
    assert result["status"] == "completed", result
    assert result["output"][:4] == ["x", "1  2", {"k": [1, 2]}, "2024-03-01T10:00:00"]
    # PyYAML in its pure form (no libyaml binding), its bytecode compiled at install time.
    assert result["output"][4] is False
    assert result["output"][5] == "/pycache/packages/yaml/__init__.cpython-311.pyc"


def test_layer_is_read_only_in_runs(server: LiveServer) -> None:
    result = run_code(server, "open('/packages/yaml/__init__.py', 'a').write('x = 1')")
    assert result["status"] == "failed"
    assert "PermissionError" in result["error"]["message"]
    assert run_code(server, "import yaml\nhasattr(yaml, 'x')")["output"] is False


def test_pure_fallback_has_no_native_code(data_dir: Path) -> None:
    folder = layer.current(layer.tag_root(data_dir, layer.DEFAULT_TAG))
    assert folder is not None
    site = folder / "site-packages"
    assert (site / "yaml" / "__init__.py").is_file()
    assert [p for p in site.rglob("*") if wheels.NATIVE_FILE.search(p.name)] == []


def test_list_names_packages_and_dependencies(data_dir: Path) -> None:
    listed = packages(data_dir, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    for name in ("defusedxml", "tabulate", "pyyaml", "python-dateutil"):
        assert any(line.startswith(f"{name}==") and "dependency" not in line for line in lines), lines
    assert any("(dependency)" in line for line in lines), lines  # python-dateutil's own


def test_missing_module_hint_names_packages_add(server: LiveServer) -> None:
    result = run_code(server, "import docx")
    assert result["status"] == "failed"
    assert "wasmrun packages add python-docx" in result["error"]["message"]
    result = run_code(server, "import not_a_real_module_xyz")
    assert "wasmrun packages add not_a_real_module_xyz" in result["error"]["message"]


def test_native_package_refused_with_its_name_and_who_pulled_it(tmp_path: Path) -> None:
    refused = packages(tmp_path, "add", "pydantic")
    assert refused.returncode == 2
    assert "pydantic-core (required by pydantic) needs native code" in refused.stderr, refused.stderr
    refused = packages(tmp_path, "add", "numpy")
    assert refused.returncode == 2 and "numpy needs native code" in refused.stderr, refused.stderr
    assert layer.current(layer.tag_root(tmp_path, layer.DEFAULT_TAG)) is None  # nothing published


@pytest.mark.parametrize("name", [
    "--index-url=http://127.0.0.1:9/simple", "-r/etc/passwd", "../../etc", "./pkg", "/tmp/pkg",
    "pkg @ https://example.com/pkg-1.0-py3-none-any.whl", "pkg @ file:///etc/passwd",
    "x" * 5000, "pkg; python_version > '3'", "pkg\n--extra-index-url=http://x", "",
])
def test_hostile_names_refused(tmp_path: Path, name: str) -> None:
    refused = packages(tmp_path, "add", "--", name) if name.startswith("-") else packages(tmp_path, "add", name)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("wasmrun: ")
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "packages").exists()  # refused before any pip runs or any folder is made


def _wheel(path: Path, members: dict[str, bytes], symlink: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, "/etc/passwd")
    return path


@pytest.mark.parametrize("members, symlink, why", [
    ({"../evil.py": b"x = 1"}, None, "climbs out"),
    ({"/abs/evil.py": b"x = 1"}, None, "absolute"),
    ({"pkg/../../evil.py": b"x = 1"}, None, "climbs out"),
    ({"pkg/__init__.py": b"", "pkg-1.dist-info/RECORD": b"../../evil.py,,\n"}, None, "climbs out"),
    ({"pkg/__init__.py": b"", "pkg-1.dist-info/RECORD": b"/etc/cron.d/x,,\n"}, None, "absolute"),
    ({"pkg/__init__.py": b""}, "pkg/link", "symbolic link"),
    ({"pkg/_speedups.cpython-311-x86_64-linux-gnu.so": b"\x7fELF"}, None, "native code"),
    ({"pkg\\..\\..\\evil.py": b""}, None, "malformed"),
    ({"pkg": b"a file", "pkg/mod.py": b""}, None, "cannot be written"),
])
def test_unsafe_wheels_refused(tmp_path: Path, members: dict[str, bytes], symlink: str | None, why: str) -> None:
    wheel = _wheel(tmp_path / "pkg-1-py3-none-any.whl", members, symlink)
    site = tmp_path / "a" / "b" / "site"
    site.mkdir(parents=True)
    with pytest.raises(wheels.UnsafeWheel, match=why):
        wheels.unpack(wheel, site)
    assert not (tmp_path / "evil.py").exists() and not (tmp_path / "a" / "evil.py").exists()
    assert not (site / "pkg" / "link").exists()


def test_a_file_in_two_wheels_must_be_the_same(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    shared = b"__path__ = __import__('pkgutil').extend_path(__path__, __name__)\n"
    wheels.unpack(_wheel(tmp_path / "a-1-py3-none-any.whl", {"ns/__init__.py": shared, "ns/a.py": b""}), site)
    wheels.unpack(_wheel(tmp_path / "b-1-py3-none-any.whl", {"ns/__init__.py": shared, "ns/b.py": b""}), site)
    assert sorted(p.name for p in (site / "ns").iterdir()) == ["__init__.py", "a.py", "b.py"]
    with pytest.raises(wheels.UnsafeWheel, match="also in another wheel"):
        wheels.unpack(_wheel(tmp_path / "c-1-py3-none-any.whl", {"ns/a.py": b"evil = 1"}), site)
    assert (site / "ns" / "a.py").read_bytes() == b""


def test_wheel_scripts_and_data_are_not_installed(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "pkg-1-py3-none-any.whl", {
        "pkg/__init__.py": b"", "pkg-1.data/scripts/run": b"#!/bin/sh", "pkg-1.data/purelib/extra.py": b"",
        "pkg-1.data/data/share/x": b"",
    })
    site = tmp_path / "site"
    site.mkdir()
    wheels.unpack(wheel, site)
    assert sorted(p.relative_to(site).as_posix() for p in site.rglob("*")) == ["extra.py", "pkg", "pkg/__init__.py"]


def test_change_seen_by_running_server_without_restart(tmp_path: Path) -> None:
    live = LiveServer(tmp_path)
    try:
        before = run_code(live, "import defusedxml")
        assert before["status"] == "failed"
        assert "wasmrun packages add defusedxml" in before["error"]["message"]
        added = packages(tmp_path, "add", "defusedxml")
        assert added.returncode == 0, added.stderr
        assert run_code(live, "import defusedxml\ndefusedxml.__name__")["output"] == "defusedxml"
        removed = packages(tmp_path, "remove", "defusedxml")
        assert removed.returncode == 0, removed.stderr
        assert packages(tmp_path, "list").stdout == ""
        assert run_code(live, "import defusedxml")["status"] == "failed"
    finally:
        live.stop()


def test_remove_of_a_package_never_added_is_refused(data_dir: Path) -> None:
    refused = packages(data_dir, "remove", "six-not-added")
    assert refused.returncode == 2 and "six-not-added" in refused.stderr
    dependency = next(line for line in packages(data_dir, "list").stdout.splitlines() if "(dependency)" in line)
    refused = packages(data_dir, "remove", dependency.split("==")[0])
    assert refused.returncode == 2 and "installed as a dependency" in refused.stderr


def test_dependency_tree_is_bounded(tmp_path: Path) -> None:
    refused = packages(tmp_path, "add", "--max-packages", "1", "python-dateutil")
    assert refused.returncode == 2
    assert re.search(r"need [0-9]+ packages with their dependencies; at most 1 are allowed", refused.stderr), refused.stderr
    assert layer.current(layer.tag_root(tmp_path, layer.DEFAULT_TAG)) is None


def test_concurrent_adds_on_one_data_dir_both_land(tmp_path: Path) -> None:
    env = wasmrun_env()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "wasmrun", "packages", "add", name, "--data-dir", str(tmp_path)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for name in ("defusedxml", "six")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err
    listed = packages(tmp_path, "list").stdout
    assert "defusedxml==" in listed and "six==" in listed, listed


def test_killed_add_leaves_the_published_layer_whole(tmp_path: Path) -> None:
    assert packages(tmp_path, "add", "six").returncode == 0
    root = layer.tag_root(tmp_path, layer.DEFAULT_TAG)
    published = layer.current(root)
    proc = subprocess.Popen(
        [sys.executable, "-m", "wasmrun", "packages", "add", "defusedxml", "--data-dir", str(tmp_path)],
        env=wasmrun_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    while proc.poll() is None and not any(p.name.startswith(".work-") for p in root.iterdir()):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # pip with it
    proc.wait()
    assert layer.current(root) == published
    assert [p.name for p in layer.read_info(root).packages] == ["six"]  # type: ignore[union-attr]
    assert packages(tmp_path, "add", "defusedxml").returncode == 0  # the next one cleans up and lands
    assert not [p for p in root.iterdir() if p.name.startswith((".tmp-", ".work-", ".link-"))]


def test_skill_requiring_a_missing_package_is_refused(server: LiveServer) -> None:
    manifest = {
        "name": "user.pkgs.needs_missing", "version": "0.1.0", "description": "Needs a package.",
        "kind": "action", "runtime": {"language": "python", "entrypoint": "code/main.py"},
        "packages": {"requires": ["defusedxml", "not-installed-pkg-xyz>=1"]},
    }
    files = [{"path": "code/main.py", "content": "def main(args):\n    return 1\n"}]
    answer = rpc(server, "create_skill", {"manifest": manifest, "skill_md": "# x\n", "files": files})
    assert "error" in answer, answer
    # Installs on demand (the default policy) try the index for what the layer lacks, alone:
    # no such package, so the skill is refused naming it (tests/packages/test_skill_packages.py
    # has the installed case and the refusal with installs off).
    assert answer["error"]["data"]["field"] == "manifest.packages.requires", answer
    message = answer["error"]["message"]
    assert "not-installed-pkg-xyz" in message
    assert answer["error"]["data"]["package"].startswith("not-installed-pkg-xyz")  # not defusedxml: the layer has it
    assert "error" in rpc(server, "describe_skill", {"name": "user.pkgs.needs_missing"})


def test_skill_requiring_added_packages_registers_and_runs(server: LiveServer) -> None:
    manifest = {
        "name": "user.pkgs.uses_yaml", "version": "0.1.0", "description": "Parses YAML.",
        "kind": "action", "runtime": {"language": "python", "entrypoint": "code/main.py"},
        "packages": {"requires": ["PyYAML", "tabulate>=0.8"]},
    }
    code = "import yaml\n\ndef main(args):\n    return yaml.safe_load(args['text'])\n"
    files = [{"path": "code/main.py", "content": code}]
    created = rpc(server, "create_skill", {"manifest": manifest, "skill_md": "# x\n", "files": files})
    assert "result" in created, created
    ran = rpc(server, "execute_skill", {"name": "user.pkgs.uses_yaml", "args": {"text": "a: 1"}})
    assert ran["result"]["output"] == {"a": 1}, ran


@pytest.mark.parametrize("requires", [["--index-url=http://x"], ["x @ https://e.com/x.whl"], ["../x"]])
def test_skill_package_declarations_are_names_only(tmp_path: Path, requires: list[str]) -> None:
    from wasmrun.registry.manifest import ManifestError, validate_manifest

    with pytest.raises(ManifestError, match=r"packages\.requires\[0\]"):
        validate_manifest({
            "name": "a.b", "version": "0.1.0", "description": "d", "kind": "instruction",
            "packages": {"requires": requires},
        })


def test_folder_skill_missing_packages_warns_at_start(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "needs.pkg", packages={"requires": ["not-installed-pkg-xyz"]})
    agent = skills / "agent-needs"
    agent.mkdir()
    (agent / "SKILL.md").write_text(
        "---\nname: agent-needs\ndescription: Needs a package.\n"
        "metadata:\n  requires-packages: defusedxml other-missing-pkg\n---\n# x\n"
    )
    live = LiveServer(tmp_path / "data", "--skills-dir", str(skills), "--packages", "off")  # else installed
    err = live.stop()
    assert "skill needs.pkg requires packages this server does not have: not-installed-pkg-xyz" in err
    assert "defusedxml, other-missing-pkg" in err and "wasmrun packages add defusedxml other-missing-pkg" in err


def test_doctor_names_the_layer(data_dir: Path) -> None:
    report = subprocess.run(
        [sys.executable, "-m", "wasmrun", "doctor", "--data-dir", str(data_dir)],
        env=wasmrun_env(), capture_output=True, text=True, timeout=300,
    )
    line = next(line for line in report.stdout.splitlines() if line.startswith("packages cp311"))
    assert "defusedxml==" in line and "pyyaml==" in line, report.stdout


def test_shared_registry_refuses_a_skill_whose_packages_are_missing(
    tmp_path: Path, database_url: str  # noqa: F811
) -> None:
    live = LiveServer(tmp_path / "data", "--database-url", database_url)
    try:
        manifest = {
            "name": "user.pkgs.shared_needs", "version": "0.1.0", "description": "Needs a package.",
            "kind": "action", "runtime": {"language": "python", "entrypoint": "code/main.py"},
            "packages": {"requires": ["not-installed-pkg-xyz"]},
        }
        files = [{"path": "code/main.py", "content": "def main(args):\n    return 1\n"}]
        answer = rpc(live, "create_skill", {"manifest": manifest, "skill_md": "# x\n", "files": files})
        assert "not-installed-pkg-xyz" in answer["error"]["message"], answer  # not on the index
        assert answer["error"]["data"]["field"] == "manifest.packages.requires", answer
        assert "error" in rpc(live, "describe_skill", {"name": "user.pkgs.shared_needs"})  # nothing stored
    finally:
        live.stop()
