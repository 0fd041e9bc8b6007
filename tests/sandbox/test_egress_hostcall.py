"""The `http_request` host call taking whatever the guest passes: malformed
requests are errors the guest sees, never a host failure, and nothing is sent."""

from __future__ import annotations

import json

from tests.egress_server import serve
from wasmrun.egress.policy import NetworkGrant
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.guest.jsontext import encode_args

RAW = """\
import json
import _wasmrun

def main(args):
    out = []
    cases = [(m.encode("utf-8", "surrogatepass") if isinstance(m, str) else b"x" * m, b"") for m in args["metas"]]
    big_body = json.dumps({"method": "POST", "url": args["url"], "has_body": True}).encode()
    cases.append((big_body, b"y" * (3 << 20)))  # a body past the limit
    for meta, body in cases:
        reply = _wasmrun.http_request(meta, body)
        head = json.loads(reply[4 : 4 + int.from_bytes(reply[:4], "little")])
        out.append(head.get("error"))
    return out
"""


def test_malformed_host_calls_are_guest_errors(engine: SandboxEngine) -> None:
    with serve() as server:
        url = server.url + "/json"
        metas = [
            "",
            "{",
            "[]",
            '{"method": 1, "url": "x"}',
            json.dumps({"method": "GET", "url": url, "headers": [["a"]]}),
            json.dumps({"method": "GET", "url": url, "timeout": "soon"}),
            json.dumps({"method": "GET", "url": url, "surprise": True}),
            json.dumps({"method": "GET", "url": url, "headers": [["X", "\ud800"]]}),
            400_000,  # larger than any request head may be
        ]
        grant = NetworkGrant(subject="run_code", requested=None, granted=[server.url], allow_private=True)
        result = engine.run(RunRequest(kind="code", code=RAW, args_json=encode_args({"metas": metas, "url": url}), network=grant))
        assert result.status == "completed", result.error
        assert result.output == ["NetworkError"] * (len(metas) - 1) + ["NetworkLimitExceeded"] * 2
        assert server.seen == []
