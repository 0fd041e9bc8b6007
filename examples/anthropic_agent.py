"""An agent loop in Anthropic's Messages format, with wasmrun as its tools.

    pip install wasmrun anthropic
    wasmrun serve &
    ANTHROPIC_API_KEY=... python examples/anthropic_agent.py "Profile this CSV: a,b\\n1,2\\n3,4"

The tool definitions come from the server (`GET /tools?format=anthropic`); each
`tool_use` block is one protocol call, dispatched by name through wasmrun.client,
and answered with a `tool_result` block (`is_error` for a protocol error).
`run_agent` takes the model as a function, so the loop runs the same with a real
model (`main`) or a scripted one (tests/packaging/test_examples.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from wasmrun.client import Client, RPCError

# system, messages, tools -> the assistant's message (a dict in the Messages shape)
Model = Callable[[str, list[dict[str, Any]], list[dict[str, Any]]], dict[str, Any]]

SYSTEM = (
    "You can run Python in a sandbox through the Skills Protocol tools. Call load_skills_protocol_guide"
    " first; keep large data in blobs."
)


def dispatch(client: Client, block: dict[str, Any]) -> dict[str, Any]:
    """One tool_use block -> its tool_result block."""
    try:
        content, is_error = json.dumps(client.call(block["name"], block["input"])), False
    except RPCError as exc:
        content, is_error = exc.message, True
    return {"type": "tool_result", "tool_use_id": block["id"], "content": content, "is_error": is_error}


def run_agent(model: Model, client: Client, task: str, max_turns: int = 10) -> str:
    tools = client.tools("anthropic")
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for _ in range(max_turns):
        reply = model(SYSTEM, messages, tools)
        messages.append({"role": "assistant", "content": reply["content"]})
        uses = [block for block in reply["content"] if block["type"] == "tool_use"]
        if reply.get("stop_reason") != "tool_use" or not uses:
            return "".join(block["text"] for block in reply["content"] if block["type"] == "text")
        messages.append({"role": "user", "content": [dispatch(client, block) for block in uses]})
    raise RuntimeError(f"no answer after {max_turns} turns")


def main() -> None:
    import anthropic  # the real model; not a dependency of wasmrun

    claude = anthropic.Anthropic()

    def model(system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        response = claude.messages.create(
            model="claude-sonnet-4-5", max_tokens=4096, system=system, messages=messages, tools=tools
        )
        return response.model_dump(exclude_none=True)

    with Client("http://127.0.0.1:8080") as client:
        print(run_agent(model, client, " ".join(sys.argv[1:]) or "What skills are there?"))


if __name__ == "__main__":
    main()
