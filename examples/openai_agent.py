"""An agent loop in OpenAI's Chat Completions format, with wasmrun as its tools.

    pip install wasmrun openai
    wasmrun serve &
    OPENAI_API_KEY=... python examples/openai_agent.py "Profile this CSV: a,b\\n1,2\\n3,4"

The tool definitions come from the server (`GET /tools?format=openai&strict=true`);
each tool call the model makes is one protocol call, dispatched by name through
wasmrun.client. `run_agent` takes the model as a function, so the loop runs the
same with a real model (`main`) or a scripted one (tests/packaging/test_examples.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from wasmrun.client import Client, RPCError

# messages, tools -> the assistant's message (a dict in the Chat Completions shape)
Model = Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, Any]]

SYSTEM = (
    "You can run Python in a sandbox through the Skills Protocol tools. Call load_skills_protocol_guide"
    " first; keep large data in blobs."
)


def dispatch(client: Client, name: str, arguments: str) -> str:
    """One tool call -> the text of its tool message (a protocol error is text too: the model reads it)."""
    try:
        result = client.call(name, json.loads(arguments or "{}"))
    except RPCError as exc:
        return json.dumps({"error": {"code": exc.code, "message": exc.message, "data": exc.data}})
    return json.dumps(result)


def run_agent(model: Model, client: Client, task: str, max_turns: int = 10) -> str:
    tools = client.tools("openai", strict=True)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for _ in range(max_turns):
        reply = model(messages, tools)
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            return str(reply.get("content") or "")
        for call in calls:
            content = dispatch(client, call["function"]["name"], call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    raise RuntimeError(f"no answer after {max_turns} turns")


def main() -> None:
    from openai import OpenAI  # the real model; not a dependency of wasmrun

    openai = OpenAI()

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        response = openai.chat.completions.create(model="gpt-4.1", messages=messages, tools=tools)
        return response.choices[0].message.model_dump(exclude_none=True)

    with Client("http://127.0.0.1:8080") as client:
        print(run_agent(model, client, " ".join(sys.argv[1:]) or "What skills are there?"))


if __name__ == "__main__":
    main()
