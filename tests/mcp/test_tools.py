"""The LLM tool definitions: the spec's schemas, each format's rules, and that every
tool is a method the server answers with the arguments its schema allows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import mcp_types
import pytest
from starlette.testclient import TestClient

from tests.liveserver import wasmrun_env
from wasmrun.protocol.methods import METHODS
from wasmrun.tools import FORMATS, TOOLS, render_all, strict_allowed, tools

SPEC = Path("/work/shared/spec/skills-protocol-v0.1.txt")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's and Anthropic's rule for tool names
EIGHT = [
    "list_skills", "describe_skill", "read_skill_file", "execute_skill",
    "run_code", "create_blob", "read_blob", "load_skills_protocol_guide",
]


def _spec_tools() -> list[dict[str, Any]]:
    text = SPEC.read_text()
    section = text[text.index("\nTool Schemas\n") : text.index("\nPython Client Example\n")]
    blocks = re.findall(r"^\{\n.*?^\}$", section, flags=re.S | re.M)
    return [json.loads(block) for block in blocks]


@pytest.mark.skipif(not SPEC.exists(), reason="spec text not available")
def test_the_eight_tools_are_the_spec_text() -> None:
    spec = _spec_tools()
    assert [t["name"] for t in spec] == EIGHT
    ours = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in TOOLS]
    assert ours == spec


def test_create_skill_only_on_request() -> None:
    for format in FORMATS:
        assert [_name(t) for t in render_all(format)] == [*EIGHT, *SESSIONS, *COMMANDS, *CODE_MODE]
        names = [_name(t) for t in render_all(format, with_create_skill=True)]
        assert names == [*EIGHT, *SESSIONS, *COMMANDS, *CODE_MODE, "create_skill"]


SESSIONS = ["create_session", "fork_session", "close_session", "list_sessions"]
COMMANDS = ["run_command"]  # its env is a free-form object: never strict
CODE_MODE = ["submit_tool_results"]  # a result is any JSON: never strict (docs/code-mode.md)


def test_run_code_takes_a_session_id_beside_the_spec_params() -> None:
    run_code = next(t for t in render_all("mcp") if t["name"] == "run_code")
    assert "session_id" in run_code["inputSchema"]["properties"]
    assert "session_id" not in next(t for t in TOOLS if t.name == "run_code").parameters["properties"]


def _name(tool: dict[str, Any]) -> str:
    return str(tool["function"]["name"] if "function" in tool else tool["name"])


def _schema(tool: dict[str, Any]) -> dict[str, Any]:
    for key in ("parameters", "input_schema", "inputSchema"):
        if key in tool:
            return dict(tool[key])
    return dict(tool["function"]["parameters"])


@pytest.mark.parametrize("format", FORMATS)
def test_every_schema_is_valid_json_schema(format: str) -> None:
    for tool in render_all(format, with_create_skill=True):
        schema = _schema(tool)
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft7Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert TOOL_NAME.fullmatch(_name(tool))
        assert _name(tool) in METHODS


def test_openai_shape() -> None:
    for tool in render_all("openai", with_create_skill=True):
        assert tool.keys() == {"type", "function"} and tool["type"] == "function"
        assert tool["function"].keys() == {"name", "description", "parameters"}


def test_anthropic_shape() -> None:
    for tool in render_all("anthropic", with_create_skill=True):
        assert tool.keys() == {"name", "description", "input_schema"}


def test_mcp_tools_are_valid_for_the_mcp_sdk() -> None:
    for tool in render_all("mcp", with_create_skill=True):
        assert tool.keys() == {"name", "description", "inputSchema"}
        parsed = mcp_types.Tool.model_validate(tool)
        assert parsed.name == tool["name"] and parsed.input_schema == tool["inputSchema"]


def test_jsonschema_names_its_dialect() -> None:
    for tool in render_all("jsonschema"):
        assert tool["parameters"]["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def _check_strict(schema: dict[str, Any], where: str) -> None:
    """OpenAI's strict rules, recursively."""
    assert "default" not in schema, where
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if "enum" in schema and "null" in types:
        assert None in schema["enum"], where
    if "object" in types:
        assert schema.get("additionalProperties") is False, where
        assert "properties" in schema, where
        assert sorted(schema["required"]) == sorted(schema["properties"]), where
        for key, child in schema["properties"].items():
            _check_strict(child, f"{where}.{key}")
    if "array" in types:
        _check_strict(schema["items"], f"{where}[]")


def test_openai_strict_follows_the_strict_rules() -> None:
    rendered = render_all("openai", strict=True, with_create_skill=True)
    strict = {t["function"]["name"] for t in rendered if t["function"]["strict"]}
    # The tools whose schemas have a free-form object (args, manifest) cannot be strict.
    assert strict == {n for n in [*EIGHT, *SESSIONS] if n not in ("execute_skill", "run_code")}
    for tool in rendered:
        function = tool["function"]
        jsonschema.Draft202012Validator.check_schema(function["parameters"])
        if function["strict"]:
            _check_strict(function["parameters"], function["name"])
        else:
            plain = next(t for t in tools(with_create_skill=True) if t.name == function["name"])
            assert not strict_allowed(plain) and function["parameters"] == plain.parameters


def test_strict_optional_fields_are_nullable_and_keep_their_default_in_words() -> None:
    list_skills = render_all("openai", strict=True)[0]["function"]["parameters"]
    assert list_skills["properties"]["detail"] == {
        "type": ["string", "null"],
        "enum": ["names", "summary", None],
        "description": "Level of detail to return (default: names)",
    }
    read_blob = render_all("openai", strict=True)[6]["function"]["parameters"]
    assert read_blob["properties"]["blob_id"]["type"] == "string"  # required: not nullable


def test_unknown_format_and_strict_misuse_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown tool format"):
        render_all("gemini")
    with pytest.raises(ValueError, match="openai format only"):
        render_all("anthropic", strict=True)


# -- every tool is a method the server answers ------------------------------------


def _example_arguments(rpc: Callable[..., dict[str, Any]]) -> dict[str, dict[str, Any]]:
    blob = rpc("create_blob", {"content": "a,b\n1,2\n", "kind": "text/csv"})["result"]["blob_id"]
    forked = rpc("create_session", {"language": "python"})["result"]["session_id"]
    closed = rpc("create_session", {"language": "python"})["result"]["session_id"]
    waiting = rpc("run_code", {
        "language": "python", "code": "from runtime import tools\ntools.ask(q='x')",
        "tools": [{"name": "ask", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}],
    })["result"]
    return {
        "submit_tool_results": {
            "run_id": waiting["run_id"], "results": [{"call_id": waiting["tool_calls"][0]["call_id"], "result": "y"}],
        },
        "create_session": {"language": "python", "idle_timeout_s": 60, "skills": []},
        "fork_session": {"session_id": forked},
        "close_session": {"session_id": closed},
        "list_sessions": {},
        "list_skills": {"namespace": "data", "detail": "summary", "limit": 5},
        "describe_skill": {"name": "data.csv.profile", "detail": "full"},
        "read_skill_file": {"name": "data.csv.profile", "path": "SKILL.md"},
        "execute_skill": {"name": "data.csv.profile", "args": {"blob_id": blob}, "input_blobs": [blob]},
        "run_code": {
            "language": "python", "code": "def main(args):\n    return args['x'] * 2\n",
            "args": {"x": 21}, "limits": {"timeout_ms": 20000},
        },
        "create_blob": {"content": "hello", "kind": "text/plain"},
        "run_command": {"command": "echo $GREETING | tr a-z A-Z", "env": {"GREETING": "hi"}, "cwd": "/tmp",
                        "limits": {"timeout_ms": 20000}},
        "read_blob": {"blob_id": blob, "mode": "sample_tail", "max_bytes": 4},
        "load_skills_protocol_guide": {},
        "create_skill": {
            "manifest": {"name": "user.tooltest", "version": "0.1.0", "description": "d", "kind": "instruction"},
            "skill_md": "# tooltest\n",
            "files": [{"path": "resources/a.md", "content": "x"}],
        },
    }


def test_each_tool_with_schema_valid_arguments_is_answered(rpc: Callable[..., dict[str, Any]]) -> None:
    examples = _example_arguments(rpc)
    for tool in render_all("jsonschema", with_create_skill=True):
        arguments = examples[tool["name"]]
        jsonschema.validate(arguments, tool["parameters"])
        answer = rpc(tool["name"], arguments)
        assert "result" in answer, (tool["name"], answer)
    assert rpc("run_code", examples["run_code"])["result"]["output"] == 42
    ran = rpc("run_command", examples["run_command"])["result"]
    assert (ran["exit_code"], ran["stdout"], ran["stderr"]) == (0, "HI\n", "")


def test_strict_arguments_with_nulls_are_answered(rpc: Callable[..., dict[str, Any]]) -> None:
    """A strict-mode model sends every field, null for the ones it leaves out."""
    examples = _example_arguments(rpc)
    for tool in render_all("openai", strict=True):
        function = tool["function"]
        if not function["strict"]:
            continue
        given = examples[function["name"]]
        arguments = {key: given.get(key) for key in function["parameters"]["properties"]}
        jsonschema.validate(arguments, function["parameters"])
        answer = rpc(function["name"], arguments)
        assert "result" in answer, (function["name"], answer)


def test_get_tools_over_http(client: TestClient) -> None:
    for format in FORMATS:
        response = client.get("/tools", params={"format": format})
        assert response.status_code == 200
        assert response.json() == render_all(format)
    strict = client.get("/tools?format=openai&strict=true&with_create_skill=true").json()
    assert strict == render_all("openai", strict=True, with_create_skill=True)
    assert client.get("/tools").json() == render_all("jsonschema")
    bad = client.get("/tools?format=" + "x" * 5000)
    assert bad.status_code == 400 and "unknown format" in bad.json()["error"] and len(bad.text) < 300
    assert client.get("/tools?format=anthropic&strict=true").status_code == 400
    assert client.get("/tools?format=openai&strict=maybe").status_code == 400


@pytest.mark.parametrize("args", [
    ["--format", "openai"], ["--format", "openai", "--strict", "--with-create-skill"],
    ["--format", "anthropic"], ["--format", "mcp"], [],
])
def test_cli_prints_one_json_array(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wasmrun", "tools", *args],
        env=wasmrun_env(), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    format = args[1] if args else "jsonschema"
    expected = render_all(format, strict="--strict" in args, with_create_skill="--with-create-skill" in args)
    assert json.loads(done.stdout) == expected


def test_cli_refuses_strict_outside_openai() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wasmrun", "tools", "--format", "mcp", "--strict"],
        env=wasmrun_env(), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2 and "openai format only" in done.stderr and done.stdout == ""


# -- the run tools state this server (issue 24) ---------------------------------------

NAME_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's and Anthropic's tool names


def test_run_tools_teach_the_contract_and_state_the_server() -> None:
    from wasmrun.capabilities import ServerFacts

    facts = ServerFacts()
    assert "json" in facts.image.modules and "sqlite3" in facts.image.modules and "runtime" not in facts.image.modules
    for tool in render_all("anthropic"):
        assert NAME_RULE.fullmatch(tool["name"]) and tool["input_schema"]["type"] == "object"
        if tool["name"] not in ("run_code", "execute_skill"):
            continue
        text = tool["description"]
        for phrase in ("/blobs/<id>", "stateless", "timeout_ms 30000 (max 900000)", "memory_mb 256 (max 2048)"):
            assert phrase in text, (tool["name"], phrase)
        limits = tool["input_schema"]["properties"]["limits"]
        assert set(limits["properties"]) == {"timeout_ms", "memory_mb", "cpu_ms", "workspace_mb", "output_bytes"}
        for member, (lowest, default, ceiling) in facts.limit_bounds().items():
            schema = limits["properties"][member]
            assert (schema["minimum"], schema["maximum"]) == (lowest, ceiling)
            assert f"default {default}, at most {ceiling}" in schema["description"]
    run_code = next(t for t in render_all("anthropic") if t["name"] == "run_code")["description"]
    assert "main(args)" in run_code and "last line" in run_code and "sqlite3" in run_code
    assert "Network: none for run_code" in run_code


def test_limits_schema_follows_openai_strict_rules() -> None:
    from wasmrun.tools import _strict_schema

    for tool in render_all("openai", strict=True):
        function = tool["function"]
        assert NAME_RULE.fullmatch(function["name"])
        limits = function["parameters"]["properties"].get("limits")
        if limits is not None:  # its tool is not strict (free-form args), its limits could be
            strict = _strict_schema(limits)
            _check_strict(strict, function["name"] + ".limits")
            jsonschema.Draft202012Validator.check_schema(strict)
            jsonschema.validate({"timeout_ms": 5, "memory_mb": None, "cpu_ms": None, "workspace_mb": None,
                                 "output_bytes": None}, strict)


def test_a_servers_own_limits_reach_its_tools(tmp_path: Path) -> None:
    from wasmrun.capabilities import facts_of
    from wasmrun.limits import MiB
    from wasmrun.sandbox import LimitPolicy, Limits

    policy = LimitPolicy(defaults=Limits(timeout_ms=5_000), ceilings=Limits(timeout_ms=60_000, memory_bytes=512 * MiB))
    facts = facts_of(policy, ["https://api.example.com/*"])
    run_code = next(t for t in render_all("jsonschema", facts=facts) if t["name"] == "run_code")
    limits = run_code["parameters"]["properties"]["limits"]["properties"]
    assert limits["timeout_ms"]["maximum"] == 60_000 and "default 5000" in limits["timeout_ms"]["description"]
    assert limits["memory_mb"]["maximum"] == 512
    assert "run_code may reach https://api.example.com/*" in run_code["description"]
    jsonschema.validate({"language": "python", "code": "1", "limits": {"timeout_ms": 60_000}}, run_code["parameters"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"language": "python", "code": "1", "limits": {"timeout_ms": 60_001}}, run_code["parameters"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"language": "python", "code": "1", "limits": {"timeout": 1}}, run_code["parameters"])
