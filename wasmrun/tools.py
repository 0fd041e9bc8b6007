"""The LLM tool surface: the spec's eight tools (plus `create_skill`) in one place,
rendered for each LLM integration.

`TOOLS` holds the names, descriptions and parameter schemas exactly as the spec's
"Tool Schemas" section writes them (the spec gives no schema for `create_skill`;
ours follows its `create_skill` request). Every other shape is derived from it:

    jsonschema  {"name", "description", "parameters"}  parameters with "$schema"
    openai      {"type": "function", "function": {"name", "description", "parameters"[, "strict"]}}
    anthropic   {"name", "description", "input_schema"}
    mcp         {"name", "description", "inputSchema"}

OpenAI's strict mode (`strict=True`) needs every object to list all its properties
as required and to forbid others. Optional properties become nullable (the server
takes `null` as "omitted"), defaults move into the description (strict mode does
not take `default`). A schema with a free-form object (`args`, `manifest`) cannot
be written that way; those tools keep their plain schema with `"strict": false`.

Each tool name is the JSON-RPC method it calls, with the same params.

`run_code` and `execute_skill` are then stated for the server that offers them
(capabilities.py): the run contract, what its guest can import, /blobs/<id>,
statelessness, and each `limits` member with its default and ceiling.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any, Literal, get_args

from wasmrun.capabilities import ServerFacts

Format = Literal["openai", "anthropic", "mcp", "jsonschema"]
FORMATS: tuple[str, ...] = get_args(Format)
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", **extra, "description": description}


def _strings(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


_VERSION = _string("Skill version (omit for latest)")

TOOLS: tuple[Tool, ...] = (
    Tool(
        "list_skills",
        "Enumerate available skills, optionally filtering by namespace. Results are deterministically sorted.",
        {
            "type": "object",
            "properties": {
                "namespace": _string("Optional namespace to filter skills (e.g., 'salesforce')"),
                "detail": {
                    "type": "string",
                    "enum": ["names", "summary"],
                    "default": "names",
                    "description": "Level of detail to return",
                },
                "limit": {"type": "integer", "default": 50, "description": "Maximum number of results"},
                "cursor": _string("Pagination cursor from previous response"),
            },
        },
    ),
    Tool(
        "describe_skill",
        "Retrieve a skill's manifest and documentation frontmatter.",
        {
            "type": "object",
            "properties": {
                "name": _string("Skill name (e.g., 'salesforce.leads.sync')"),
                "version": _VERSION,
                "detail": {
                    "type": "string",
                    "enum": ["manifest", "summary", "full"],
                    "default": "summary",
                    "description": "Level of detail to return",
                },
            },
            "required": ["name"],
        },
    ),
    Tool(
        "read_skill_file",
        "Read any file in a skill's directory (e.g., SKILL.md, extra docs, schemas).",
        {
            "type": "object",
            "properties": {
                "name": _string("Skill name"),
                "version": _VERSION,
                "path": _string("Path to file within skill directory (e.g., 'SKILL.md')"),
            },
            "required": ["name", "path"],
        },
    ),
    Tool(
        "execute_skill",
        "Execute a skill's entrypoint in an ephemeral sandbox.",
        {
            "type": "object",
            "properties": {
                "name": _string("Skill name"),
                "version": _VERSION,
                "args": {"type": "object", "description": "JSON-serializable arguments to pass to the skill"},
                "input_blobs": _strings("Blob IDs to mount in the sandbox"),
                "timeout_ms": {"type": "integer", "description": "Execution timeout in milliseconds"},
            },
            "required": ["name"],
        },
    ),
    Tool(
        "run_code",
        "Execute LLM-written code in a sandbox with specified skills and blobs mounted.",
        {
            "type": "object",
            "properties": {
                "language": _string("Programming language (MVP: python only)", enum=["python"]),
                "code": _string("Source code to execute"),
                "entrypoint": _string("Function name to call", default="main"),
                "args": {"type": "object", "description": "Arguments to pass to entrypoint function"},
                "mount_skills": _strings("Skill names to mount in sandbox"),
                "input_blobs": _strings("Blob IDs to mount in sandbox"),
                "limits": {
                    "type": "object",
                    "properties": {"timeout_ms": {"type": "integer"}},
                    "description": "Execution limits",
                },
            },
            "required": ["language", "code"],
        },
    ),
    Tool(
        "create_blob",
        "Store large content as a blob and return its ID.",
        {
            "type": "object",
            "properties": {
                "content": _string("Content to store"),
                "kind": _string("MIME type (e.g., 'text/plain', 'application/json')"),
            },
            "required": ["content", "kind"],
        },
    ),
    Tool(
        "read_blob",
        "Retrieve a preview of blob content. Full reads discouraged for large blobs.",
        {
            "type": "object",
            "properties": {
                "blob_id": _string("Blob identifier"),
                "mode": _string(
                    "How to sample the blob", enum=["sample_head", "sample_tail", "full"], default="sample_head"
                ),
                "max_bytes": {"type": "integer", "default": 2000, "description": "Maximum bytes to return"},
            },
            "required": ["blob_id"],
        },
    ),
    Tool(
        "load_skills_protocol_guide",
        "Load the Skills Protocol Guide to learn how to use these tools."
        " Call this first if you haven't read the guide yet.",
        {"type": "object", "properties": {}},
    ),
)

_SESSION_ID = _string("A session's id, from create_session or fork_session")
# Extension: packages installed on demand (docs/packages.md), pure-Python wheels from the index.
_PACKAGES = _strings("Packages to install from the package index first, e.g. 'humanize==4.9.0' (pure-Python only)")
# Extensions: stateful sessions (docs/sessions.md). run_code takes `session_id` to run in one.
SESSION_TOOLS: tuple[Tool, ...] = (
    Tool(
        "create_session",
        "Start a Python session: globals, imports, /workspace and /tmp carry over between run_code calls that"
        " pass its session_id (like notebook cells). A run stopped by a limit is undone; an exception is not.",
        {
            "type": "object",
            "properties": {
                "language": _string("Programming language (python only)", enum=["python"]),
                # Filled with the server's own limits schema (_for_server).
                "limits": {"type": "object", "description": "Limits of every run in the session"},
                "idle_timeout_s": {"type": "integer", "description": "End the session after this long unused"},
                "skills": _strings("Skill names to mount in every run"),
                "packages": _PACKAGES,
            },
            "required": ["language"],
        },
    ),
    Tool(
        "fork_session",
        "Copy a session (memory and files) into a new one; the two then evolve apart.",
        {"type": "object", "properties": {"session_id": _SESSION_ID}, "required": ["session_id"]},
    ),
    Tool(
        "close_session",
        "End a session and delete its state.",
        {"type": "object", "properties": {"session_id": _SESSION_ID}, "required": ["session_id"]},
    ),
    Tool("list_sessions", "List your open sessions.", {"type": "object", "properties": {}}),
)

# Extension: the guest's shell (docs/commands.md), in a fresh sandbox or a session.
COMMAND_TOOLS: tuple[Tool, ...] = (
    Tool(
        "run_command",
        "Run a shell command line (bash syntax: pipes, redirections, &&, globs, $(...)) in the sandbox, over its"
        " files (/workspace, also /home/user): ls, cat, grep, sed, awk, find, sort, jq, tar and more, plus python"
        " and pip on the sandbox's own Python. Answers exit_code, stdout and stderr. No other programs run.",
        {
            "type": "object",
            "properties": {
                "command": {
                    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}],
                    "description": "A command line in bash syntax, or an argv list (each item one word, no expansion)",
                },
                "cwd": _string("Working folder (default: /workspace)"),
                "env": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "Environment variables for the command"},
                "stdin": _string("Text given to the command on its standard input"),
                "mount_skills": _strings("Skill names to mount at /skills/<name> (not in a session: its own)"),
                "input_blobs": _strings("Blob IDs to mount at /blobs/<id>"),
                "session_id": _string("Run inside this session (create_session): its files carry over"),
                "packages": _PACKAGES,
                # Filled with the server's own limits schema (_for_server).
                "limits": {"type": "object", "description": "Execution limits"},
            },
            "required": ["command"],
        },
    ),
)

# Extension: code mode (docs/code-mode.md): the run calls the client's own tools and pauses for them.
_CODE_MODE_PROPERTIES: dict[str, Any] = {
    "tools": {
        "type": "array",
        "description": "Your own tools the code may call: `from runtime import tools; tools.NAME(**arguments)`"
        " (or awaited). A call pauses the run; the answer is status 'requires_action' with tool_calls, and"
        " submit_tool_results continues it",
        "items": {
            "type": "object",
            "properties": {
                "name": _string("The tool's name (a Python identifier)"),
                "description": _string("What it does"),
                "parameters": {"type": "object", "description": "The JSON Schema of its arguments (an object's)"},
            },
            "required": ["name"],
        },
    },
    "tool_wait_ms": {"type": "integer", "description": "How long the run waits for one batch of answers"},
}
CODE_MODE_TOOLS: tuple[Tool, ...] = (
    Tool(
        "submit_tool_results",
        "Answer a run's pending tool calls (status 'requires_action'): one result or error per call_id. Answers"
        " with the run's result, or with its next tool_calls.",
        {
            "type": "object",
            "properties": {
                "run_id": _string("The waiting run's id"),
                "results": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "call_id": _string("The call answered"),
                            "result": {
                                "type": ["object", "array", "string", "number", "boolean"],
                                "description": "Its result (any JSON)",
                            },
                            "error": _string("Or its error message (raised in the run as ToolError)"),
                        },
                        "required": ["call_id"],
                    },
                },
            },
            "required": ["run_id", "results"],
        },
    ),
)

CREATE_SKILL = Tool(
    "create_skill",
    "Register a new skill (skill.toml as JSON, SKILL.md and its files). Paths must stay within the skill root.",
    {
        "type": "object",
        "properties": {
            "manifest": {
                "type": "object",
                "description": "skill.toml parsed as JSON (name, version, description, kind, runtime, ...)",
            },
            "skill_md": _string("The skill's SKILL.md"),
            "files": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": _string("Path within the skill (e.g., 'code/main.py')"),
                        "content": _string("File content"),
                        "encoding": _string(
                            "How content is written: 'base64' for binary files",
                            enum=["utf-8", "base64"],
                            default="utf-8",
                        ),
                    },
                    "required": ["path", "content"],
                },
                "description": "Files of the skill besides skill.toml and SKILL.md",
            },
        },
        "required": ["manifest", "skill_md"],
    },
)


def _for_server(tool: Tool, facts: ServerFacts) -> Tool:
    """The spec's run tools with this server's contract, packages and limits in their texts;
    run_code also takes a session_id (an extension)."""
    if tool.name == "run_code":
        parameters = copy.deepcopy(tool.parameters)
        parameters["properties"]["limits"] = facts.limits_schema()
        parameters["properties"]["args"]["description"] = "The object main(args) receives"
        parameters["properties"]["session_id"] = _string(
            "Run inside this session (create_session): its globals and files carry over"
        )
        parameters["properties"]["packages"] = _PACKAGES  # not in a session: create_session's
        parameters["properties"].update(copy.deepcopy(_CODE_MODE_PROPERTIES))
        return Tool(tool.name, facts.run_code_description(), parameters)
    if tool.name == "execute_skill":
        parameters = copy.deepcopy(tool.parameters)
        limits = facts.limits_schema()
        parameters["properties"]["limits"] = limits
        parameters["properties"]["timeout_ms"] = {
            **limits["properties"]["timeout_ms"], "description": "Same as limits.timeout_ms (the spec's place for it)"
        }
        return Tool(tool.name, facts.execute_skill_description(), parameters)
    if tool.name == "run_command":
        parameters = copy.deepcopy(tool.parameters)
        parameters["properties"]["limits"] = facts.limits_schema()
        parameters["properties"].update(copy.deepcopy(_CODE_MODE_PROPERTIES))
        return Tool(tool.name, tool.description, parameters)
    if tool.name == "create_session":
        parameters = copy.deepcopy(tool.parameters)
        parameters["properties"]["limits"] = {
            **facts.limits_schema(), "description": "Limits of every run in the session (a run may lower"
            " timeout_ms, cpu_ms and output_bytes for itself)",
        }
        return Tool(tool.name, tool.description, parameters)
    return tool


def tools(with_create_skill: bool = False, facts: ServerFacts | None = None) -> tuple[Tool, ...]:
    """The tools, their run texts stating `facts` (a default server's when None)."""
    facts = facts if facts is not None else _default_facts()
    chosen = (
        *TOOLS, *SESSION_TOOLS, *COMMAND_TOOLS, *CODE_MODE_TOOLS, *((CREATE_SKILL,) if with_create_skill else ())
    )
    return tuple(_for_server(tool, facts) for tool in chosen)


@functools.lru_cache(maxsize=1)
def _default_facts() -> ServerFacts:
    return ServerFacts()


# -- OpenAI strict mode ---------------------------------------------------------


def _has_free_form_object(schema: dict[str, Any]) -> bool:
    """An object without listed properties (strict mode cannot express one)."""
    kind = schema.get("type")
    if (kind == "object" or (isinstance(kind, list) and "object" in kind)) and "properties" not in schema:
        return True  # (a list of types with "object": a value that may be any object, as a tool's result)
    children = list(schema.get("properties", {}).values())
    if isinstance(schema.get("items"), dict):
        children.append(schema["items"])
    return any(_has_free_form_object(child) for child in children)


def strict_allowed(tool: Tool) -> bool:
    return not _has_free_form_object(tool.parameters)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema["type"]
    schema["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
    if "enum" in schema:
        schema["enum"] = [*schema["enum"], None]
    return schema


def _strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema = dict(schema)
    if "default" in schema:
        default = schema.pop("default")
        described = schema.get("description", "")
        schema["description"] = f"{described} (default: {default})".strip()
    if isinstance(schema.get("items"), dict):
        schema["items"] = _strict_schema(schema["items"])
    if schema.get("type") == "object":
        required = set(schema.get("required", ()))
        properties = {}
        for key, child in schema.get("properties", {}).items():
            child = _strict_schema(child)
            properties[key] = child if key in required else _nullable(child)
        schema["properties"] = properties
        schema["required"] = list(properties)
        schema["additionalProperties"] = False
    return schema


# -- renderers --------------------------------------------------------------------


def render(tool: Tool, format: Format, *, strict: bool = False) -> dict[str, Any]:
    parameters = copy.deepcopy(tool.parameters)
    if format == "jsonschema":
        parameters = {"$schema": JSON_SCHEMA_DIALECT, **parameters}
        return {"name": tool.name, "description": tool.description, "parameters": parameters}
    if format == "anthropic":
        return {"name": tool.name, "description": tool.description, "input_schema": parameters}
    if format == "mcp":
        return {"name": tool.name, "description": tool.description, "inputSchema": parameters}
    if format == "openai":
        function: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": parameters}
        if strict:
            allowed = strict_allowed(tool)
            if allowed:
                function["parameters"] = _strict_schema(parameters)
            function["strict"] = allowed
        return {"type": "function", "function": function}
    raise ValueError(f"unknown tool format {format!r}; one of: {', '.join(FORMATS)}")


def render_all(
    format: str, *, strict: bool = False, with_create_skill: bool = False, facts: ServerFacts | None = None
) -> list[dict[str, Any]]:
    """Every tool in one format. `strict` applies to the OpenAI format only."""
    if format not in FORMATS:
        raise ValueError(f"unknown tool format {format!r}; one of: {', '.join(FORMATS)}")
    if strict and format != "openai":
        raise ValueError("strict applies to the openai format only")
    chosen: Format = format  # type: ignore[assignment]
    return [render(tool, chosen, strict=strict) for tool in tools(with_create_skill, facts)]
