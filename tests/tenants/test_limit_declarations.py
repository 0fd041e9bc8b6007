"""One declaration per limit (wasmrun/limits.py), and everything a user sees of a limit
derived from it: the request check, the tool schemas, `wasmrun run --help` and
`tenants --help`, `WASMRUN_MAX_*`, the tenant limits and the docs' tables. Each test
walks the declarations, so a limit added there is covered here without a new test."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.liveserver import REPO
from wasmrun import limits
from wasmrun.cli import main as cli
from wasmrun.limits import REQUESTABLE, RUN_LIMIT, TENANT_LIMITS, MiB
from wasmrun.sandbox import CEILING_LIMITS, DEFAULT_LIMITS
from wasmrun.settings import Settings
from wasmrun.tenants.limits import TenantLimits, check_limits
from wasmrun.tools import render_all

ROOT = REPO
Rpc = Any
NAMES = [limit.name for limit in REQUESTABLE]
TRIVIAL = "def main(args):\n    return 1\n"


# -- the docs --------------------------------------------------------------------


@pytest.mark.parametrize("relative", list(limits.DOC_TABLES))
def test_the_docs_tables_are_the_declarations(relative: str) -> None:
    text = (ROOT / relative).read_text(encoding="utf-8")
    what, render = limits.DOC_TABLES[relative]
    assert limits.with_table(text, what, render()) == text, (
        f"{relative}'s {what} table differs from wasmrun/limits.py: run `python -m wasmrun.limits`"
    )


def test_rewriting_the_docs_puts_back_a_drifted_table(tmp_path: Path) -> None:
    for relative in limits.DOC_TABLES:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        text = (ROOT / relative).read_text(encoding="utf-8")
        (tmp_path / relative).write_text(text.replace("| 30000 |", "| 1000 |").replace("| 600 |", "| 60 |"))
    assert len(limits.rewrite_docs(tmp_path)) == len(limits.DOC_TABLES)
    for relative in limits.DOC_TABLES:
        assert (tmp_path / relative).read_text() == (ROOT / relative).read_text()
    assert limits.rewrite_docs(tmp_path) == []


def test_a_document_without_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="markers"):
        limits.with_table("no table here", "run limits", limits.run_limits_markdown())


def test_the_readme_names_every_requestable_limit() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in NAMES:
        assert f"`{name}`" in readme, f"README.md does not name the run limit {name}"


def _human(value: int, unit: str) -> str:
    """How docs/sandbox.md writes a value: 30 s, 15 min, 256 MiB, 2 GiB, 64 KiB."""
    if unit == "milliseconds":
        return f"{value // 60_000} min" if value >= 60_000 and value % 60_000 == 0 else f"{value / 1000:,.0f} s"
    mib = value if unit == "MiB" else value / MiB
    if mib >= 1024 and mib % 1024 == 0:
        return f"{mib // 1024:.0f} GiB"
    return f"{mib:.0f} MiB" if mib >= 1 else f"{value // 1024} KiB"


def test_the_sandbox_docs_table_states_the_declared_defaults_and_ceilings() -> None:
    rows = [line.split("|") for line in (ROOT / "docs/sandbox.md").read_text().splitlines() if line.startswith("| ")]
    for limit in REQUESTABLE:
        row = next(r for r in rows if f"`{limit.name}`" in r[2])
        default, ceiling = row[3].strip(), row[4].strip()
        assert default.startswith(_human(limit.default, limit.unit)), (limit.name, default)
        assert ceiling.startswith(_human(limit.ceiling, limit.unit)), (limit.name, ceiling)


def test_every_documented_ceiling_variable_has_the_declared_value() -> None:
    texts = {path: path.read_text(encoding="utf-8") for path in [ROOT / "README.md", ROOT / "wasmrun/settings.py",
                                                                 *sorted((ROOT / "docs").glob("*.md"))]}
    seen = set()
    for path, text in texts.items():
        for name, number in re.findall(r"WASMRUN_MAX_([A-Z_]+)[`|\s]+(\d+)", text):
            limit = RUN_LIMIT.get(name.lower())
            if limit is not None:
                assert int(number) == limit.ceiling, f"{path.name}: WASMRUN_MAX_{name} {number}"
                seen.add(limit.name)
    assert seen == set(NAMES)


# -- what is derived -------------------------------------------------------------


def test_the_sandbox_defaults_and_ceilings_are_the_declared_ones() -> None:
    for limit in limits.RUN_LIMITS:
        assert getattr(DEFAULT_LIMITS, limit.field) == limit.default * limit.scale
        assert getattr(CEILING_LIMITS, limit.field) == limit.ceiling * limit.scale


def test_the_tenant_limits_are_the_declared_ones() -> None:
    assert {name: getattr(TenantLimits(), name) for name in (t.name for t in TENANT_LIMITS)} == {
        t.name: t.default for t in TENANT_LIMITS
    }
    for tenant_limit in TENANT_LIMITS:
        if tenant_limit.zero_allowed:
            assert check_limits({tenant_limit.name: 0}) == {tenant_limit.name: 0}
        else:
            with pytest.raises(ValueError, match="at least 1"):
                check_limits({tenant_limit.name: 0})


@pytest.mark.parametrize("tool", ["run_code", "execute_skill", "create_session"])
def test_tool_schemas_state_each_limits_range_and_default(tool: str) -> None:
    rendered = {t["name"]: t for t in render_all("mcp")}
    members = rendered[tool]["inputSchema"]["properties"]["limits"]["properties"]
    assert list(members) == NAMES
    for limit in REQUESTABLE:
        schema = members[limit.name]
        assert (schema["type"], schema["minimum"], schema["maximum"]) == ("integer", limit.minimum, limit.ceiling)
        assert schema["description"] == f"{limit.help}; default {limit.default}, at most {limit.ceiling}"


def test_run_help_lists_every_limit_with_its_default_and_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = capsys.readouterr().out
    for limit in REQUESTABLE:
        line = next(line for line in text.splitlines() if line.strip().startswith(limit.name + " "))
        assert f"default {limit.default} " in line and f"server ceiling {limit.ceiling}" in line
        if limit.option:
            assert f"same as --limit {limit.name}=N (default {limit.default})" in " ".join(text.split())


def test_ceiling_variables_follow_the_declaration() -> None:
    policy = Settings.load({limit.env: str(limit.minimum + 1) for limit in REQUESTABLE}).limits
    for limit in REQUESTABLE:
        assert getattr(policy.ceilings, limit.field) == (limit.minimum + 1) * limit.scale
    bounded = [limit for limit in REQUESTABLE if limit.absolute_max is not None]
    for limit in bounded:
        for value in (limit.minimum - 1, limit.absolute_max + 1):  # type: ignore[operator]
            with pytest.raises(ValueError, match=limit.env):
                Settings.load({limit.env: str(value)})


# -- the request check: hostile values, on every method that takes limits ----------

HOSTILE = [True, False, 1.5, 10.0, -1, 0, 2**64, 10**30, -(10**30), "100", "", None, [1], {"x": 1}]
METHODS = {
    "run_code": lambda limits: ("run_code", {"language": "python", "code": TRIVIAL, "limits": limits}),
    "execute_skill": lambda limits: ("execute_skill", {"name": "text.stats", "args": {"text": "a"}, "limits": limits}),
    "create_session": lambda limits: ("create_session", {"language": "python", "limits": limits}),
}


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("name", NAMES)
def test_a_hostile_limit_is_invalid_params_naming_it(rpc: Rpc, method: str, name: str) -> None:
    for value in HOSTILE:
        if value is None:
            continue  # null is "omitted"
        answer = rpc(*METHODS[method]({name: value}))
        assert "error" in answer, (name, value, answer)
        error = answer["error"]
        assert (error["code"], error["data"]["field"]) == (-32602, f"limits.{name}"), (value, error)
        assert name in error["message"]


@pytest.mark.parametrize("name", NAMES)
def test_a_limit_just_outside_its_range_states_the_range(rpc: Rpc, name: str) -> None:
    """The range is the declared one; where the (default) tenant's declared cap is the
    lower ceiling, the error names that tenant limit too."""
    limit = RUN_LIMIT[name]
    highest = min(limit.ceiling, limit.cap.default) if limit.cap else limit.ceiling
    for value in (limit.minimum - 1, highest + 1):
        if value < 1:
            continue  # the type check refuses it first (PositiveInt)
        error = rpc(*METHODS["run_code"]({name: value}))["error"]
        expected: dict[str, Any] = {"field": f"limits.{name}", "minimum": limit.minimum, "maximum": highest}
        where = "on this server"
        if value > highest and highest < limit.ceiling:
            assert limit.cap is not None
            expected.update(limit=limit.cap.name, value=highest)
            where = f"for this tenant ({limit.cap.name} = {highest})"
        assert error["data"] == expected
        assert error["message"] == f"limits.{name} must be from {limit.minimum} to {highest} {where}, not {value}"


@pytest.mark.parametrize("method", ["run_code", "create_session"])
def test_numbers_python_cannot_hold_are_refused_naming_the_member(client: Any, method: str) -> None:
    for number in (b"1e400", b"-1e400", b"1" + b"0" * 5000):
        for name in NAMES:
            params = {"run_code": b'{"language":"python","code":"1","limits":{"%s":%s}}',
                      "create_session": b'{"language":"python","limits":{"%s":%s}}'}[method]
            body = b'{"jsonrpc":"2.0","id":1,"method":"%s","params":%s}' % (method.encode(), params % (
                name.encode(), number))
            answer = json.loads(client.post("/rpc", content=body, headers={"Content-Type": "application/json"}).content)
            assert answer["error"]["code"] == -32602, (number, answer)
            assert answer["error"]["data"]["field"] == f"limits.{name}"


def test_a_huge_limit_is_not_echoed_whole(rpc: Rpc) -> None:
    error = rpc(*METHODS["run_code"]({"timeout_ms": 10**400}))["error"]
    assert error["message"].endswith("not a number of 401 digits")
    assert error["data"] == {"field": "limits.timeout_ms", "minimum": 1, "maximum": RUN_LIMIT["timeout_ms"].ceiling}


@pytest.mark.parametrize("given", ["timeout_ms=" + "9" * 5000, "timeout_ms=1.5", "timeout_ms=-1", "timeout_ms=",
                                   "nope=5", "timeout_ms=0"])
def test_hostile_cli_limits_are_refused_naming_them(tmp_path: Path, given: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = tmp_path / "x.py"
    code.write_text(TRIVIAL)
    assert cli.main(["run", str(code), "--limit", given, "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wasmrun: ") and len(err) < 300
    assert given.partition("=")[0] in err or "NAME=NUMBER" in err


@pytest.mark.parametrize("name", [t.name for t in TENANT_LIMITS])
def test_a_hostile_tenant_limit_is_refused_naming_it(name: str) -> None:
    """The policy file's `[limits]` and `tenants set` go through this check."""
    for value in (True, 1.5, float("nan"), -1, 2**53, 10**400, 10**5000, "5", "x" * 5000, None, [1]):
        with pytest.raises(ValueError, match=name) as refused:
            check_limits({name: value})
        assert len(str(refused.value)) < 200
    assert check_limits({name: 2**53 - 1}) == {name: 2**53 - 1}


@pytest.mark.parametrize("given", ["concurrent_runs=" + "9" * 5000, "concurrent_runs=1.5", "concurrent_runs=-1",
                                   "concurrent_runs=0", "nope=5", "concurrent_runs"])
def test_tenants_set_refuses_a_hostile_limit(tmp_path: Path, given: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert cli.main(["tenants", "add", "team-a", *data]) == 0
    assert cli.main(["tenants", "set", "team-a", "--limit", given, *data]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("wasmrun: ") and len(err) < 400
    assert given.partition("=")[0] in err or "NAME=NUMBER" in err
    assert cli.main(["tenants", "list", *data]) == 0
    assert "(server defaults)" in capsys.readouterr().out  # nothing stored
