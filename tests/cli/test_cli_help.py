"""`wasmrun ... --help` as a newcomer reads it: every command says what it does and
gives an example, every option says what it does and its default, the limit
names come with their units; `run` and `doctor` say plainly what happened."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from wasmrun.cli import doctor
from wasmrun.cli import main as cli
from wasmrun.protocol.types import RunLimits
from wasmrun.tenants.limits import TenantLimits

Command = tuple[tuple[str, ...], argparse.ArgumentParser]


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Command]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(cli._parser())


def _help(*words: str) -> str:
    done = subprocess.run([sys.executable, "-m", "wasmrun", *words, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_command_is_covered() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    for expected in ("serve", "run", "mcp", "warm", "doctor", "tools", "tenants set", "tenants add", "skills check"):
        assert expected in names


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "wasmrun")
def test_each_command_says_what_it_does_and_gives_an_example(path: tuple[str, ...]) -> None:
    text = _help(*path)
    assert "example:\n  " in text
    example_line = text.split("example:\n", 1)[1].splitlines()[0].strip()
    assert "wasmrun" in example_line
    if path:
        usage, rest = text.split("\n\n", 1)
        assert rest.strip() and not rest.startswith("options:"), f"{path}: no description"


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS if p], ids=lambda p: " ".join(p))
def test_each_option_says_what_it_does_and_its_default(path: tuple[str, ...]) -> None:
    parser = dict(COMMANDS)[path]
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        text = formatter._get_help_string(action) or ""
        assert len(text) > 10, f"{path} {action.dest}: no help"
        if action.option_strings and not action.required:
            assert "default" in text, f"{path} {action.option_strings}: no default in {text!r}"


@pytest.mark.parametrize("words", [("tenants", "set"), ("tenants", "add"), ("tenants",)])
def test_tenant_limit_commands_list_every_limit_with_its_unit(words: tuple[str, ...]) -> None:
    text = _help(*words)
    for f in dataclasses.fields(TenantLimits):
        line = next(line for line in text.splitlines() if line.strip().startswith(f.name + " "))
        if f.name.endswith("_ms"):
            assert "milliseconds" in line
        if f.name.endswith("_mb"):
            assert "MiB" in line
        if f.name.endswith("_bytes"):
            assert "bytes" in line
        assert "default" in line


def test_run_lists_its_limits_with_units_defaults_and_ceilings() -> None:
    text = _help("run")
    for field in msgspec.structs.fields(RunLimits):
        assert any(line.strip().startswith(field.name + " ") for line in text.splitlines()), field.name
    assert "timeout_ms    milliseconds  default 30000" in text


def test_warm_help_is_not_empty() -> None:
    assert "machine code" in _help("warm")


def test_run_takes_any_run_limit_and_names_the_known_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = tmp_path / "a.py"
    code.write_text("def main(args):\n    return 40 + 2\n")
    data = ["--data-dir", str(tmp_path / "d")]
    assert cli.main(["run", str(code), *data, "--limit", "cpu_ms=5000", "--limit", "output_bytes=4096"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["output"] == 42
    assert "UNSET" not in out
    assert cli.main(["run", str(code), "--data-dir", str(tmp_path / "d"), "--limit", "cpus=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown run limit 'cpus'" in err and "timeout_ms" in err


def test_a_failed_run_prints_its_error_and_no_unset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = tmp_path / "a.py"
    code.write_text("def main(args):\n    raise KeyError('x')\n")
    assert cli.main(["run", str(code), "--data-dir", str(tmp_path / "d")]) == 1
    out = capsys.readouterr().out
    assert "UNSET" not in out
    assert json.loads(out)["error"]["type"] == "KeyError"


def test_doctor_names_a_missing_extra_with_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hide the installed MCP SDK from the doctor's package lookup (the wheel test sees a real install without it).
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda name: "not installed" if name == "mcp" else real(name))
    from wasmrun.settings import Settings

    text = doctor.diagnose(Settings.load()).render()
    assert "pip install 'wasmrun[mcp]'" in text
    assert "/mcp is not served" in text
    assert "no problems found" not in text
