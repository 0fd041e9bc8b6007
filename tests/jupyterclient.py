"""A small Jupyter messaging client over the channels WebSocket (websockets' sync client),
for tests that look at the messages themselves; the real clients' tests use theirs."""

from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from typing import Any

import httpx2
from websockets.sync.client import ClientConnection, connect


def start_kernel(base_url: str, token: str) -> str:
    answer = httpx2.post(f"{base_url}/api/kernels", json={"name": "python3"}, headers={"Authorization": f"token {token}"})
    assert answer.status_code == 201, answer.text
    kernel_id: str = answer.json()["id"]
    return kernel_id


class KernelSocket:
    def __init__(self, base_url: str, kernel_id: str, token: str, session_id: str | None = None, **options: Any) -> None:
        """`session_id`: the client session, in the URL as jupyter_server's clients send it."""
        url = base_url.replace("http://", "ws://") + f"/api/kernels/{kernel_id}/channels?token={token}"
        if session_id is not None:
            url += "&" + urllib.parse.urlencode({"session_id": session_id})
        self.ws: ClientConnection = connect(url, max_size=None, **options)
        self.session = session_id or uuid.uuid4().hex

    def close(self) -> None:
        self.ws.close()

    def send(self, msg_type: str, content: dict[str, Any] | None = None, channel: str = "shell") -> dict[str, Any]:
        header = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": self.session, "username": "test",
                  "date": "2026-01-01T00:00:00Z", "version": "5.3"}
        self.ws.send(json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content or {},
                                 "channel": channel, "buffers": []}))
        return header

    def recv(self, timeout: float = 60) -> dict[str, Any]:
        frame = self.ws.recv(timeout=timeout)
        assert isinstance(frame, str), "every frame is JSON text"
        message: dict[str, Any] = json.loads(frame)
        return message

    def until_done(self, header: dict[str, Any], timeout: float = 60) -> list[dict[str, Any]]:
        """The messages parented to `header` until its reply and the idle after it."""
        got: list[dict[str, Any]] = []
        replied = idle = False
        deadline = time.monotonic() + timeout
        while not (replied and idle):
            message = self.recv(max(0.1, deadline - time.monotonic()))
            message["received_at"] = time.monotonic()
            if message["parent_header"].get("msg_id") != header["msg_id"]:
                continue
            got.append(message)
            replied = replied or message["channel"] in ("shell", "control")
            idle = idle or (message["msg_type"] == "status" and message["content"]["execution_state"] == "idle")
        return got

    def execute(self, code: str, **content: Any) -> list[dict[str, Any]]:
        return self.until_done(self.send("execute_request", {"code": code, "silent": False, **content}))


def of_type(messages: list[dict[str, Any]], msg_type: str) -> list[dict[str, Any]]:
    return [m for m in messages if m["msg_type"] == msg_type]


def stdout(messages: list[dict[str, Any]]) -> str:
    return "".join(m["content"]["text"] for m in of_type(messages, "stream") if m["content"]["name"] == "stdout")


def stderr(messages: list[dict[str, Any]]) -> str:
    return "".join(m["content"]["text"] for m in of_type(messages, "stream") if m["content"]["name"] == "stderr")


def reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    found = [m for m in messages if m["channel"] in ("shell", "control")]
    assert len(found) == 1, found
    return found[0]
