"""The typed client's params (wasmrun/client/__init__.py): each method's arguments as the protocol's
params (wasmrun/protocol/types.py), checked on the way: an unknown limit is a TypeError naming
it; tools, results and skill files given as dicts are converted to their types."""

from __future__ import annotations

import base64
from typing import Any, Literal, TypeVar

import msgspec

from wasmrun.protocol.types import (
    CreateBlobParams,
    CreateSessionParams,
    ExecuteSkillParams,
    RunCodeParams,
    RunCommandParams,
    RunLimits,
    SkillFile,
    SubmitToolResultsParams,
    ToolDefinition,
    ToolResult,
)

Language = Literal["python"]


def blob_params(content: str | bytes, kind: str) -> CreateBlobParams:
    if isinstance(content, bytes):
        return CreateBlobParams(content=base64.b64encode(content).decode(), kind=kind, encoding="base64")
    return CreateBlobParams(content=content, kind=kind)


Limits = RunLimits | dict[str, int]


def run_limits(limits: Limits | None, timeout_ms: int | None) -> RunLimits:
    """`limits` as a RunLimits (a dict is checked here: an unknown name is a TypeError
    naming it), with `timeout_ms` in it when given on its own."""
    if isinstance(limits, dict):
        unknown = sorted(set(limits) - set(RunLimits.__struct_fields__))
        if unknown:
            raise TypeError(f"unknown limits {unknown}; known: {', '.join(RunLimits.__struct_fields__)}")
        limits = RunLimits(**limits)
    limits = limits or RunLimits()
    if timeout_ms is not None:
        limits = msgspec.structs.replace(limits, timeout_ms=timeout_ms)
    return limits


def run_code_params(
    code: str, language: Language, entrypoint: str, args: dict[str, Any] | None, mount_skills: list[str] | None,
    input_blobs: list[str] | None, limits: RunLimits, session_id: str | None = None,
    packages: list[str] | None = None, tools: ToolList | None = None, tool_wait_ms: int | None = None,
) -> RunCodeParams:
    return RunCodeParams(
        language=language,
        code=code, entrypoint=entrypoint, args=args or {}, mount_skills=mount_skills or [],
        input_blobs=input_blobs or [], limits=limits, session_id=session_id, packages=packages or [],
        tools=tool_definitions(tools), tool_wait_ms=tool_wait_ms,
    )


ToolList = list[ToolDefinition] | list[dict[str, Any]]


def tool_definitions(tools: ToolList | None) -> list[ToolDefinition]:
    """Code mode's tools (docs/code-mode.md): ToolDefinitions, or dicts of name, description, parameters."""
    return [t if isinstance(t, ToolDefinition) else msgspec.convert(t, ToolDefinition) for t in tools or []]


def submit_params(run_id: str, results: list[ToolResult] | list[dict[str, Any]]) -> SubmitToolResultsParams:
    return SubmitToolResultsParams(
        run_id=run_id, results=[r if isinstance(r, ToolResult) else msgspec.convert(r, ToolResult) for r in results],
    )


def run_command_params(
    command: str | list[str], cwd: str | None, env: dict[str, str] | None, stdin: str | None,
    timeout_ms: int | None, limits: Limits | None, session_id: str | None, packages: list[str] | None = None,
) -> RunCommandParams:
    return RunCommandParams(
        command=command, cwd=cwd, env=env or {}, stdin=stdin, limits=run_limits(limits, timeout_ms), session_id=session_id,
        packages=packages or [],
    )


def execute_skill_params(
    name: str, args: dict[str, Any] | None, version: str | None, input_blobs: list[str] | None,
    timeout_ms: int | None, limits: Limits | None,
) -> ExecuteSkillParams:
    return ExecuteSkillParams(
        name=name, version=version, args=args or {}, input_blobs=input_blobs or [],
        # Only a timeout: the spec's own top-level field, which any server takes.
        timeout_ms=timeout_ms if limits is None else None,
        limits=run_limits(limits, None if limits is None else timeout_ms),
    )


def create_session_params(
    limits: RunLimits | dict[str, int] | None, idle_timeout_s: int | None, skills: list[str] | None,
    packages: list[str] | None = None,
) -> CreateSessionParams:
    if isinstance(limits, dict):
        limits = msgspec.convert(limits, RunLimits)
    return CreateSessionParams(
        language="python", limits=limits or RunLimits(), idle_timeout_s=idle_timeout_s, skills=skills or [],
        packages=packages or [],
    )


StreamedParams = TypeVar("StreamedParams", RunCodeParams, ExecuteSkillParams, SubmitToolResultsParams)


def streamed(params: StreamedParams) -> StreamedParams:
    return msgspec.structs.replace(params, stream=True)


def skill_files(files: list[SkillFile] | list[dict[str, str]] | None) -> list[SkillFile]:
    return [f if isinstance(f, SkillFile) else msgspec.convert(f, SkillFile) for f in files or []]
